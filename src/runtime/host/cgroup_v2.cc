// cgroup v2: one unified hierarchy; controllers must be enabled in every ancestor's cgroup.subtree_control.
// The sandbox group is a leaf (the "no internal processes" rule forbids processes in <parent> itself).
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <sstream>

#include "runtime/host/cgroup.h"

namespace space::host {

namespace {

constexpr uint64_t kCpuPeriodUs = 100000;

class CgroupV2 : public CgroupBackend {
 public:
  CgroupV2(std::string root, std::string parent) : root_(std::move(root)), parent_(std::move(parent)) {}
  CgroupKind kind() const override { return CgroupKind::kV2; }

  Status create(const std::string& id, const runtime::Limits& limits) override {
    std::string parent_dir = root_ + "/" + parent_;
    if (mkdir(parent_dir.c_str(), 0755) < 0 && errno != EEXIST) return sysError(errno, "mkdir {}", parent_dir);
    // Delegate the controllers down to our parent; a no-op where the host already enabled them.
    TRY(writeCgroupFile(root_ + "/cgroup.subtree_control", "+memory +pids +cpu"));
    TRY(writeCgroupFile(parent_dir + "/cgroup.subtree_control", "+memory +pids +cpu"));
    std::string dir = parent_dir + "/" + id;
    if (mkdir(dir.c_str(), 0755) < 0) return sysError(errno, "mkdir {}", dir);
    TRY(writeCgroupFile(dir + "/memory.max", std::to_string(limits.memory_bytes)));
    if (access((dir + "/memory.swap.max").c_str(), F_OK) == 0) TRY(writeCgroupFile(dir + "/memory.swap.max", "0"));
    TRY(writeCgroupFile(dir + "/pids.max", std::to_string(limits.pids)));
    uint64_t quota = static_cast<uint64_t>(limits.cpu_millis) * kCpuPeriodUs / 1000;
    TRY(writeCgroupFile(dir + "/cpu.max", fmt::format("{} {}", quota, kCpuPeriodUs)));
    return ok();
  }

  Status addProcess(const std::string& id, pid_t pid) override {
    return writeCgroupFile(dir(id) + "/cgroup.procs", std::to_string(pid));
  }

  Result<CgroupUsage> usage(const std::string& id) override {
    CgroupUsage u;
    ASSIGN_OR_RETURN(std::string mem, readCgroupFile(dir(id) + "/memory.current"));
    u.memory_bytes = std::strtoull(mem.c_str(), nullptr, 10);
    ASSIGN_OR_RETURN(std::string pids, readCgroupFile(dir(id) + "/pids.current"));
    u.pids = static_cast<uint32_t>(std::strtoul(pids.c_str(), nullptr, 10));
    ASSIGN_OR_RETURN(std::string stat, readCgroupFile(dir(id) + "/cpu.stat"));
    std::istringstream in(stat);
    for (std::string key; in >> key;) {
      uint64_t v = 0;
      in >> v;
      if (key == "usage_usec") u.cpu_usage_ns = v * 1000;
    }
    ASSIGN_OR_RETURN(u.oom_kills, oomKills(id));
    return u;
  }

  Result<uint64_t> oomKills(const std::string& id) override {
    ASSIGN_OR_RETURN(std::string events, readCgroupFile(dir(id) + "/memory.events"));
    return flatKeyedValue(events, "oom_kill");
  }

  Status freeze(const std::string& id, bool frozen) override {
    std::string d = dir(id);
    if (access((d + "/cgroup.freeze").c_str(), F_OK) != 0) {
      if (!frozen) return ok();
      return makeError(ErrorKind::kUnsupported, "no cgroup.freeze for {} (kernel older than 5.2?)", id);
    }
    TRY(writeCgroupFile(d + "/cgroup.freeze", frozen ? "1" : "0"));
    std::string want = frozen ? "frozen 1" : "frozen 0";
    return waitCgroupState(d + "/cgroup.events",
                           [&](const std::string& t) { return t.find(want) != std::string::npos; });
  }

  Result<std::vector<pid_t>> processes(const std::string& id) override {
    return readCgroupProcs(dir(id) + "/cgroup.procs");
  }

  Status remove(const std::string& id) override {
    std::string d = dir(id);
    if (access(d.c_str(), F_OK) != 0) return ok();
    // cgroup.kill (5.14+) SIGKILLs every task of the group at once, including ones racing to fork.
    if (access((d + "/cgroup.kill").c_str(), F_OK) == 0) (void)writeCgroupFile(d + "/cgroup.kill", "1");
    return removeCgroupDir(d);
  }

  std::vector<std::string> listGroups() override { return listSubdirs(root_ + "/" + parent_); }
  void removeParent() override { (void)rmdir((root_ + "/" + parent_).c_str()); }

 private:
  std::string dir(const std::string& id) const { return root_ + "/" + parent_ + "/" + id; }
  std::string root_, parent_;
};

}  // namespace

std::unique_ptr<CgroupBackend> makeCgroupV2(const std::string& root, const std::string& parent) {
  return std::make_unique<CgroupV2>(root, parent);
}

}  // namespace space::host
