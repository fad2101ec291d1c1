// A jail snapshot imported from an archive (docs/snapshot-archive.md): its layer image becomes a snapshot
// of the sandbox it is imported into.
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "runtime/jail/jail_runtime.h"

namespace space::jail {

std::string JailRuntime::snapshotDirFor(const std::string& snapshot_id) const {
  return volume_.snapshotsDir() + "/" + snapshot_id;
}

Result<runtime::SnapshotRef> JailRuntime::adoptSnapshot(runtime::SnapshotRef ref,
                                                        const runtime::PersistedInstance& target, uint64_t disk_bytes) {
  std::ifstream in(ref.path + "/snapshot.json");
  auto meta = nlohmann::json::parse(in, nullptr, false);
  std::error_code ec;
  std::string image = ref.path + "/disk.img";
  if (!meta.is_object() || meta.value("runtime", "") != "jail" || meta.value("kind", "") != "filesystem" ||
      !meta.contains("uid_base") || !std::filesystem::is_regular_file(image, ec))
    return makeError(ErrorKind::kInvalidArgument, "the archive does not hold a jail snapshot");
  // The layer must fit the sandbox's disk quota exactly (it is the sandbox's filesystem after a rollback).
  if (std::filesystem::file_size(image, ec) != std::max<uint64_t>(disk_bytes, 4ull << 20))
    return makeError(ErrorKind::kInvalidArgument,
                     "the snapshot's disk is {} bytes, sandbox {} has {}: import it into a sandbox made with "
                     "--disk {}M",
                     std::filesystem::file_size(image, ec), target.id, disk_bytes,
                     std::filesystem::file_size(image, ec) >> 20);
  ref.kind = "filesystem";
  struct stat st;
  if (stat(image.c_str(), &st) == 0) ref.size_bytes = static_cast<uint64_t>(st.st_blocks) * 512;
  return ref;
}

}  // namespace space::jail
