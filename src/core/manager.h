// SandboxManager: executes the commands that API handlers parse. Owns sandbox lifecycle, the pool of
// pre-started sandboxes, the TTL reaper and start-up reconciliation. Thread-safe.
#pragma once

#include <csignal>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "agent/client/agent_client.h"
#include "common/result.h"
#include "runtime/runtime.h"
#include "store/store.h"

namespace space::core {

struct CreateSandbox {
  std::string template_name;           // empty = the daemon's default template
  std::string isolation = "auto";      // "jail" | "vm" | "auto"
  std::optional<uint32_t> cpu_millis;  // unset = daemon default
  std::optional<uint64_t> memory_bytes;
  std::optional<uint32_t> pids;
  std::optional<uint64_t> disk_bytes;
  std::map<std::string, std::string> env;
  std::map<std::string, std::string> labels;
  int64_t ttl_s = 0;                      // 0 = daemon default (which may be none)
  int64_t idle_pause_s = 0;               // pause after this long without an API call; 0 = never
  std::optional<nlohmann::json> history;  // rolling snapshots (core/retention.h HistoryPolicy), validated
  bool cold_boot = false;                 // vm: boot the kernel instead of restoring the template's snapshot
  std::optional<nlohmann::json> network;  // egress policy (validated, normalised); unset = deny-all
  std::vector<std::string> secrets;       // names of stored secrets the sandbox gets placeholders for
  // Told what the create does that takes long (a first VM of a template warms it); unset: nobody asked.
  std::function<void(const std::string& line)> progress;
};

// PUT /v1/secrets/{name} and POST /v1/secrets: the value is sealed before it is stored, never returned.
struct SetSecret {
  std::string name;
  std::string value;
  std::vector<std::string> hosts;
  std::string header = "Authorization";
  std::string format;
  std::vector<std::string> methods;        // empty: any method
  std::vector<std::string> path_prefixes;  // empty: any path
};

struct SandboxView {
  store::SandboxRecord record;
  runtime::Capabilities capabilities;
  std::optional<runtime::Usage> usage;  // filled by get(), not by list()
  nlohmann::json toJson() const;
};

struct ListSandboxes {
  std::map<std::string, std::string> labels;
  std::optional<std::string> state;
};

struct BuildTemplate {
  std::string name;
  std::string kind;                // "debootstrap" | "dir" | "tar" | "upload" (API only)
  std::string suite = "bookworm";  // debootstrap
  std::string variant = "minbase";
  std::vector<std::string> packages;  // debootstrap
  std::string mirror;                 // debootstrap; empty = Debian's default
  std::string path;                   // dir / tar: a path on the daemon's host; upload: its spool
};

using ProgressFn = std::function<void(const std::string& line)>;

// What a fork or a rollback does to the processes a VM's restored memory brings back, whose random
// generators are copies (docs/snapshots.md "Generations", docs/decisions/0010-generation-signal.md).
// Whatever it is, the guest's generation (/run/space/generation) changes first.
struct AfterRestore {
  std::string processes = "signal";  // "signal" | "kill" | "none"
  int signal = SIGURG;               // for "signal": ignored by default, so harmless unasked
};

// POST /v1/sandboxes/{id}/fork
struct ForkSandbox {
  std::string id;
  int count = 1;
  std::string snapshot;          // id or name; empty = a snapshot taken now
  AfterRestore after_restore;    // in each child
  std::optional<int64_t> ttl_s;  // each child's TTL from its fork; unset: the parent's ttl_s
};

// POST /v1/sandboxes/{id}/ttl: exactly one of the two.
struct SetTtl {
  std::optional<int64_t> ttl_s;
  std::optional<int64_t> add_s;
};

// POST /v1/sandboxes/{id}/rollback
struct RollbackSandbox {
  std::string snapshot;  // id or name
  AfterRestore after_restore;
};

struct ForkResult {
  store::SnapshotRecord snapshot;
  std::vector<SandboxView> sandboxes;
};

class SandboxManager {
 protected:
  static Error unsupportedEgressError() { return Error{ErrorKind::kUnsupported, 0, "egress is not available"}; }
  static tl::unexpected<Error> unsupportedEgress() { return tl::unexpected(unsupportedEgressError()); }
  static tl::unexpected<Error> unsupportedOp(const char* what) {
    return tl::unexpected(Error{ErrorKind::kUnsupported, 0, std::string(what) + " are not supported here"});
  }

 public:
  virtual ~SandboxManager() = default;

  virtual Result<SandboxView> create(const CreateSandbox& cmd) = 0;
  virtual Result<SandboxView> get(const std::string& id) = 0;
  virtual Result<std::vector<SandboxView>> list(const ListSandboxes& cmd) = 0;
  virtual Status destroy(const std::string& id) = 0;
  virtual Status pause(const std::string& id) = 0;
  virtual Status resume(const std::string& id) = 0;
  // A new TTL (core/ttl.h): ttl_s from now, or add_s more than what is left; 0 removes it where the node
  // allows no TTL (max_ttl_s 0).
  virtual Result<SandboxView> setTtl(const std::string& id, const SetTtl& cmd) { return unsupportedOp("TTL changes"); }

  // Snapshots (docs/snapshots.md). `snapshot` is a snapshot id, or a name given to one of the sandbox's.
  virtual Result<store::SnapshotRecord> snapshot(const std::string& id, const std::string& name) {
    return unsupportedOp("snapshots");
  }
  virtual Result<std::vector<store::SnapshotRecord>> listSnapshots(const std::string& id) {
    return unsupportedOp("snapshots");
  }
  virtual Result<store::SnapshotRecord> getSnapshot(const std::string& snapshot) { return unsupportedOp("snapshots"); }
  virtual Status deleteSnapshot(const std::string& snapshot) { return unsupportedOp("snapshots"); }
  virtual Result<SandboxView> rollback(const std::string& id, const std::string& snapshot,
                                       const AfterRestore& after = {}) {
    return unsupportedOp("rollback");
  }
  virtual Result<ForkResult> fork(const ForkSandbox& cmd) { return unsupportedOp("fork"); }
  // Export: the snapshot as an encrypted archive (docs/snapshot-archive.md) in a file of the daemon's that
  // the caller streams out and removes. Import: an archive file becomes a new snapshot of sandbox `id`.
  // A foreground exec of the sandbox finished (its exit was delivered). Returns at once; a history policy
  // with after_exec takes its snapshot later, on the manager's own thread.
  virtual void execFinished(const std::string& id) {}
  // Re-wraps every tenant's data key from the previous KEK (snapshot_kek_previous) to the current one
  // (snapshot_kek); returns how many were rewrapped.
  virtual Result<size_t> rotateKeys() { return unsupportedOp("key rotation"); }
  virtual Result<std::string> exportSnapshot(const std::string& snapshot) { return unsupportedOp("snapshot archives"); }
  virtual Result<store::SnapshotRecord> importSnapshot(const std::string& id, const std::string& archive_path) {
    return unsupportedOp("snapshot archives");
  }
  // A scratch path for an upload (removed by the caller).
  virtual std::string scratchPath(const std::string& prefix) { return "/tmp/" + prefix; }

  // The live agent connection of a running sandbox: exec, background processes, PTY and files go
  // straight through it (kConflict when the sandbox is not running, kNotFound when unknown).
  virtual Result<std::shared_ptr<agent::AgentClient>> agent(const std::string& id) = 0;
  // The sandbox's OOM kill counter (unsupported where the runtime does not count them).
  virtual Result<uint64_t> oomKills(const std::string& id) { return unsupportedOp("OOM counting"); }

  virtual Result<store::TemplateRecord> buildTemplate(const BuildTemplate& cmd, const ProgressFn& progress) = 0;
  virtual Result<std::vector<store::TemplateRecord>> listTemplates() = 0;
  virtual Status removeTemplate(const std::string& name) = 0;
  // Makes the template's VM artifacts for the default machine shape now (ext4 image, memory snapshot)
  // instead of on the first vm create. Returns facts about them (paths, timings).
  virtual Result<nlohmann::json> warmTemplate(const std::string& name) = 0;
  // What each isolation tier can do on this node ({"jail": {...}, "vm": {...}, "auto": "jail"|"vm"}).
  virtual nlohmann::json isolationInfo() = 0;
  // Whether sandboxes reach the network through the egress gateway, and why not when they do not.
  virtual nlohmann::json egressInfo() const = 0;

  // Egress (docs/egress.md): a running sandbox's network policy, its audit lines, and the node's secrets.
  virtual Result<nlohmann::json> getNetwork(const std::string& id) { return unsupportedEgress(); }
  virtual Result<nlohmann::json> setNetwork(const std::string& id, const nlohmann::json& policy) {
    return unsupportedEgress();
  }
  // Calls sink with every audit line of the sandbox (then, with follow, new ones as they come) until sink
  // returns false.
  virtual Status streamNetLog(const std::string& id, bool follow, const std::function<bool(const std::string&)>& sink) {
    return unsupportedEgress();
  }
  virtual Result<store::SecretRecord> setSecret(const SetSecret& cmd) { return unsupportedEgress(); }
  virtual Result<std::vector<store::SecretRecord>> listSecrets() { return unsupportedEgress(); }
  virtual Status removeSecret(const std::string& name) { return unsupportedEgress(); }

  // Stops the node taking work: creates and forks are refused (503), the pools stop filling and their
  // sandboxes are deleted; with delete_sandboxes every sandbox is deleted too. Ends with the process.
  virtual Result<nlohmann::json> drain(bool delete_sandboxes) { return unsupportedOp("drains"); }
  // At a clean stop: when the node holds no sandbox at all, gives back the node-wide resources (the layer
  // volume, cgroup parents, the egress gateway and its nftables table) and says what it released.
  virtual nlohmann::json releaseIfIdle() { return nlohmann::json::object(); }

  virtual store::Store& store() = 0;
  // Prometheus text lines for the manager's own gauges and counters.
  virtual std::string metricsText() = 0;
};

}  // namespace space::core
