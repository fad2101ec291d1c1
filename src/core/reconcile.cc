// Start-up reconciliation (the database against what really exists in the kernel) and the reaper
// (TTL expiry, sandboxes whose agent died).
#include <spdlog/spdlog.h>

#include <filesystem>

#include "common/ids.h"
#include "core/manager_impl.h"
#include "core/ttl.h"

namespace space::core {

std::string Manager::poolMismatch(const store::SandboxRecord& rec) const {
  runtime::Runtime* rt = runtimes_.find(rec.runtime);
  bool networked = runtimeFor(rec.runtime).network({rec.id, rec.runtime, rec.persisted}).has_value();
  bool want = egress_.on() && rt && rt->capabilities().networked;
  if (networked != want)
    return networked ? "it has a network and egress is now off" : "it has no network and egress is now on";
  const nlohmann::json& l = rec.spec.value("limits", nlohmann::json::object());
  runtime::Limits d = defaultLimits(rec.runtime);
  if (l.value("cpu_millis", 0u) != d.cpu_millis || l.value("memory_bytes", uint64_t{0}) != d.memory_bytes ||
      l.value("pids", 0u) != d.pids || l.value("disk_bytes", uint64_t{0}) != d.disk_bytes)
    return "it has other limits than this configuration's defaults";
  return "";
}

Status Manager::reconcile() {
  store::SandboxFilter all;
  all.include_pooled = true;
  ASSIGN_OR_RETURN(auto records, store_->listSandboxes(all));
  std::set<std::string> known;
  for (auto& rec : records) {
    known.insert(rec.id);
    runtime::PersistedInstance persisted{rec.id, rec.runtime, rec.persisted};
    if (rec.state == SandboxState::kRunning || rec.state == SandboxState::kPaused) {
      // A frozen agent cannot answer the handshake: thaw every sandbox for the reconnect (a running one
      // may have been frozen, or its VM stopped, by a snapshot when spaced died), then pause the paused
      // ones again. A pooled VM stays parked (stopped until a create takes it).
      bool paused = rec.state == SandboxState::kPaused;
      bool parked = rec.pooled && runtimeFor(rec.runtime).parked(persisted);
      if (rec.pooled) {
        if (std::string why = poolMismatch(rec); !why.empty()) {
          spdlog::info("reconcile: recycling pooled sandbox {}: {}", rec.id, why);
          if (auto st = runtimeFor(rec.runtime).destroy(persisted); !st)
            spdlog::error("reconcile: clean sandbox {}: {}", rec.id, st.error().message);
          (void)store_->deleteSandbox(rec.id);
          continue;
        }
      }
      if (!parked) {
        runtime::Instance frozen;
        frozen.id = rec.id;
        frozen.persisted = persisted;
        if (auto st = runtimeFor(rec.runtime).resume(frozen); !st)
          spdlog::warn("reconcile: thaw sandbox {}: {}", rec.id, st.error().message);
      }
      auto inst = runtimeFor(rec.runtime).reattach(persisted);
      if (inst && paused) {
        if (auto st = runtimeFor(rec.runtime).pause(*inst); !st)
          spdlog::error("reconcile: pause sandbox {} again: {}", rec.id, st.error().message);
      }
      if (inst) {
        spdlog::info("reconcile: reattached sandbox {}", rec.id);
        if (rec.pending.op == PendingOp::kRollingBack) {  // spaced died before the rollback stopped anything
          rec.pending = {};
          (void)store_->updateSandbox(rec);
        }
        {
          std::lock_guard lock(mu_);
          live_[rec.id] = *inst;
        }
        if (rec.pooled) pool_.adopt(Started{rec, *inst});
        continue;
      }
      if (rec.pending.op == PendingOp::kRollingBack) {
        spdlog::warn("reconcile: finishing the interrupted rollback of sandbox {}", rec.id);
        auto restarted = finishRollback(rec);
        if (restarted) {
          std::lock_guard lock(mu_);
          live_[rec.id] = *restarted;
          continue;
        }
        inst = tl::unexpected(restarted.error().context("finish rollback"));
        rec.pending = {};
      }
      spdlog::warn("reconcile: sandbox {} is gone: {}", rec.id, inst.error().message);
      if (auto st = runtimeFor(rec.runtime).destroy(persisted); !st)
        spdlog::error("reconcile: clean sandbox {}: {}", rec.id, st.error().message);
      if (rec.pooled) {
        (void)store_->deleteSandbox(rec.id);
        continue;
      }
      enter(rec, transitionOf(rec, LifecycleEvent::kDie).value());
      rec.error = "the sandbox died while spaced was not running: " + inst.error().message;
      (void)store_->updateSandbox(rec);
      counters_.failed_sandboxes++;
    } else if (rec.state == SandboxState::kStarting || rec.state == SandboxState::kDeleting) {
      // Interrupted half-way: finish the job.
      spdlog::info("reconcile: finishing interrupted {} of sandbox {}", store::toString(rec.state), rec.id);
      if (auto st = runtimeFor(rec.runtime).destroy(persisted); !st)
        spdlog::error("reconcile: clean sandbox {}: {}", rec.id, st.error().message);
      (void)store_->deleteSandbox(rec.id);
    }
  }
  removeInterruptedForks();
  forgetUnknown(known);
  // Uploads and exports a previous spaced was streaming when it stopped.
  {
    std::error_code ec;
    std::filesystem::remove_all(config_.state_dir + "/scratch", ec);
  }
  egress_.resync();
  return ok();
}

void Manager::forgetUnknown(const std::set<std::string>& known_ids) {
  runtime::Known known;
  known.sandboxes = known_ids;
  store::SandboxFilter everything;
  everything.include_pooled = true;
  auto left = store_->listSandboxes(everything);
  auto snapshots = store_->listSnapshots("");
  // Unreadable rows: nothing is removed rather than everything.
  if (!left || !snapshots) return;
  for (const auto& rec : *left)
    if (auto network = runtimeFor(rec.runtime).network({rec.id, rec.runtime, rec.persisted});
        network && !network->link.empty())
      known.links.insert(network->link);
  for (const auto& s : *snapshots) known.snapshots.insert(std::filesystem::path(s.path).filename().string());
  for (runtime::Runtime* rt : runtimes_.all()) rt->forgetUnknown(known);
}

void Manager::reapOnce() {
  auto records = store_->listSandboxes({});
  if (!records) return;
  int64_t now = nowUnixMs();
  for (auto& rec : *records) {
    if (stopping_) return;
    auto expiry = transition(lifecycleOf(rec), LifecycleEvent::kExpire);
    if (rec.expires_ms && rec.expires_ms <= now && expiry && expiry->action == Transition::Action::kApply) {
      spdlog::info("reaper: sandbox {} reached its TTL", rec.id);
      if (auto st = destroyRecord(rec); st) counters_.reaped_ttl++;
      continue;
    }
    if (rec.state == SandboxState::kPaused && config_.max_paused_s > 0 && pausedAtMs(rec) &&
        now - pausedAtMs(rec) >= config_.max_paused_s * 1000) {
      spdlog::info("reaper: sandbox {} stayed paused longer than max_paused_s ({} s)", rec.id, config_.max_paused_s);
      if (auto st = destroyRecord(rec); st) counters_.reaped_paused++;
      continue;
    }
    if (rec.state != SandboxState::kRunning) continue;  // only a running sandbox's agent is watched
    std::shared_ptr<agent::AgentClient> client;
    {
      std::lock_guard lock(mu_);
      if (busy_.count(rec.id)) continue;  // a rollback restarts it right now
      auto it = live_.find(rec.id);
      if (it != live_.end()) client = it->second.agent;
    }
    keepHistory(rec, now);
    autoPause(rec, now);
    if (rec.state != SandboxState::kRunning) continue;
    if (client && client->alive()) continue;
    runtime::PersistedInstance persisted{rec.id, rec.runtime, rec.persisted};
    auto inst = runtimeFor(rec.runtime).reattach(persisted);
    if (inst) {
      std::lock_guard lock(mu_);
      live_[rec.id] = *inst;
      continue;
    }
    spdlog::warn("reaper: sandbox {} died: {}", rec.id, inst.error().message);
    {
      std::lock_guard lock(mu_);
      live_.erase(rec.id);
    }
    (void)runtimeFor(rec.runtime).destroy(persisted);
    enter(rec, transitionOf(rec, LifecycleEvent::kDie).value());
    rec.error = "the sandbox's agent exited: " + inst.error().message;
    (void)store_->updateSandbox(rec);
    counters_.failed_sandboxes++;
  }
}

void Manager::autoPause(store::SandboxRecord& rec, int64_t now) {
  int64_t idle_s = rec.spec.value("idle_pause_s", int64_t{0});
  if (idle_s <= 0) return;
  int64_t last;
  {
    std::lock_guard lock(mu_);
    auto [it, fresh] = last_used_.try_emplace(rec.id, now);  // unknown after a restart: idle from now on
    last = it->second;
  }
  if (now - last < idle_s * 1000) return;
  auto idle = transitionOf(rec, LifecycleEvent::kIdlePause);
  if (!idle) return;
  runtime::Runtime& rt = runtimeFor(rec.runtime);
  if (!rt.capabilities().pause) return;
  runtime::Instance inst = instanceOf(rec);
  if (auto st = rt.pause(inst); !st) {
    spdlog::warn("auto-pause {}: {}", rec.id, st.error().message);
    return;
  }
  const Lifecycle before = lifecycleOf(rec);
  enter(rec, *idle);
  stopTtlClock(rec, now);
  if (auto st = store_->updateSandbox(rec); !st) {
    (void)rt.resume(inst);
    enter(rec, before);  // still running, as the failed write left it
    startTtlClock(rec, now);
    return;
  }
  spdlog::info("auto-pause: sandbox {} idle for {} s", rec.id, (now - last) / 1000);
}

void Manager::reapLoop() {
  while (!stopping_) {
    reapOnce();
    for (int i = 0; i < 10 && !stopping_; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

Status Manager::startBackground() {
  TRY(reconcile());
  egress_.startWatching();
  pool_.startFilling();
  reaper_thread_ = std::thread([this] { reapLoop(); });
  history_thread_ = std::thread([this] { historyLoop(); });
  return ok();
}

}  // namespace space::core
