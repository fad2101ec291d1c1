// The node's SandboxManager. Split by concept: manager.cc (lifecycle), pool_service.h (pre-started sandboxes),
// reconcile.cc (start-up and the reaper), view.cc (JSON views and metrics); the egress gateway's side is
// its own service (core/egress_binding.h), as are snapshot archives (core/snapshot_archives.h); they
// share the Context (core/context.h) with the rest.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>

#include "common/thread_annotations.h"
#include "core/config.h"
#include "core/context.h"
#include "core/egress_binding.h"
#include "core/egress_supervisor.h"
#include "core/lifecycle.h"
#include "core/manager.h"
#include "core/pool_service.h"
#include "core/retention.h"
#include "core/snapshot_archives.h"
#include "core/uid_blocks.h"
#include "runtime/registry.h"
#include "runtime/runtime.h"
#include "store/secret_box.h"
#include "store/store.h"
#include "store/templates.h"

namespace space::core {

struct Counters {
  std::atomic<uint64_t> creates_pool{0};
  std::atomic<uint64_t> creates_fresh{0};
  std::atomic<uint64_t> create_failures{0};
  std::atomic<uint64_t> destroys{0};
  std::atomic<uint64_t> reaped_ttl{0};
  std::atomic<uint64_t> reaped_paused{0};
  std::atomic<uint64_t> failed_sandboxes{0};
};

class Manager final : public SandboxManager {
 public:
  // runtimes: the node's tiers, the default one ("jail", always run) first; a tier the node cannot run
  // is there with the reason.
  Manager(DaemonConfig config, std::unique_ptr<store::Store> store, runtime::Registry runtimes,
          std::unique_ptr<store::TemplateBuilder> templates);
  ~Manager() override;

  // The egress gateway (null: off). Before startBackground().
  void setEgress(std::unique_ptr<EgressSupervisor> egress) { egress_.setSupervisor(std::move(egress)); }
  // Why the node runs without egress (GET /v1/node), when it does.
  void setEgressOffReason(std::string reason) { egress_.setOffReason(std::move(reason)); }
  // The host-wide block of uid ranges this node's sandboxes run as (held until the manager goes).
  void setUidBlock(UidBlock block) { uid_block_ = std::move(block); }
  Status startBackground();  // reconcile, then start the pool filler and the reaper
  Result<nlohmann::json> drain(bool delete_sandboxes) override;
  nlohmann::json releaseIfIdle() override;

  Result<SandboxView> create(const CreateSandbox& cmd) override;
  Result<SandboxView> get(const std::string& id) override;
  Result<std::vector<SandboxView>> list(const ListSandboxes& cmd) override;
  Status destroy(const std::string& id) override;
  Status pause(const std::string& id) override;
  Status resume(const std::string& id) override;
  Result<SandboxView> setTtl(const std::string& id, const SetTtl& cmd) override;
  Result<store::SnapshotRecord> snapshot(const std::string& id, const std::string& name) override;
  Result<std::vector<store::SnapshotRecord>> listSnapshots(const std::string& id) override;
  Result<store::SnapshotRecord> getSnapshot(const std::string& snapshot) override;
  Status deleteSnapshot(const std::string& snapshot) override;
  Result<SandboxView> rollback(const std::string& id, const std::string& snapshot,
                               const AfterRestore& after = {}) override;
  Result<ForkResult> fork(const ForkSandbox& cmd) override;
  // Archives: SnapshotArchives'.
  Result<std::string> exportSnapshot(const std::string& snapshot) override {
    return archives_.exportSnapshot(snapshot);
  }
  Result<store::SnapshotRecord> importSnapshot(const std::string& id, const std::string& archive_path) override {
    return archives_.importSnapshot(id, archive_path);
  }
  std::string scratchPath(const std::string& prefix) override { return archives_.scratchPath(prefix); }
  void execFinished(const std::string& id) override;
  Result<size_t> rotateKeys() override { return archives_.rotateKeys(); }
  Result<std::shared_ptr<agent::AgentClient>> agent(const std::string& id) override;
  Result<uint64_t> oomKills(const std::string& id) override;
  Result<store::TemplateRecord> buildTemplate(const BuildTemplate& cmd, const ProgressFn& progress) override;
  Result<std::vector<store::TemplateRecord>> listTemplates() override;
  Status removeTemplate(const std::string& name) override;
  Result<nlohmann::json> warmTemplate(const std::string& name) override;
  nlohmann::json isolationInfo() override;
  nlohmann::json egressInfo() const override;
  // Egress: EgressBinding's.
  Result<nlohmann::json> getNetwork(const std::string& id) override { return egress_.getNetwork(id); }
  Result<nlohmann::json> setNetwork(const std::string& id, const nlohmann::json& policy) override {
    return egress_.setNetwork(id, policy);
  }
  Status streamNetLog(const std::string& id, bool follow,
                      const std::function<bool(const std::string&)>& sink) override {
    return egress_.streamNetLog(id, follow, sink);
  }
  Result<store::SecretRecord> setSecret(const SetSecret& cmd) override { return egress_.setSecret(cmd); }
  Result<std::vector<store::SecretRecord>> listSecrets() override { return egress_.listSecrets(); }
  Status removeSecret(const std::string& name) override { return egress_.removeSecret(name); }
  store::Store& store() override { return *store_; }
  std::string metricsText() override;

 private:
  // Lifecycle (manager.cc)
  Result<runtime::Limits> resolveLimits(const CreateSandbox& cmd, const std::string& isolation) const;
  // The limits of a sandbox whose create names none (a VM's RAM has its own default).
  runtime::Limits defaultLimits(const std::string& isolation) const;
  // The tier a request gets: "jail" or "vm" (auto = vm where KVM is usable), or why it cannot have it.
  Result<std::string> resolveIsolation(const std::string& requested) const;
  // Starts (pooled: only prepares) a sandbox of the template on `isolation`.
  // from: a snapshot the sandbox starts from (a fork), instead of the template's fresh state.
  Result<Started> startSandbox(const store::TemplateRecord& tpl, const runtime::Limits& limits,
                               const std::map<std::string, std::string>& env, bool pooled, const std::string& isolation,
                               bool cold_boot = false, const runtime::SnapshotRef* from = nullptr);
  // The rest of a create once a sandbox is started or taken from the pool: egress, identity, the row.
  // restored: set for a fork child, whose processes continue the parent's memory.
  Result<SandboxView> completeCreate(Started& started, const CreateSandbox& cmd,
                                     const AfterRestore* restored = nullptr);
  // The environment a sandbox's agent is given at hand-over (the request's, sealed in the row, plus the
  // egress variables): again after a rollback restarts the agent.
  Result<std::map<std::string, std::string>> userEnv(const store::SandboxRecord& rec);
  Status sealUserEnv(store::SandboxRecord& rec, const std::map<std::string, std::string>& env);
  // Completes a prepared sandbox and gives it its identity (hostname, RNG seed, clock, machine id, env).
  Status handOver(Started& started, const std::map<std::string, std::string>& env, const AfterRestore* restored);
  Status destroyRecord(store::SandboxRecord record);
  runtime::Runtime& runtimeFor(const std::string& name) const;
  // The tier `name` when this node can run sandboxes on it, else why not.
  Result<runtime::Runtime*> availableTier(const std::string& name) const;
  SandboxView viewOf(const store::SandboxRecord& record, bool with_usage);
  std::optional<uint64_t> agentOomKills(const std::string& id);
  // The live instance of a record (connection and all), or one rebuilt from its persisted state.
  runtime::Instance instanceOf(const store::SandboxRecord& rec);

  runtime::SandboxSpec specFor(const store::SandboxRecord& rec, const store::TemplateRecord& tpl,
                               const runtime::Limits& limits) const;

  // Snapshots (snapshots.cc)
  Result<store::SnapshotRecord> findSnapshot(const std::string& sandbox_id, const std::string& ref);
  Result<store::SnapshotRecord> takeSnapshot(store::SandboxRecord& rec, const std::string& name,
                                             const std::string& origin) SPACE_REQUIRES(snapshot_mu_);
  static runtime::SnapshotRef refOf(const store::SnapshotRecord& s) { return {s.id, s.path, s.kind, s.size_bytes}; }
  void deleteSnapshotsOf(const std::string& sandbox_id);
  // A rollback a dead spaced left half-done: the sandbox starts again on its current layer.
  Result<runtime::Instance> finishRollback(store::SandboxRecord& rec);
  // Children of forks a dead spaced left half-done.
  void removeInterruptedForks();
  // The rolling history: an automatic snapshot when due, then thinning (from the reaper).
  void keepHistory(store::SandboxRecord& rec, int64_t now);
  // Deletes the automatic snapshots the policy no longer keeps (snapshot_mu_ held).
  void thinHistory(const std::string& id, const HistoryPolicy& policy, int64_t now) SPACE_REQUIRES(snapshot_mu_);
  // History after exec: a snapshot (origin auto) when the sandbox's files changed since the last one.
  void historyLoop();
  void snapshotAfterExec(const std::string& id);
  // What the runtime's write generation was when the newest snapshot of a sandbox was taken (or when a
  // rollback put it back at a snapshot's files).
  struct SnapshotGeneration {
    std::string snapshot_id;
    uint64_t generation = 0;
  };

  // What the pool asks of the lifecycle: starts, the live table, deletes.
  PoolService::Hooks poolHooks();

  // Reconciliation and reaping (reconcile.cc)
  Status reconcile();
  // What the runtimes made for sandboxes and snapshots that no row names (known_ids: every row at start).
  void forgetUnknown(const std::set<std::string>& known_ids);
  // Why a pooled sandbox left by an earlier spaced no longer fits this one's configuration (empty: it
  // fits): made with or without a network where egress is now the other way, or with other default limits.
  std::string poolMismatch(const store::SandboxRecord& rec) const;
  void reapLoop();
  void reapOnce();
  void autoPause(store::SandboxRecord& rec, int64_t now);
  void touch(const std::string& id);

  // "warming template NAME for VMs, one time, ~N s" when a VM create of this shape must make the
  // template's VM artifacts first; nullopt when they exist (or the accelerator is still being decided).
  std::optional<std::string> vmWarmNotice(const store::TemplateRecord& tpl, const runtime::Limits& limits) const;

  DaemonConfig config_;
  std::unique_ptr<store::Store> store_;
  runtime::Registry runtimes_;
  std::unique_ptr<store::TemplateBuilder> templates_;
  std::atomic<int64_t> last_vm_warm_ms_{0};  // how long this node's last template warm-up took; 0: none yet
  Context ctx_{config_, *store_, runtimes_};
  EgressBinding egress_{ctx_};
  UidBlock uid_block_;
  // Lock order, over the manager and its services. A thread holding one of these takes only mutexes
  // further down, never one above it:
  //   1. PoolService::fill_mu_ | snapshot_mu_   outermost; never both at once. fill_mu_ is held around
  //                                     one pool start (startSandbox: slot_mu_, then mu_ to make it live,
  //                                     then PoolService::mu_ to queue it); snapshot_mu_ around a whole
  //                                     snapshot, rollback or fork (a fork starts and hands over its
  //                                     children under it: slot_mu_, mu_, the egress gateway).
  //   2. slot_mu_ | mu_ | PoolService::mu_   never two at once. slot_mu_: the free uid slot and the row
  //                                     insert. mu_: the live table below; held only for map work and a
  //                                     store read (agent()). PoolService::mu_: the pool's queues, and a
  //                                     runtime liveness probe (take). None is held across a runtime
  //                                     operation or a call into the egress gateway.
  //   3. gen_mu_, history_mu_, EgressBinding::secret_box_mu_   leaves: nothing is taken under them.
  //   4. below all of them: the store's connection lock, the runtimes' and the egress supervisor's own
  //      mutexes, which never call back into the manager with a lock held.
  // The sandbox's row is not guarded by any of these: every writer reads it, changes it and writes it
  // whole, so two concurrent changes of one sandbox (a pause during a fork) keep the last writer's view;
  // the operations that must not interleave (snapshot, rollback, fork, history) hold snapshot_mu_.
  // One snapshot, rollback or fork at a time.
  std::mutex snapshot_mu_ SPACE_ACQUIRED_BEFORE(slot_mu_, mu_, gen_mu_);
  SnapshotArchives archives_{ctx_, snapshot_mu_};
  std::mutex gen_mu_;
  // Per sandbox; lost on restart (= changed).
  std::map<std::string, SnapshotGeneration> snapshot_gen_ SPACE_GUARDED_BY(gen_mu_);
  std::mutex history_mu_;
  std::condition_variable history_cv_;
  // Sandboxes whose exec finished, oldest first.
  std::deque<std::string> history_queue_ SPACE_GUARDED_BY(history_mu_);
  std::thread history_thread_;

  std::mutex mu_;
  // Every running sandbox (pooled or handed out).
  std::map<std::string, runtime::Instance> live_ SPACE_GUARDED_BY(mu_);
  // Sandboxes in a rollback: the reaper leaves them alone.
  std::set<std::string> busy_ SPACE_GUARDED_BY(mu_);
  // Last API use per sandbox (auto-pause), in unix ms.
  std::map<std::string, int64_t> last_used_ SPACE_GUARDED_BY(mu_);
  std::mutex slot_mu_;  // serialises uid slot choice with the row insert
  std::atomic<bool> stopping_{false};
  std::atomic<bool> draining_{false};
  PoolService pool_{ctx_, poolHooks()};
  std::thread reaper_thread_;
  Counters counters_;
};

}  // namespace space::core
