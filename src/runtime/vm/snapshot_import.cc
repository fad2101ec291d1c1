// A VM snapshot imported from an archive (docs/snapshot-archive.md), and a rollback a dead daemon left
// half-done.
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "runtime/vm/vm_runtime.h"

namespace space::vm {

Result<runtime::Instance> VmRuntime::finishRollback(runtime::Instance& old, const Result<runtime::SnapshotRef>& snap,
                                                    uint32_t files_uid_base) {
  if (!snap) return tl::unexpected(snap.error());
  return rollback(old, *snap);
}

std::string VmRuntime::snapshotDirFor(const std::string& snapshot_id) const {
  return config_.snapshots_dir.empty() ? "" : config_.snapshots_dir + "/" + snapshot_id;
}

// A VM snapshot holds the guest's pages relative to its template and a disk on the template's disk: it
// fits only a VM of the very same template build and machine shape.
Result<runtime::SnapshotRef> VmRuntime::adoptSnapshot(runtime::SnapshotRef ref,
                                                      const runtime::PersistedInstance& target, uint64_t disk_bytes) {
  std::ifstream in(ref.path + "/snapshot.json");
  auto meta = nlohmann::json::parse(in, nullptr, false);
  std::error_code ec;
  if (!meta.is_object() || meta.value("runtime", "") != "vm" || meta.value("kind", "") != "full")
    return makeError(ErrorKind::kInvalidArgument, "the archive does not hold a vm snapshot");
  if (meta.value("template", "") != target.state.value("template", "") ||
      meta.value("template_stamp", "") != target.state.value("template_stamp", ""))
    return makeError(ErrorKind::kInvalidArgument,
                     "the vm snapshot was made from another build or shape of the "
                     "template than sandbox {} runs",
                     target.id);
  bool sealed = std::filesystem::is_regular_file(ref.path + "/memory.sealed", ec);
  for (const char* f : {"state", "memory.pages"})
    if (!std::filesystem::is_regular_file(ref.path + "/" + f, ec))
      return makeError(ErrorKind::kInvalidArgument, "the vm snapshot lacks its {}", f);
  if (!sealed && !std::filesystem::is_regular_file(ref.path + "/memory", ec))
    return makeError(ErrorKind::kInvalidArgument, "the vm snapshot lacks its memory");
  if (meta.value("disk", false) && !std::filesystem::is_regular_file(ref.path + "/disk.qcow2", ec))
    return makeError(ErrorKind::kInvalidArgument, "the vm snapshot lacks its disk");
  ref.kind = "full";
  ref.size_bytes = 0;
  for (const auto& e : std::filesystem::directory_iterator(ref.path, ec)) {
    struct stat fst;
    if (lstat(e.path().c_str(), &fst) == 0) ref.size_bytes += static_cast<uint64_t>(fst.st_blocks) * 512;
  }
  return ref;
}

}  // namespace space::vm
