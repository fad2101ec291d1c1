// Snapshots, rollback and fork of sandboxes (docs/snapshots.md). The runtime makes and restores the
// files; the manager keeps the rows, names, the order of operations, and re-gives a restarted or forked
// sandbox its identity.
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

#include "common/defer.h"
#include "common/ids.h"
#include "core/manager_impl.h"
#include "core/memory_sealer.h"
#include "core/retention.h"
#include "core/ttl.h"

namespace space::core {
namespace {

constexpr int kMaxForks = 64;

Status checkSnapshotName(const std::string& name) {
  if (name.size() > 64) return makeError(ErrorKind::kInvalidArgument, "snapshot name: at most 64 characters");
  for (char c : name)
    if (!(isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.'))
      return makeError(ErrorKind::kInvalidArgument, "snapshot name '{}': only [A-Za-z0-9._-]", name.substr(0, 64));
  if (name.rfind("snap-", 0) == 0)
    return makeError(ErrorKind::kInvalidArgument, "snapshot name '{}' must not start with snap- (ids do)", name);
  return ok();
}

}  // namespace

// Kept in the row while a rollback runs, so that one finished at the next start does what was asked.
static nlohmann::json afterRestoreJson(const AfterRestore& after) {
  return {{"processes", after.processes}, {"signal", after.signal}};
}

// A guest whose agent predates generations cannot tell its processes about the restore. The restored
// memory runs the same agent as the live VM, so the question is asked before anything changes.
static Status checkGenerations(const store::SandboxRecord& rec, const runtime::Runtime& rt,
                               const runtime::Instance& inst, const AfterRestore& after) {
  if (!rt.capabilities().snapshot_memory || after.processes == "none" || !inst.agent) return ok();
  const auto features = inst.agent->agentInfo().value("features", nlohmann::json::array());
  if (std::find(features.begin(), features.end(), "generation") != features.end()) return ok();
  return makeError(ErrorKind::kUnsupported,
                   "sandbox {}: its guest's agent cannot signal or kill the processes a "
                   "restore brings back (built before generations): rebuild the guest with scripts/vm/build-guest, "
                   "or ask for on_restore \"none\"",
                   rec.id);
}

// What a sandbox put back at a snapshot in place is told (its runtime renews what else it needs).
static runtime::HandOver renewal(const std::string& sandbox_id, const std::map<std::string, std::string>& env,
                                 const AfterRestore& after) {
  runtime::HandOver h;
  h.hostname = sandbox_id;
  h.env = env;
  h.restored = agent::Identity::Generation{after.processes, after.signal};
  return h;
}

static AfterRestore afterRestoreFrom(const nlohmann::json& spec) {
  AfterRestore after;
  if (!spec.is_object()) return after;
  after.processes = spec.value("processes", after.processes);
  after.signal = spec.value("signal", after.signal);
  return after;
}

Status Manager::sealUserEnv(store::SandboxRecord& rec, const std::map<std::string, std::string>& env) {
  rec.spec.erase("env_sealed");
  if (env.empty()) return ok();
  ASSIGN_OR_RETURN(store::SecretBox * box, egress_.secretBox());
  nlohmann::json j(env);
  ASSIGN_OR_RETURN(std::string sealed, box->seal(j.dump(), "env:" + rec.id));
  rec.spec["env_sealed"] = sealed;
  return ok();
}

Result<std::map<std::string, std::string>> Manager::userEnv(const store::SandboxRecord& rec) {
  std::map<std::string, std::string> env;
  if (!rec.spec.contains("env_sealed")) return env;
  ASSIGN_OR_RETURN(store::SecretBox * box, egress_.secretBox());
  ASSIGN_OR_RETURN(std::string plain, box->unseal(rec.spec["env_sealed"].get<std::string>(), "env:" + rec.id));
  auto j = nlohmann::json::parse(plain, nullptr, false);
  if (!j.is_object()) return makeError(ErrorKind::kInternal, "sandbox {}: sealed environment unreadable", rec.id);
  return j.get<std::map<std::string, std::string>>();
}

Result<store::SnapshotRecord> Manager::findSnapshot(const std::string& sandbox_id, const std::string& ref) {
  if (ref.rfind("snap-", 0) == 0) {
    ASSIGN_OR_RETURN(store::SnapshotRecord s, store_->getSnapshot(ref));
    if (!sandbox_id.empty() && s.sandbox_id != sandbox_id)
      return makeError(ErrorKind::kInvalidArgument, "snapshot {} belongs to sandbox {}, not {}", ref, s.sandbox_id,
                       sandbox_id);
    return s;
  }
  ASSIGN_OR_RETURN(auto all, store_->listSnapshots(sandbox_id));
  for (auto& s : all)
    if (s.name == ref) return s;
  return notFoundError("snapshot", "sandbox {} has no snapshot named '{}'", sandbox_id, ref);
}

Result<store::SnapshotRecord> Manager::takeSnapshot(store::SandboxRecord& rec, const std::string& name,
                                                    const std::string& origin) {
  TRY(transitionOf(rec, LifecycleEvent::kSnapshot));
  runtime::Runtime& rt = runtimeFor(rec.runtime);
  auto caps = rt.capabilities();
  if (!caps.snapshot_filesystem && !caps.snapshot_memory)
    return makeError(ErrorKind::kUnsupported, "snapshots are not supported by the {} runtime yet", rec.runtime);
  runtime::Instance inst = instanceOf(rec);
  markPausedForRuntime(inst.persisted.state, rec.state == SandboxState::kPaused);
  auto kind = caps.snapshot_memory ? runtime::SnapshotKind::kFull : runtime::SnapshotKind::kFilesystem;
  // Read before the snapshot: a write between the two then counts as a change (one snapshot too many),
  // never the other way round.
  auto generation = rt.writeGeneration(inst.persisted);
  ASSIGN_OR_RETURN(runtime::SnapshotRef ref, rt.snapshot(inst, kind));
  store::SnapshotRecord s;
  s.id = ref.id;
  s.sandbox_id = rec.id;
  s.name = name;
  s.runtime = rec.runtime;
  s.kind = ref.kind;
  s.path = ref.path;
  s.size_bytes = ref.size_bytes;
  s.origin = origin;
  s.created_ms = nowUnixMs();
  // The files are complete and synced; the row makes the snapshot exist. A crash between the two leaves
  // a directory without a row, which the next start removes.
  if (auto st = store_->insertSnapshot(s); !st) {
    (void)rt.deleteSnapshot(ref);
    return tl::unexpected(st.error());
  }
  {
    std::lock_guard lock(gen_mu_);
    if (generation)
      snapshot_gen_[rec.id] = {s.id, *generation};
    else
      snapshot_gen_.erase(rec.id);
  }
  return s;
}

Result<store::SnapshotRecord> Manager::snapshot(const std::string& id, const std::string& name) {
  TRY(checkSnapshotName(name));
  std::lock_guard op(snapshot_mu_);
  ASSIGN_OR_RETURN(store::SandboxRecord rec, store_->getSandbox(id));
  if (rec.pooled) return notFoundError("sandbox", "sandbox {} not found", id);
  return takeSnapshot(rec, name, "manual");
}

Result<std::vector<store::SnapshotRecord>> Manager::listSnapshots(const std::string& id) {
  ASSIGN_OR_RETURN(store::SandboxRecord rec, store_->getSandbox(id));
  if (rec.pooled) return notFoundError("sandbox", "sandbox {} not found", id);
  return store_->listSnapshots(id);
}

Result<store::SnapshotRecord> Manager::getSnapshot(const std::string& snapshot) {
  return store_->getSnapshot(snapshot);
}

Status Manager::deleteSnapshot(const std::string& snapshot) {
  std::lock_guard op(snapshot_mu_);
  ASSIGN_OR_RETURN(store::SnapshotRecord s, store_->getSnapshot(snapshot));
  // Row first: a crash after it leaves files without a row (removed at start), never a row without files.
  TRY(store_->deleteSnapshot(s.id));
  return runtimeFor(s.runtime).deleteSnapshot(refOf(s));
}

void Manager::deleteSnapshotsOf(const std::string& sandbox_id) {
  {
    std::lock_guard lock(gen_mu_);
    snapshot_gen_.erase(sandbox_id);
  }
  auto all = store_->listSnapshots(sandbox_id);
  if (!all) return;
  for (const auto& s : *all) {
    if (auto st = store_->deleteSnapshot(s.id); !st) continue;
    if (auto st = runtimeFor(s.runtime).deleteSnapshot(refOf(s)); !st)
      spdlog::warn("snapshot {}: {}", s.id, st.error().message);
  }
}

void Manager::keepHistory(store::SandboxRecord& rec, int64_t now) {
  if (!rec.spec.contains("history")) return;
  auto policy = HistoryPolicy::parse(rec.spec["history"]);
  if (!policy) return;
  std::lock_guard op(snapshot_mu_);
  auto all = store_->listSnapshots(rec.id);
  if (!all) return;
  int64_t newest = 0;
  for (const auto& s : *all)
    if (s.origin == "auto") newest = std::max(newest, s.created_ms);
  if (snapshotDue(*policy, newest, now)) {
    auto fresh = store_->getSandbox(rec.id);  // the state may have changed since the reaper listed it
    if (!fresh || !allows(*fresh, LifecycleEvent::kSnapshot)) return;
    auto taken = takeSnapshot(*fresh, "", "auto");
    if (!taken) {
      spdlog::warn("history: snapshot of {}: {}", rec.id, taken.error().message);
      return;
    }
  }
  thinHistory(rec.id, *policy, now);
}

void Manager::thinHistory(const std::string& id, const HistoryPolicy& policy, int64_t now) {
  auto all = store_->listSnapshots(id);
  if (!all) return;
  std::vector<HistoryEntry> autos;
  for (const auto& s : *all)
    if (s.origin == "auto") autos.push_back({s.id, s.created_ms});
  for (const auto& sid : snapshotsToThin(policy, autos, now)) {
    auto s = store_->getSnapshot(sid);
    if (!s || !store_->deleteSnapshot(sid)) continue;
    if (auto st = runtimeFor(s->runtime).deleteSnapshot(refOf(*s)); !st)
      spdlog::warn("history: thin {}: {}", sid, st.error().message);
  }
}

void Manager::execFinished(const std::string& id) {
  std::lock_guard lock(history_mu_);
  if (std::find(history_queue_.begin(), history_queue_.end(), id) == history_queue_.end()) history_queue_.push_back(id);
  history_cv_.notify_one();
}

void Manager::historyLoop() {
  for (;;) {
    std::string id;
    {
      std::unique_lock lock(history_mu_);
      history_cv_.wait(lock, [&] { return stopping_ || !history_queue_.empty(); });
      if (stopping_) return;
      id = history_queue_.front();
      history_queue_.pop_front();
    }
    snapshotAfterExec(id);
  }
}

// Cheap when nothing changed: one row read, a syncfs of what is dirty, one counter read; no tree walk.
void Manager::snapshotAfterExec(const std::string& id) {
  auto rec = store_->getSandbox(id);
  if (!rec || rec->pooled || !rec->spec.contains("history")) return;
  auto policy = HistoryPolicy::parse(rec->spec["history"]);
  if (!policy || !policy->after_exec) return;
  std::lock_guard op(snapshot_mu_);
  rec = store_->getSandbox(id);  // the state may have changed while waiting for the lock
  if (!rec || !allows(*rec, LifecycleEvent::kSnapshot)) return;
  runtime::Runtime& rt = runtimeFor(rec->runtime);
  auto generation = rt.writeGeneration({rec->id, rec->runtime, rec->persisted});
  if (generation) {
    std::optional<SnapshotGeneration> last;
    {
      std::lock_guard lock(gen_mu_);
      if (auto it = snapshot_gen_.find(id); it != snapshot_gen_.end()) last = it->second;
    }
    // Unchanged since a snapshot that still exists: nothing to keep.
    if (last && last->generation == *generation && store_->getSnapshot(last->snapshot_id)) return;
  } else if (generation.error().kind != ErrorKind::kUnsupported) {
    spdlog::warn("history: sandbox {}: {}; taking the snapshot", id, generation.error().message);
  }
  auto taken = takeSnapshot(*rec, "", "auto");
  if (!taken) {
    spdlog::warn("history: snapshot of {} after exec: {}", id, taken.error().message);
    return;
  }
  thinHistory(id, *policy, nowUnixMs());
}

Result<SandboxView> Manager::rollback(const std::string& id, const std::string& snapshot, const AfterRestore& after) {
  std::lock_guard op(snapshot_mu_);
  ASSIGN_OR_RETURN(store::SandboxRecord rec, store_->getSandbox(id));
  if (rec.pooled) return notFoundError("sandbox", "sandbox {} not found", id);
  ASSIGN_OR_RETURN(Transition restored, transitionOf(rec, LifecycleEvent::kRollback));
  ASSIGN_OR_RETURN(store::SnapshotRecord snap, findSnapshot(id, snapshot));
  runtime::Runtime& rt = runtimeFor(rec.runtime);
  ASSIGN_OR_RETURN(auto env, userEnv(rec));
  if (egress_.on() && rec.spec.contains("egress")) {
    CreateSandbox same;
    auto extra = egress_.handOver(rec, same);  // the CA variables; placeholders come from the row below
    if (!extra) return tl::unexpected(extra.error());
    for (auto& [k, v] : *extra) env.emplace(k, v);
    for (const auto& b : rec.spec["egress"].value("secrets", nlohmann::json::array()))
      env.emplace(b["name"].get<std::string>(), b["placeholder"].get<std::string>());
  }
  runtime::Instance inst = instanceOf(rec);
  TRY(checkGenerations(rec, rt, inst, after));
  // Written before any process stops: a spaced killed in the middle finishes the rollback at its next
  // start (finishRollback) instead of finding the sandbox dead.
  rec.pending = {PendingOp::kRollingBack, nowUnixMs(), snap.id, afterRestoreJson(after)};
  TRY(store_->updateSandbox(rec));
  Defer unmark([&] {
    if (rec.pending.op != PendingOp::kRollingBack) return;
    rec.pending = {};
    (void)store_->updateSandbox(rec);
  });
  {
    std::lock_guard lock(mu_);
    busy_.insert(id);
  }
  Defer not_busy([&] {
    std::lock_guard lock(mu_);
    busy_.erase(id);
  });
  auto next = rt.rollback(inst, refOf(snap));
  if (!next) {
    // The runtime leaves the sandbox as it was unless its processes were already stopped.
    if (!inst.agent || !rt.alive(inst)) {
      rec.pending = {};
      enter(rec, transitionOf(rec, LifecycleEvent::kDie).value());
      rec.error = "rollback failed: " + next.error().message;
      (void)store_->updateSandbox(rec);
      std::lock_guard lock(mu_);
      live_.erase(id);
    }
    return tl::unexpected(next.error().context("rollback " + id));
  }
  TRY(rt.renewIdentity(*next, renewal(rec.id, env, after)));
  rec.persisted = next->persisted.state;
  enter(rec, restored);
  rec.pending = {};
  startTtlClock(rec, nowUnixMs());
  TRY(store_->updateSandbox(rec));
  {
    // The files are the snapshot's again: the history holds them, until the next write.
    auto generation = rt.writeGeneration(next->persisted);
    std::lock_guard lock(gen_mu_);
    if (generation)
      snapshot_gen_[id] = {snap.id, *generation};
    else
      snapshot_gen_.erase(id);
  }
  {
    std::lock_guard lock(mu_);
    live_[id] = *next;
  }
  return viewOf(rec, false);
}

Result<runtime::Instance> Manager::finishRollback(store::SandboxRecord& rec) {
  ASSIGN_OR_RETURN(Transition restored, transitionOf(rec, LifecycleEvent::kRollback));
  std::string snap_id = rec.pending.snapshot_id;
  uint32_t files_uid = 0;
  if (auto snap = store_->getSnapshot(snap_id)) {
    std::ifstream in(snap->path + "/snapshot.json");
    auto meta = nlohmann::json::parse(in, nullptr, false);
    if (meta.is_object()) files_uid = meta.value("uid_base", 0u);
  }
  runtime::Runtime& rt = runtimeFor(rec.runtime);
  runtime::Instance old = instanceOf(rec);
  Result<runtime::SnapshotRef> snap = store_->getSnapshot(snap_id).map(refOf);
  ASSIGN_OR_RETURN(runtime::Instance inst, rt.finishRollback(old, snap, files_uid));
  ASSIGN_OR_RETURN(auto env, userEnv(rec));
  // The secrets' placeholders come from the row; the CA variables only from a running space-egress
  // (re-registered by EgressBinding::resync after reconciliation).
  if (rec.spec.contains("egress"))
    for (const auto& b : rec.spec["egress"].value("secrets", nlohmann::json::array()))
      env.emplace(b["name"].get<std::string>(), b["placeholder"].get<std::string>());
  TRY(rt.renewIdentity(inst, renewal(rec.id, env, afterRestoreFrom(rec.pending.after_restore))));
  rec.persisted = inst.persisted.state;
  rec.pending = {};
  enter(rec, restored);
  startTtlClock(rec, nowUnixMs());
  TRY(store_->updateSandbox(rec));
  return inst;
}

void Manager::removeInterruptedForks() {
  auto all = store_->listSandboxes({});
  if (!all) return;
  for (auto& parent : *all) {
    if (parent.pending.op != PendingOp::kForking) continue;
    int64_t since = parent.pending.since_ms;
    for (const auto& child : *all) {
      auto it = child.labels.find("space.fork_of");
      if (it == child.labels.end() || it->second != parent.id || child.created_ms < since) continue;
      spdlog::warn("reconcile: removing sandbox {} of a fork of {} that never finished", child.id, parent.id);
      if (auto st = destroyRecord(child); !st) spdlog::error("reconcile: remove {}: {}", child.id, st.error().message);
    }
    parent.pending = {};
    (void)store_->updateSandbox(parent);
  }
}

Result<ForkResult> Manager::fork(const ForkSandbox& cmd) {
  if (draining_)
    return makeError(ErrorKind::kUnavailable, "this node is draining: it takes no new sandboxes until spaced restarts");
  if (cmd.count < 1 || cmd.count > kMaxForks)
    return makeError(ErrorKind::kInvalidArgument, "count must be between 1 and {}", kMaxForks);
  std::lock_guard op(snapshot_mu_);
  ASSIGN_OR_RETURN(store::SandboxRecord rec, store_->getSandbox(cmd.id));
  if (rec.pooled) return notFoundError("sandbox", "sandbox {} not found", cmd.id);
  if (!runtimeFor(rec.runtime).capabilities().fork)
    return makeError(ErrorKind::kUnsupported, "fork is not supported by the {} runtime yet", rec.runtime);
  {
    auto count = store_->listSandboxes({});
    if (count && static_cast<int>(count->size()) + cmd.count > config_.max_sandboxes)
      return makeError(ErrorKind::kResourceExhausted, "{} more sandboxes would exceed this node's maximum of {}",
                       cmd.count, config_.max_sandboxes);
  }
  if (cmd.ttl_s && (*cmd.ttl_s < 0 || *cmd.ttl_s > config_.max_ttl_s))
    return makeError(ErrorKind::kInvalidArgument, "ttl must be between 0 and {} seconds", config_.max_ttl_s);
  TRY(checkGenerations(rec, runtimeFor(rec.runtime), instanceOf(rec), cmd.after_restore));
  ForkResult out;
  if (cmd.snapshot.empty()) {
    ASSIGN_OR_RETURN(out.snapshot, takeSnapshot(rec, "", "fork"));
  } else {
    ASSIGN_OR_RETURN(out.snapshot, findSnapshot(cmd.id, cmd.snapshot));
  }
  ASSIGN_OR_RETURN(store::TemplateRecord tpl, store_->getTemplate(rec.template_name));
  runtime::Limits limits = defaultLimits(rec.runtime);
  const auto& l = rec.spec.value("limits", nlohmann::json::object());
  limits.cpu_millis = l.value("cpu_millis", limits.cpu_millis);
  limits.memory_bytes = l.value("memory_bytes", limits.memory_bytes);
  limits.pids = l.value("pids", limits.pids);
  limits.disk_bytes = l.value("disk_bytes", limits.disk_bytes);
  // Each child is created as the parent was: its environment, labels, TTL and network policy, with its
  // own id, address, CA and secret placeholders.
  CreateSandbox like;
  like.template_name = rec.template_name;
  like.isolation = rec.runtime;
  ASSIGN_OR_RETURN(like.env, userEnv(rec));
  like.labels = rec.labels;
  like.labels["space.fork_of"] = rec.id;
  like.ttl_s = cmd.ttl_s.value_or(rec.spec.value("ttl_s", int64_t{0}));
  if (rec.spec.contains("egress")) {
    const auto& e = rec.spec["egress"];
    if (e.contains("policy")) like.network = e["policy"];
    for (const auto& b : e.value("secrets", nlohmann::json::array()))
      like.secrets.push_back(b["name"].get<std::string>());
  }
  runtime::SnapshotRef ref = refOf(out.snapshot);
  // All or nothing across a crash too: children made after this mark are removed at the next start
  // unless the fork finished (removeInterruptedForks).
  rec.pending = {.op = PendingOp::kForking, .since_ms = nowUnixMs()};
  TRY(store_->updateSandbox(rec));
  Defer unmark([&] {
    if (auto fresh = store_->getSandbox(rec.id); fresh && fresh->pending.op == PendingOp::kForking) {
      fresh->pending = {};
      (void)store_->updateSandbox(*fresh);
    }
  });
  // Children start side by side (each start waits on the kernel and the agent more than on a CPU); all or
  // nothing: when one fails, the others are deleted again.
  std::vector<std::optional<Result<SandboxView>>> made(static_cast<size_t>(cmd.count));
  std::atomic<int> next{0};
  auto worker = [&] {
    for (int i; (i = next++) < cmd.count;) {
      auto started = startSandbox(tpl, limits, like.env, /*pooled=*/false, rec.runtime, false, &ref);
      if (!started) {
        made[static_cast<size_t>(i)] = tl::unexpected(started.error());
        continue;
      }
      made[static_cast<size_t>(i)] = completeCreate(*started, like, &cmd.after_restore);
    }
  };
  int threads = std::clamp(static_cast<int>(std::thread::hardware_concurrency()), 1, 4);
  std::vector<std::thread> helpers;
  for (int t = 1; t < std::min(threads, cmd.count); ++t) helpers.emplace_back(worker);
  worker();
  for (auto& t : helpers) t.join();
  std::optional<Error> failure;
  for (auto& m : made) {
    if (m && *m) {
      counters_.creates_fresh++;
      out.sandboxes.push_back(std::move(**m));
    } else {
      counters_.create_failures++;
      if (!failure) failure = m ? m->error() : Error{ErrorKind::kInternal, 0, "fork child not started"};
    }
  }
  if (failure) {
    for (const auto& v : out.sandboxes) (void)destroyRecord(v.record);
    return tl::unexpected(failure->context(fmt::format("fork {} into {}", rec.id, cmd.count)));
  }
  return out;
}

}  // namespace space::core
