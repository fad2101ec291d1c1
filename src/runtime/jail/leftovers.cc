// findLeftovers: everything a sandbox could leave behind, read from the kernel (J24).
#include <dirent.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

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

}  // namespace space::jail
