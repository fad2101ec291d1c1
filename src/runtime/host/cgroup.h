// Cgroups: one group per sandbox under SPACE's parent ("space/<id>"), with memory, pids and CPU limits, and
// a freezer for pause. Two backends chosen at run time: v1 (one hierarchy per controller, as on SPACE's own
// hybrid machines) and v2 (unified). Never remounts or reshapes the host's cgroup mounts; only creates and
// removes directories under the parent.
#pragma once

#include <sys/types.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/result.h"
#include "runtime/runtime.h"

namespace space::host {

enum class CgroupKind { kV1, kV2 };

// What the host offers, read from /sys/fs/cgroup. Separate from the choice so the choice is testable.
struct CgroupProbe {
  bool root_is_cgroup2 = false;                             // /sys/fs/cgroup itself is cgroup2 (unified mode)
  bool v1_memory = false, v1_pids = false, v1_cpu = false;  // per-controller v1 hierarchies mounted
  std::string unified_mount;                                // a cgroup2 mount (root or hybrid's "unified"), if any
  std::vector<std::string> unified_controllers;             // its cgroup.controllers
};

struct CgroupChoice {
  CgroupKind kind = CgroupKind::kV1;
  std::string root;  // v1: /sys/fs/cgroup (controllers below it); v2: the cgroup2 mount
};

CgroupProbe probeCgroups(const std::string& sys_fs_cgroup = "/sys/fs/cgroup");
// v2 when the unified hierarchy carries memory, pids and cpu; else v1 when those are mounted as v1
// hierarchies (hybrid hosts: the unified mount exists but has no controllers); else an error.
Result<CgroupChoice> chooseCgroupBackend(const CgroupProbe& probe);

struct CgroupUsage {
  uint64_t memory_bytes = 0;
  uint64_t cpu_usage_ns = 0;
  uint32_t pids = 0;
  uint64_t oom_kills = 0;  // processes the kernel's OOM killer ended for the group's memory limit
};

class CgroupBackend {
 public:
  virtual ~CgroupBackend() = default;
  virtual CgroupKind kind() const = 0;
  // Creates <parent>/<id> with the limits. Fails if it exists already (a leftover must be destroyed first).
  virtual Status create(const std::string& id, const runtime::Limits& limits) = 0;
  virtual Status addProcess(const std::string& id, pid_t pid) = 0;
  virtual Result<CgroupUsage> usage(const std::string& id) = 0;
  // The group's OOM kill counter ("oom_kill" of v1 memory.oom_control, v2 memory.events).
  virtual Result<uint64_t> oomKills(const std::string& id) = 0;
  // Freezes (true) or thaws (false) every task of the group and waits until the kernel reports the
  // state reached (v1 freezer.state FROZEN/THAWED, v2 cgroup.events "frozen"). Idempotent.
  virtual Status freeze(const std::string& id, bool frozen) = 0;
  // The processes in the group (its cgroup.procs; v1: the pids hierarchy's). A missing group has none.
  virtual Result<std::vector<pid_t>> processes(const std::string& id) = 0;
  // Kills what is left inside, then removes the group, retrying while exiting tasks drain. Idempotent.
  virtual Status remove(const std::string& id) = 0;
  // Every group directory under the parent (for leftover checks), as absolute paths.
  virtual std::vector<std::string> listGroups() = 0;
  // Removes the parent directories once no group is left in them (another daemon's groups keep them).
  virtual void removeParent() = 0;
};

// unified: the hybrid host's cgroup2 mount ("" when none): groups get a twin there for cgroup.freeze.
std::unique_ptr<CgroupBackend> makeCgroupV1(const std::string& root, const std::string& parent,
                                            const std::string& unified = "");
std::unique_ptr<CgroupBackend> makeCgroupV2(const std::string& root, const std::string& parent);
Result<std::unique_ptr<CgroupBackend>> makeCgroupBackend(const std::string& parent);

// Helpers shared by the backends (cgroup_select.cc).
Status writeCgroupFile(const std::string& path, const std::string& value);
Result<std::string> readCgroupFile(const std::string& path);
// The pids listed in a cgroup.procs file (none when the group does not exist).
Result<std::vector<pid_t>> readCgroupProcs(const std::string& procs_path);
// Polls `read` until it returns `want` (a frozen group's state settles asynchronously), up to ~2 s.
Status waitCgroupState(const std::string& path, const std::function<bool(const std::string&)>& reached);
// Waits until the cgroup2 events file (cgroup.events) holds the line `want` ("frozen 1"), woken by the
// kernel's change notification (poll POLLPRI) instead of a sleep.
Status waitCgroupEvent(const std::string& events_path, const std::string& want);
// rmdir with retries: a cgroup with exiting tasks reports EBUSY for a short while after SIGKILL.
Status removeCgroupDir(const std::string& path);
std::vector<std::string> listSubdirs(const std::string& path);
// The value of `key` in a flat-keyed cgroup file ("oom_kill 3\n..."); 0 when the key is absent (kernels
// before 4.13 have no oom_kill line).
uint64_t flatKeyedValue(const std::string& text, const std::string& key);

}  // namespace space::host
