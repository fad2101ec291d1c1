// cgroup v1: one hierarchy per controller (/sys/fs/cgroup/<controller>/<parent>/<id>). The sandbox's
// processes join every hierarchy. cpu and cpuacct may be one co-mounted hierarchy ("cpu,cpuacct") or two.
// On a hybrid host the group also has a twin on the controller-less cgroup2 hierarchy, used to freeze.
#include <sys/stat.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <set>

#include "runtime/host/cgroup.h"

namespace space::host {

namespace {

constexpr uint64_t kCfsPeriodUs = 100000;

class CgroupV1 : public CgroupBackend {
 public:
  CgroupV1(std::string root, std::string parent, std::string unified)
      : root_(std::move(root)), parent_(std::move(parent)) {
    // Hybrid hosts: the cgroup2 hierarchy next to the v1 ones has no controllers, but its core freezer
    // (cgroup.freeze) needs none and freezes a group in a fraction of a millisecond, where a write to v1's
    // freezer.state takes milliseconds in the kernel. Each group gets a twin there, for freezing only.
    if (!unified.empty()) {
      std::string parent_dir = unified + "/" + parent_;
      if ((mkdir(parent_dir.c_str(), 0755) == 0 || errno == EEXIST) &&
          access((parent_dir + "/cgroup.freeze").c_str(), F_OK) == 0)
        unified_ = std::move(unified);
    }
  }
  CgroupKind kind() const override { return CgroupKind::kV1; }

  Status create(const std::string& id, const runtime::Limits& limits) override {
    for (const std::string& hier : hierarchies()) {
      std::string parent_dir = hier + "/" + parent_;
      if (mkdir(parent_dir.c_str(), 0755) < 0 && errno != EEXIST) return sysError(errno, "mkdir {}", parent_dir);
      std::string dir = parent_dir + "/" + id;
      if (mkdir(dir.c_str(), 0755) < 0) return sysError(errno, "mkdir {}", dir);
    }
    if (!unified_.empty()) {
      std::string dir = unified_ + "/" + parent_ + "/" + id;
      if (mkdir(dir.c_str(), 0755) < 0) return sysError(errno, "mkdir {}", dir);
    }
    std::string mem = group("memory", id);
    TRY(writeCgroupFile(mem + "/memory.limit_in_bytes", std::to_string(limits.memory_bytes)));
    // memsw (memory + swap) exists only with swap accounting; equal to the memory limit = no swap escape.
    if (access((mem + "/memory.memsw.limit_in_bytes").c_str(), F_OK) == 0)
      TRY(writeCgroupFile(mem + "/memory.memsw.limit_in_bytes", std::to_string(limits.memory_bytes)));
    TRY(writeCgroupFile(group("pids", id) + "/pids.max", std::to_string(limits.pids)));
    std::string cpu = group("cpu", id);
    TRY(writeCgroupFile(cpu + "/cpu.cfs_period_us", std::to_string(kCfsPeriodUs)));
    uint64_t quota = static_cast<uint64_t>(limits.cpu_millis) * kCfsPeriodUs / 1000;
    TRY(writeCgroupFile(cpu + "/cpu.cfs_quota_us", std::to_string(quota)));
    return ok();
  }

  Status addProcess(const std::string& id, pid_t pid) override {
    for (const std::string& hier : hierarchies())
      TRY(writeCgroupFile(hier + "/" + parent_ + "/" + id + "/cgroup.procs", std::to_string(pid)));
    if (std::string twin = unifiedGroup(id); !twin.empty())
      TRY(writeCgroupFile(twin + "/cgroup.procs", std::to_string(pid)));
    return ok();
  }

  Result<CgroupUsage> usage(const std::string& id) override {
    CgroupUsage u;
    ASSIGN_OR_RETURN(std::string mem, readCgroupFile(group("memory", id) + "/memory.usage_in_bytes"));
    u.memory_bytes = std::strtoull(mem.c_str(), nullptr, 10);
    ASSIGN_OR_RETURN(std::string pids, readCgroupFile(group("pids", id) + "/pids.current"));
    u.pids = static_cast<uint32_t>(std::strtoul(pids.c_str(), nullptr, 10));
    ASSIGN_OR_RETURN(std::string cpu, readCgroupFile(group("cpuacct", id) + "/cpuacct.usage"));
    u.cpu_usage_ns = std::strtoull(cpu.c_str(), nullptr, 10);
    ASSIGN_OR_RETURN(u.oom_kills, oomKills(id));
    return u;
  }

  Result<uint64_t> oomKills(const std::string& id) override {
    ASSIGN_OR_RETURN(std::string control, readCgroupFile(group("memory", id) + "/memory.oom_control"));
    return flatKeyedValue(control, "oom_kill");
  }

  Status freeze(const std::string& id, bool frozen) override {
    // A group made before its twin existed (a sandbox older than this spaced) uses the v1 freezer.
    if (std::string twin = unifiedGroup(id); !twin.empty()) {
      TRY(writeCgroupFile(twin + "/cgroup.freeze", frozen ? "1" : "0"));
      return waitCgroupEvent(twin + "/cgroup.events", frozen ? "frozen 1" : "frozen 0");
    }
    std::string state = group("freezer", id) + "/freezer.state";
    if (access(state.c_str(), F_OK) != 0) {
      if (!frozen) return ok();  // nothing to thaw (a group already gone)
      return makeError(ErrorKind::kUnsupported, "no cgroup v1 freezer hierarchy for {}", id);
    }
    const char* want = frozen ? "FROZEN" : "THAWED";
    TRY(writeCgroupFile(state, want));
    // FREEZING until every task has stopped.
    return waitCgroupState(state, [&](const std::string& t) { return t.rfind(want, 0) == 0; });
  }

  Result<std::vector<pid_t>> processes(const std::string& id) override {
    return readCgroupProcs(group("pids", id) + "/cgroup.procs");
  }

  Status remove(const std::string& id) override {
    // v1 has no cgroup.kill; the runtime kills the sandbox's init first, and the pid namespace takes every
    // other task with it. Tasks still listed are exiting; removeCgroupDir waits for them.
    for (const std::string& hier : hierarchies()) TRY(removeCgroupDir(hier + "/" + parent_ + "/" + id));
    if (!unified_.empty()) TRY(removeCgroupDir(unified_ + "/" + parent_ + "/" + id));
    return ok();
  }

  void removeParent() override {
    for (const std::string& hier : hierarchies()) (void)rmdir((hier + "/" + parent_).c_str());
    if (!unified_.empty()) (void)rmdir((unified_ + "/" + parent_).c_str());
  }

  std::vector<std::string> listGroups() override {
    std::vector<std::string> out;
    for (const std::string& hier : hierarchies())
      for (auto& d : listSubdirs(hier + "/" + parent_)) out.push_back(d);
    if (!unified_.empty())
      for (auto& d : listSubdirs(unified_ + "/" + parent_)) out.push_back(d);
    return out;
  }

 private:
  // Distinct hierarchy directories for the controllers we use (co-mounted ones collapse into one).
  std::vector<std::string> hierarchies() const {
    std::set<std::string> seen;
    std::vector<std::string> out;
    for (const char* c : {"memory", "pids", "cpu", "cpuacct", "freezer"}) {
      char real[PATH_MAX];
      std::string path = root_ + "/" + c;
      if (!realpath(path.c_str(), real)) continue;
      if (seen.insert(real).second) out.push_back(real);
    }
    return out;
  }
  std::string group(const char* controller, const std::string& id) const {
    return root_ + "/" + controller + "/" + parent_ + "/" + id;
  }
  // The group's twin on the unified hierarchy, "" when there is none.
  std::string unifiedGroup(const std::string& id) const {
    if (unified_.empty()) return "";
    std::string d = unified_ + "/" + parent_ + "/" + id;
    return access((d + "/cgroup.freeze").c_str(), F_OK) == 0 ? d : "";
  }

  std::string root_, parent_, unified_;
};

}  // namespace

std::unique_ptr<CgroupBackend> makeCgroupV1(const std::string& root, const std::string& parent,
                                            const std::string& unified) {
  return std::make_unique<CgroupV1>(root, parent, unified);
}

}  // namespace space::host
