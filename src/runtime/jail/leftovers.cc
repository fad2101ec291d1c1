// findLeftovers: everything a sandbox could leave behind, read from the kernel (J24); forgetUnknown: what
// start-up reconciliation removes because no row names it.
#include <dirent.h>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/ids.h"
#include "runtime/jail/jail_runtime.h"

namespace space::jail {

std::string Leftovers::describe() const {
  std::string out;
  for (const auto& m : mounts) out += "mount " + m + "; ";
  for (const auto& c : cgroups) out += "cgroup " + c + "; ";
  for (int p : pids) out += "pid " + std::to_string(p) + "; ";
  return out.empty() ? "none" : out;
}

Result<Leftovers> findLeftovers(const std::string& state_dir, const std::string& cgroup_parent, uint32_t uid_lo,
                                uint32_t uid_hi) {
  Leftovers l;
  std::string prefix = state_dir + "/sandboxes/";
  std::ifstream mi("/proc/self/mountinfo");
  for (std::string line; std::getline(mi, line);) {
    std::istringstream f(line);
    std::string id, parent, dev, root, point;
    f >> id >> parent >> dev >> root >> point;
    if (point.rfind(prefix, 0) == 0) l.mounts.push_back(point);
  }
  auto backend = makeCgroupBackend(cgroup_parent);
  if (backend) l.cgroups = (*backend)->listGroups();
  DIR* proc = opendir("/proc");
  if (!proc) return sysError(errno, "opendir /proc");
  while (dirent* e = readdir(proc)) {
    int pid = std::atoi(e->d_name);
    if (pid <= 0) continue;
    std::ifstream st(std::string("/proc/") + e->d_name + "/status");
    for (std::string line; std::getline(st, line);) {
      if (line.rfind("Uid:", 0) != 0) continue;
      uint32_t ruid = static_cast<uint32_t>(std::strtoul(line.c_str() + 4, nullptr, 10));
      if (ruid >= uid_lo && ruid < uid_hi) l.pids.push_back(pid);
      break;
    }
  }
  closedir(proc);
  return l;
}

void JailRuntime::forgetUnknown(const runtime::Known& known) {
  // Directories no row knows about (a crash between mkdir and insert cannot happen, but a lost database
  // or a manual edit can): clean them with everything they own.
  std::string dir = sandboxesDir();
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      std::string name = e->d_name;
      if (!isValidSandboxId(name) || known.sandboxes.count(name)) continue;
      spdlog::warn("reconcile: removing orphaned sandbox directory {}", name);
      (void)destroy(runtime::PersistedInstance{name, "jail", {{"dir", dir + "/" + name}}});
    }
    closedir(d);
  }
  // Sandbox links of sandboxes that no longer exist (a crash between link and row update, a lost row).
  if (networked()) host::removeUnknownLinks(known.links);
  // Layer images no row knows about (a crash between clone and row). The volume is the node's: it holds
  // the VMs' disk overlays too.
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(volume_.layersDir(), ec)) {
    // .img: a jail's writable layer; .qcow2: a VM's disk overlay; .next: a rollback's unfinished clone.
    auto ext = entry.path().extension();
    if ((ext != ".img" && ext != ".qcow2") || known.sandboxes.count(entry.path().stem().string())) continue;
    spdlog::warn("reconcile: removing layer image {} of no sandbox", entry.path().string());
    std::filesystem::remove(entry.path(), ec);
  }
  // Snapshot files without a row: an interrupted snapshot (<id>.tmp, or renamed before its row) or import
  // (.<id>.import-*).
  for (const auto& entry : std::filesystem::directory_iterator(volume_.snapshotsDir(), ec)) {
    std::string name = entry.path().filename().string();
    if (known.snapshots.count(name)) continue;
    spdlog::warn("reconcile: removing snapshot files {} that no snapshot row names", name);
    std::filesystem::remove_all(entry.path(), ec);
  }
  // Clones made for a rollback that never finished.
  for (const auto& entry : std::filesystem::directory_iterator(volume_.layersDir(), ec)) {
    if (entry.path().extension() == ".next") std::filesystem::remove(entry.path(), ec);
  }
}

}  // namespace space::jail
