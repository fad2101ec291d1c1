// The runtime seam: turns a sandbox spec into a running, isolated space-agent and a connected stream to
// it. Everything tier-specific (jail, vm) stays behind this interface; exec, files and PTYs are written
// once above it, against agent::AgentClient.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>

#include "agent/client/agent_client.h"
#include "common/result.h"
#include "net/address_pool.h"

namespace space::runtime {

struct Limits {
  uint32_t cpu_millis = 1000;  // 1000 = one full CPU
  uint64_t memory_bytes = 512ull << 20;
  uint32_t pids = 256;
  uint64_t disk_bytes = 1ull << 30;  // writable layer quota
  uint64_t disk_inodes = 100000;
  uint32_t nofile = 4096;  // RLIMIT_NOFILE inside
};

struct SandboxSpec {
  std::string id;               // "sb-…"; names kernel objects (cgroup, dirs)
  std::string template_rootfs;  // absolute host path of the template's read-only tree
  std::string template_id;      // content hash of the template (keys derived artifacts: VM images)
  std::string dir;              // per-sandbox directory owned by spaced: state-dir/sandboxes/<id>
  std::string hostname;
  uint32_t uid_base = 0;  // first host uid of the sandbox's private range
  uint32_t uid_count = 65536;
  Limits limits;
  std::map<std::string, std::string> env;  // base environment of every process in the sandbox
  bool pooled = false;                     // prepared ahead of a request: a runtime may do more of the work now
};

struct Capabilities {
  // What the API reports (GET /v1/node, toJson).
  bool pause = false;
  bool snapshot_filesystem = false;
  bool snapshot_memory = false;  // processes survive snapshot/restore
  bool rollback = false;         // in place, same id and network identity
  bool fork = false;
  // What the manager plans with.
  bool networked = false;       // sandboxes get a /30 and a host link into the egress gateway
  bool own_kernel = false;      // a guest kernel: its open files are its own, not the host's file table
  bool cold_boot = false;       // coldStart() boots without the template's memory snapshot
  bool warm_templates = false;  // warmTemplate() makes per-template artifacts that starts need
  bool accelerated = false;     // runs on hardware virtualisation now: `auto` isolation picks such a tier
  nlohmann::json toJson() const {
    return {{"pause", pause},
            {"snapshot_filesystem", snapshot_filesystem},
            {"snapshot_memory", snapshot_memory},
            {"rollback", rollback},
            {"fork", fork}};
  }
};

// What a runtime needs to find a live sandbox again after a daemon restart; stored in the database as
// JSON before start() returns.
struct PersistedInstance {
  std::string id;
  std::string runtime;   // "jail" | "vm"
  nlohmann::json state;  // runtime-private: pids, paths, cgroup names
};

struct Instance {
  std::string id;
  int pid = 0;                                // host pid of the sandbox's init (the agent, or the VMM)
  std::shared_ptr<agent::AgentClient> agent;  // connected and handshaken
  PersistedInstance persisted;
};

// A snapshot as the runtime made it: a directory of files (docs/snapshots.md). Durable before it is
// returned (files and directory synced, renamed into place).
struct SnapshotRef {
  std::string id;           // "snap-…"
  std::string path;         // the snapshot's directory
  std::string kind;         // "filesystem" (jail: the writable layer) | "full" (vm: memory too)
  uint64_t size_bytes = 0;  // bytes the snapshot's files occupy (shared blocks counted once each)
};
enum class SnapshotKind { kFilesystem, kFull };

// A sandbox's network as its runtime made it: the /30 and the host end of its veth (jail) or tap (vm).
struct SandboxNetwork {
  net::SandboxSubnet subnet;
  std::string link;
};

// What a sandbox is told when it is handed to a request (create, fork) or restarted in place (rollback).
struct HandOver {
  std::string hostname;                    // the sandbox's id
  std::map<std::string, std::string> env;  // the request's environment and the egress variables
  // Set after a restore (a fork child, a rollback): what the processes the snapshot brings back learn.
  std::optional<agent::Identity::Generation> restored;
  // Set while egress is on: the port of the explicit proxy a networked sandbox's processes are pointed at.
  std::optional<uint16_t> explicit_proxy_port;
};

// Start-up reconciliation: what the database still names, so that a runtime can remove the rest.
struct Known {
  std::set<std::string> sandboxes;  // ids of every row
  std::set<std::string> links;      // host links of every row's network
  std::set<std::string> snapshots;  // directory names of every snapshot row
};

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
  // Why the tier cannot run sandboxes now (empty: it can, or it is still finding out).
  virtual std::string unavailableReason() const { return ""; }
  // What the tier reports of itself beside its capabilities (GET /v1/node: a VM's accelerator and KVM).
  virtual nlohmann::json describe() const { return nlohmann::json::object(); }

  virtual Result<Instance> start(const SandboxSpec& spec) = 0;
  // Two-phase start, for pools: prepare() does all that can be done before a request arrives, activate()
  // the rest. A jail is whole after prepare(); a VM is a VMM waiting to restore, and activate() loads the
  // template's state into it and connects the agent. start() is prepare() + activate().
  virtual Result<Instance> prepare(const SandboxSpec& spec) { return start(spec); }
  virtual Status activate(Instance& inst) { return ok(); }
  // Whether a prepared or started instance can still be handed out.
  virtual bool alive(const Instance& inst) { return inst.agent && inst.agent->alive(); }
  // Boots a sandbox without any prepared state (capabilities().cold_boot).
  virtual Result<Instance> coldStart(const SandboxSpec& spec) {
    return makeError(ErrorKind::kUnsupported, "{}: cold boot is not supported", name());
  }
  // Makes the per-template artifacts that sandboxes of spec's shape start from (capabilities().
  // warm_templates), and says what they are.
  virtual Result<nlohmann::json> warmTemplate(const SandboxSpec& spec) {
    return makeError(ErrorKind::kUnsupported, "{}: templates need no warming", name());
  }
  // Whether starts of spec's shape find their template artifacts made already (a pool waits for them).
  virtual bool templateReady(const SandboxSpec& spec) const { return true; }
  // About how long warmTemplate() takes here (for telling a user who waits); nullopt while not yet known.
  virtual std::optional<int64_t> typicalWarmMs() const { return std::nullopt; }
  // Gives an activated sandbox what its new owner's processes see: the environment, and where the tier
  // copies a whole machine from a template or snapshot (vm), a fresh identity (SECURITY.md V4). The
  // default: the environment, when there is one.
  virtual Status handOver(Instance& inst, const HandOver& h);
  // The same after a rollback put the sandbox back at a snapshot in place.
  virtual Status renewIdentity(Instance& inst, const HandOver& h);
  // The sandbox's network (none: it has no network).
  virtual std::optional<SandboxNetwork> network(const PersistedInstance& inst) const { return std::nullopt; }
  // Whether a pooled sandbox waits stopped: it must be resumed for anything to run in it before activate().
  virtual bool parked(const PersistedInstance& inst) const { return false; }
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
  // Finishes a rollback that a dead daemon left half-done, from the sandbox's last instance and the
  // snapshot it was rolling back to (an error when that is gone). The default restarts in place.
  virtual Result<Instance> finishRollback(Instance& old, const Result<SnapshotRef>& snap, uint32_t files_uid_base) {
    return restartInPlace(old.persisted, files_uid_base);
  }
  // Removes the snapshot's files. Idempotent.
  virtual Status deleteSnapshot(const SnapshotRef& ref);
  // Where the files of an imported snapshot go (empty: this tier keeps no snapshots).
  virtual std::string snapshotDirFor(const std::string& snapshot_id) const { return ""; }
  // Checks that snapshot files imported into ref.path fit the sandbox `target` (of disk_bytes) and returns
  // ref with its kind and size. The caller removes the files when it fails.
  virtual Result<SnapshotRef> adoptSnapshot(SnapshotRef ref, const PersistedInstance& target, uint64_t disk_bytes) {
    return makeError(ErrorKind::kUnsupported, "snapshots of the {} runtime are not supported", name());
  }
  // Kills everything of the sandbox and removes every kernel object and file it made. Idempotent: works
  // on a half-made or already-dead sandbox, from the persisted state alone.
  virtual Status destroy(const PersistedInstance& inst) = 0;
  // With no sandbox of the node left: gives back what the runtime holds for the node as a whole (a
  // mounted volume, cgroup parents), so that a stopped daemon leaves nothing. The next start makes them anew.
  virtual Status releaseNode() { return ok(); }
  // Start-up reconciliation, once every row is dealt with: removes what the runtime made for sandboxes
  // and snapshots that no row names (directories, host links, layer images, snapshot files).
  virtual void forgetUnknown(const Known& known) {}
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
