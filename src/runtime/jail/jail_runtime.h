// JailRuntime: the namespace-jail tier. Each sandbox is a space-agent running as PID 1 of fresh user, pid,
// net, ipc, uts, mount, cgroup and time namespaces, on an overlay of the template, under cgroup limits and
// a disk quota (its own ext4 layer image), with capabilities, Landlock and a seccomp allow-list applied
// before it serves.
// Sequence and rationale: docs/decisions/0002-jail-containment.md.
#pragma once

#include <chrono>
#include <memory>
#include <set>
#include <string>

#include "common/unique_fd.h"
#include "net/address_pool.h"
#include "runtime/host/cgroup.h"
#include "runtime/host/layer_volume.h"
#include "runtime/host/network.h"
#include "runtime/runtime.h"

namespace space::jail {

enum class LaunchVariant;  // launch_steps.h
// The host resources a jail is made of, shared with the vm tier (runtime/host).
using host::attachNetwork;
using host::CgroupBackend;
using host::CgroupKind;
using host::CgroupUsage;
using host::cloneFile;
using host::closeLayerVolume;
using host::detachNetwork;
using host::ensureVolumeReserve;
using host::LayerVolume;
using host::makeCgroupBackend;
using host::NetworkConfig;
using host::openLayerVolume;
using host::persistedSubnet;
using host::proxyEnv;
using host::releaseVolumeReserve;
using host::relinkNetwork;
using host::syncDir;

struct JailConfig {
  std::string state_dir;       // sandboxes live in <state_dir>/sandboxes/<id>
  std::string agent_binary;    // static space-agent
  std::string seccomp_policy;  // path of the JSON policy (policies/seccomp/default.json)
  std::string cgroup_parent = "space";
  std::chrono::milliseconds start_timeout{10000};
  uint64_t shm_bytes = 64ull << 20;  // /dev/shm tmpfs cap inside each sandbox
  // Debugging only: the agent's stdout/stderr go to this host file instead of /dev/null. Sandbox code can
  // write to it (it is the agent's stderr), so never set it in production.
  std::string agent_log_path;
  // The sandbox network (runtime/host/network.h). Null: sandboxes keep a network namespace with only lo.
  std::shared_ptr<net::AddressPool> network_pool;
  NetworkConfig network;
  // Sparse size of SPACE's XFS layer volume, made where the state dir cannot reflink (layer_volume.h).
  uint64_t volume_bytes = 64ull << 30;
};

class JailRuntime : public runtime::Runtime {
 public:
  // Picks the cgroup backend, validates the seccomp policy and creates <state_dir>/sandboxes.
  static Result<std::unique_ptr<JailRuntime>> create(const JailConfig& config);

  std::string name() const override { return "jail"; }
  // Snapshots hold the filesystem only: processes are not captured (a rollback restarts them).
  runtime::Capabilities capabilities() const override {
    return {.pause = true,
            .snapshot_filesystem = true,
            .snapshot_memory = false,
            .rollback = true,
            .fork = true,
            .networked = networked()};
  }

  Result<runtime::Instance> start(const runtime::SandboxSpec& spec) override;
  Status pause(runtime::Instance& inst) override;
  Status resume(runtime::Instance& inst) override;
  Result<runtime::SnapshotRef> snapshot(runtime::Instance& inst, runtime::SnapshotKind kind) override;
  Result<runtime::Instance> restore(const runtime::SnapshotRef& ref, const runtime::SandboxSpec& spec) override;
  Result<runtime::Instance> rollback(runtime::Instance& inst, const runtime::SnapshotRef& ref) override;
  Status destroy(const runtime::PersistedInstance& inst) override;
  Status releaseNode() override;
  Result<runtime::Instance> reattach(const runtime::PersistedInstance& inst) override;
  Result<runtime::Usage> usage(const runtime::PersistedInstance& inst) override;
  Result<uint64_t> oomKills(const runtime::PersistedInstance& inst) override;
  Result<uint64_t> writeGeneration(const runtime::PersistedInstance& inst) override;
  Result<runtime::Instance> restartInPlace(const runtime::PersistedInstance& inst, uint32_t files_uid_base) override;
  std::optional<runtime::SandboxNetwork> network(const runtime::PersistedInstance& inst) const override {
    return host::persistedNetwork(inst.state);
  }
  std::string snapshotDirFor(const std::string& snapshot_id) const override;
  Result<runtime::SnapshotRef> adoptSnapshot(runtime::SnapshotRef ref, const runtime::PersistedInstance& target,
                                             uint64_t disk_bytes) override;
  // Sandbox directories, host links, layer images (the VMs' overlays too: the volume is the node's) and
  // snapshot files that no row names.
  void forgetUnknown(const runtime::Known& known) override;
  bool networked() const { return config_.network_pool != nullptr; }

  CgroupKind cgroupKind() const { return cgroups_->kind(); }
  std::string sandboxesDir() const { return config_.state_dir + "/sandboxes"; }
  const LayerVolume& volume() const { return volume_; }
  // ENOSPC (HTTP 507) naming the layer volume when less than its reserve is free: snapshots and forks are
  // refused there rather than made on a volume where the sandboxes' next writes (copy-on-write now) fail.
  Status checkVolumeSpace(const std::string& what) const;

 private:
  // SIGKILL to every process of the cgroup (each the init of a pid namespace, or one that dies with it).
  Status killCgroupProcesses(const std::string& cgroup);
  Result<runtime::Instance> relaunchInPlace(runtime::PersistedInstance persisted, uint32_t files_uid_base);
  JailRuntime(JailConfig config, std::unique_ptr<CgroupBackend> cgroups, std::string policy);
  // The variant's launch steps (launch_steps.h). base_image: fork, the snapshot's layer to clone.
  // base_uid: the uid range base of the sandbox the layer's files come from.
  Status launch(LaunchVariant variant, const runtime::SandboxSpec& spec, runtime::PersistedInstance& persisted,
                const std::string& base_image, uint32_t base_uid);
  Result<runtime::Instance> startFrom(const runtime::SandboxSpec& spec, const std::string& base_image,
                                      uint32_t base_uid);
  Result<std::shared_ptr<agent::AgentClient>> connectAgent(const runtime::PersistedInstance& persisted);

  JailConfig config_;
  // A sealed in-memory copy of the agent, made once: every sandbox execs it, so rebuilding or replacing
  // the binary on disk never breaks a start, and /proc/1/exe inside is no host file (runc CVE-2019-5736).
  UniqueFd agent_fd_;
  std::unique_ptr<CgroupBackend> cgroups_;
  std::string seccomp_policy_text_;
  LayerVolume volume_;
};

// What SPACE left in the kernel and on disk (for tests and start-up reconciliation).
struct Leftovers {
  std::vector<std::string> mounts;   // mount points under <state_dir>/sandboxes/
  std::vector<std::string> cgroups;  // group directories under the parent, every hierarchy
  std::vector<int> pids;             // processes whose real uid lies in [uid_lo, uid_hi)
  bool empty() const { return mounts.empty() && cgroups.empty() && pids.empty(); }
  std::string describe() const;
};
Result<Leftovers> findLeftovers(const std::string& state_dir, const std::string& cgroup_parent, uint32_t uid_lo,
                                uint32_t uid_hi);

}  // namespace space::jail
