// The runtime seam: turns a sandbox spec into a running, isolated space-agent and a connected stream to
// it. Everything tier-specific (jail, vm) stays behind this interface; exec, files and PTYs are written
// once above it, against agent::AgentClient.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "agent/client/agent_client.h"
#include "common/result.h"

namespace space::runtime {

struct Limits {
  uint32_t cpu_millis = 1000;          // 1000 = one full CPU
  uint64_t memory_bytes = 512ull << 20;
  uint32_t pids = 256;
  uint64_t disk_bytes = 1ull << 30;    // writable layer quota
  uint64_t disk_inodes = 100000;
  uint32_t nofile = 4096;              // RLIMIT_NOFILE inside
};

struct SandboxSpec {
  std::string id;                      // "sb-…"; names kernel objects (cgroup, dirs)
  std::string template_rootfs;         // absolute host path of the template's read-only tree
  std::string template_id;             // content hash of the template (keys derived artifacts: VM images)
  std::string dir;                     // per-sandbox directory owned by spaced: state-dir/sandboxes/<id>
  std::string hostname;
  uint32_t uid_base = 0;               // first host uid of the sandbox's private range
  uint32_t uid_count = 65536;
  Limits limits;
  std::map<std::string, std::string> env;  // base environment of every process in the sandbox
  bool pooled = false;                 // prepared ahead of a request: a runtime may do more of the work now
};

struct Capabilities {
  bool pause = false;
  bool snapshot_filesystem = false;
  bool snapshot_memory = false;        // processes survive snapshot/restore
  bool rollback = false;               // in place, same id and network identity
  bool fork = false;
  nlohmann::json toJson() const {
    return {{"pause", pause}, {"snapshot_filesystem", snapshot_filesystem}, {"snapshot_memory", snapshot_memory},
            {"rollback", rollback}, {"fork", fork}};
  }
};

// What a runtime needs to find a live sandbox again after a daemon restart; stored in the database as
// JSON before start() returns.
struct PersistedInstance {
  std::string id;
  std::string runtime;                 // "jail" | "vm"
  nlohmann::json state;                // runtime-private: pids, paths, cgroup names
};

struct Instance {
  std::string id;
  int pid = 0;                                   // host pid of the sandbox's init (the agent, or the VMM)
  std::shared_ptr<agent::AgentClient> agent;     // connected and handshaken
  PersistedInstance persisted;
};

// A snapshot as the runtime made it: a directory of files (docs/snapshots.md). Durable before it is
// returned (files and directory synced, renamed into place).
struct SnapshotRef {
  std::string id;                      // "snap-…"
  std::string path;                    // the snapshot's directory
  std::string kind;                    // "filesystem" (jail: the writable layer) | "full" (vm: memory too)
  uint64_t size_bytes = 0;             // bytes the snapshot's files occupy (shared blocks counted once each)
};
enum class SnapshotKind { kFilesystem, kFull };

// Resource usage read from the kernel (cgroup), for inspect and metrics.
struct Usage {
  uint64_t memory_bytes = 0;
  uint64_t cpu_usage_ns = 0;
  uint32_t pids = 0;
  uint64_t disk_bytes = 0;
  std::optional<uint64_t> oom_kills;  // processes killed for the memory limit; absent where not known
};

class Runtime {
 public:
  virtual ~Runtime() = default;
  virtual std::string name() const = 0;
  virtual Capabilities capabilities() const = 0;

  virtual Result<Instance> start(const SandboxSpec& spec) = 0;
  // Two-phase start, for pools: prepare() does all that can be done before a request arrives, activate()
  // the rest. A jail is whole after prepare(); a VM is a VMM waiting to restore, and activate() loads the
  // template's state into it and connects the agent. start() is prepare() + activate().
  virtual Result<Instance> prepare(const SandboxSpec& spec) { return start(spec); }
  virtual Status activate(Instance& inst) { return ok(); }
  // Whether a prepared or started instance can still be handed out.
  virtual bool alive(const Instance& inst) { return inst.agent && inst.agent->alive(); }
  virtual Status pause(Instance& inst) = 0;
  virtual Status resume(Instance& inst) = 0;
  // Captures the sandbox (briefly paused if it runs; a paused one stays paused) into a new snapshot.
  virtual Result<SnapshotRef> snapshot(Instance& inst, SnapshotKind kind) = 0;
  // A new sandbox (spec) starting from the snapshot: a fork. Its storage shares blocks with the snapshot.
  virtual Result<Instance> restore(const SnapshotRef& ref, const SandboxSpec& spec) = 0;
  // The sandbox, in place, back at the snapshot: same id, same network address. The returned instance
  // replaces inst (new processes, new agent connection).
  virtual Result<Instance> rollback(Instance& inst, const SnapshotRef& ref) {
    return makeError(ErrorKind::kUnsupported, "{}: rollback is not supported", name());
  }
  // Finishes a rollback that a dead daemon left half-done: the sandbox starts again in place on whatever
  // storage it has now (before or after the rollback's atomic switch, never a mix); files owned by the
  // uid range starting at files_uid_base (an imported snapshot's) move to the sandbox's.
  virtual Result<Instance> restartInPlace(const PersistedInstance& inst, uint32_t files_uid_base) {
    return makeError(ErrorKind::kUnsupported, "{}: restart in place is not supported", name());
  }
  // Removes the snapshot's files. Idempotent.
  virtual Status deleteSnapshot(const SnapshotRef& ref);
  // Kills everything of the sandbox and removes every kernel object and file it made. Idempotent: works
  // on a half-made or already-dead sandbox, from the persisted state alone.
  virtual Status destroy(const PersistedInstance& inst) = 0;
  // With no sandbox of the node left: gives back what the runtime holds for the node as a whole (a
  // mounted volume, cgroup parents), so that a stopped daemon leaves nothing. The next start makes them anew.
  virtual Status releaseNode() { return ok(); }
  // After a daemon restart: reconnects to a live sandbox, or fails (kNotFound) when it is gone.
  virtual Result<Instance> reattach(const PersistedInstance& inst) = 0;
  virtual Result<Usage> usage(const PersistedInstance& inst) = 0;
  // How many processes the OOM killer has ended for the sandbox's memory limit so far (cheap: read
  // around each exec to tell an OOM kill from any other SIGKILL).
  virtual Result<uint64_t> oomKills(const PersistedInstance& inst) {
    return makeError(ErrorKind::kUnsupported, "the {} runtime does not count OOM kills", name());
  }
  // A counter that grows whenever the sandbox's writable storage is written, read without walking any
  // tree: equal values mean "no file changed in between" (rolling history after exec). Values are only
  // comparable for the same instance (a rollback or a daemon restart may start a new count). Unsupported
  // (the default): callers treat every exec as a change.
  virtual Result<uint64_t> writeGeneration(const PersistedInstance& inst) {
    return makeError(ErrorKind::kUnsupported, "{}: no write generation", name());
  }
};

}  // namespace space::runtime
