#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <random>

#include "common/ids.h"
#include "core/file_table.h"
#include "core/manager_impl.h"
#include "core/ttl.h"

namespace space::core {
namespace {

constexpr uint64_t kMiB = 1ull << 20;

}  // namespace

Manager::Manager(DaemonConfig config, std::unique_ptr<store::Store> store, runtime::Registry runtimes,
                 std::unique_ptr<store::TemplateBuilder> templates)
    : config_(std::move(config)),
      store_(std::move(store)),
      runtimes_(std::move(runtimes)),
      templates_(std::move(templates)) {}

Manager::~Manager() {
  egress_.reset();  // its watcher calls back into the manager
  stopping_ = true;
  pool_.stop();
  {
    std::lock_guard lock(history_mu_);
    history_cv_.notify_all();
  }
  if (history_thread_.joinable()) history_thread_.join();
  if (reaper_thread_.joinable()) reaper_thread_.join();
  // Live sandboxes keep running: the next spaced reattaches to them.
}

runtime::Runtime& Manager::runtimeFor(const std::string& name) const { return ctx_.runtimeFor(name); }

Result<runtime::Runtime*> Manager::availableTier(const std::string& name) const {
  std::string why = runtimes_.unavailableReason(name);
  if (!why.empty())
    return makeError(ErrorKind::kUnavailable, "the {} tier is not available on this node: {}", name, why);
  return runtimes_.find(name);
}

Result<std::string> Manager::resolveIsolation(const std::string& requested) const {
  if (requested != "auto" && requested != "jail" && requested != "vm")
    return makeError(ErrorKind::kInvalidArgument, "isolation must be jail, vm or auto, not '{}'", requested);
  if (requested != "auto") {
    // While a tier still finds out whether it can run (a KVM probe), the create waits for the verdict.
    ASSIGN_OR_RETURN(runtime::Runtime * rt, availableTier(requested));
    return rt->name();
  }
  // auto: a VM only where KVM is proven; emulation is there to be asked for, and a probe still running
  // is not a proof.
  for (runtime::Runtime* rt : runtimes_.all())
    if (rt->capabilities().accelerated) return rt->name();
  return runtimes_.all().front()->name();
}

nlohmann::json Manager::isolationInfo() {
  nlohmann::json info = runtimes_.describe();
  info["auto"] = resolveIsolation("auto").value_or("jail");
  return info;
}

nlohmann::json Manager::egressInfo() const { return egress_.info(); }

runtime::Limits Manager::defaultLimits(const std::string& isolation) const {
  runtime::Limits limits = config_.default_limits;
  // One set of defaults for both tiers; an operator may give VMs a default guest RAM of their own.
  if (isolation == "vm" && config_.vm_default_memory_mib != 0)
    limits.memory_bytes = config_.vm_default_memory_mib * kMiB;
  return limits;
}

Result<runtime::Limits> Manager::resolveLimits(const CreateSandbox& cmd, const std::string& isolation) const {
  runtime::Limits limits = defaultLimits(isolation);
  long pages = sysconf(_SC_PHYS_PAGES);
  uint64_t host_memory = pages > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(sysconf(_SC_PAGESIZE)) : 0;
  if (cmd.cpu_millis) {
    if (*cmd.cpu_millis < 10 || *cmd.cpu_millis > 64000)
      return makeError(ErrorKind::kInvalidArgument, "cpus must be between 0.01 and 64");
    limits.cpu_millis = *cmd.cpu_millis;
  }
  if (cmd.memory_bytes) {
    if (*cmd.memory_bytes < 16 * kMiB) return makeError(ErrorKind::kInvalidArgument, "memory must be at least 16 MiB");
    if (host_memory && *cmd.memory_bytes > host_memory)
      return makeError(ErrorKind::kInvalidArgument, "memory of {} MiB exceeds this host's {} MiB",
                       *cmd.memory_bytes / kMiB, host_memory / kMiB);
    limits.memory_bytes = *cmd.memory_bytes;
  }
  if (cmd.pids) {
    if (*cmd.pids < 8 || *cmd.pids > 1u << 22)
      return makeError(ErrorKind::kInvalidArgument, "pids must be between 8 and 4194304");
    limits.pids = *cmd.pids;
    // Every process may hold nofile descriptors: a sandbox's share of the host's file table (J26).
    uint64_t file_max =
        runtimeFor(isolation).capabilities().own_kernel ? 0 : hostFileMax();  // a guest's files are its own kernel's
    if (file_max > kHostFileReserve) {
      uint64_t share = (file_max - kHostFileReserve) / static_cast<uint64_t>(std::max(config_.max_sandboxes, 1));
      if (uint64_t{limits.pids} * limits.nofile > share)
        return makeError(ErrorKind::kInvalidArgument,
                         "pids {} × {} open files each exceeds a sandbox's share of the host's file table ({} files: "
                         "fs.file-max {} over max_sandboxes {}); ask for at most {} pids",
                         limits.pids, limits.nofile, share, file_max, config_.max_sandboxes, share / limits.nofile);
    }
  }
  if (cmd.disk_bytes) {
    if (*cmd.disk_bytes < 16 * kMiB) return makeError(ErrorKind::kInvalidArgument, "disk must be at least 16 MiB");
    if (*cmd.disk_bytes > config_.disk_volume_bytes)
      return makeError(ErrorKind::kInvalidArgument, "disk of {} MiB exceeds the node's volume of {} MiB",
                       *cmd.disk_bytes / kMiB, config_.disk_volume_bytes / kMiB);
    limits.disk_bytes = *cmd.disk_bytes;
  }
  return limits;
}

runtime::SandboxSpec Manager::specFor(const store::SandboxRecord& rec, const store::TemplateRecord& tpl,
                                      const runtime::Limits& limits) const {
  runtime::SandboxSpec spec;
  spec.id = rec.id;
  spec.template_rootfs = tpl.rootfs;
  spec.template_id = tpl.id;
  spec.dir = config_.state_dir + "/sandboxes/" + rec.id;
  spec.hostname = rec.id;
  spec.uid_base = uid_block_.uidBase(static_cast<uint32_t>(rec.uid_slot));
  spec.uid_count = kUidRange;
  spec.limits = limits;
  return spec;
}

Result<Started> Manager::startSandbox(const store::TemplateRecord& tpl, const runtime::Limits& limits,
                                      const std::map<std::string, std::string>& env, bool pooled,
                                      const std::string& isolation, bool cold_boot, const runtime::SnapshotRef* from) {
  store::SandboxRecord rec;
  rec.id = newSandboxId();
  rec.template_name = tpl.name;
  rec.template_id = tpl.id;
  rec.state = SandboxState::kStarting;  // where every sandbox begins
  rec.runtime = isolation;
  rec.pooled = pooled;
  rec.created_ms = nowUnixMs();
  rec.spec = {{"limits",
               {{"cpu_millis", limits.cpu_millis},
                {"memory_bytes", limits.memory_bytes},
                {"pids", limits.pids},
                {"disk_bytes", limits.disk_bytes}}}};
  std::string dir = config_.state_dir + "/sandboxes/" + rec.id;
  rec.persisted = {{"dir", dir}};
  {
    // The row claims the uid slot before any kernel object exists, so a crash here leaves a row that
    // reconciliation cleans, never an object nobody knows about.
    std::lock_guard lock(slot_mu_);
    ASSIGN_OR_RETURN(int slot, store_->freeUidSlot());
    if (slot < 0 || static_cast<uint32_t>(slot) >= kSlotsPerBlock)
      return makeError(ErrorKind::kResourceExhausted, "no free uid range for another sandbox ({} per node)",
                       kSlotsPerBlock);
    rec.uid_slot = slot;
    TRY(store_->insertSandbox(rec));
  }

  runtime::SandboxSpec spec = specFor(rec, tpl, limits);
  spec.env = env;
  spec.pooled = pooled;
  runtime::Runtime& rt = runtimeFor(isolation);
  auto inst = from ? rt.restore(*from, spec) : cold_boot ? rt.coldStart(spec) : rt.prepare(spec);
  if (!inst) {
    Error err = inst.error();
    (void)rt.destroy(runtime::PersistedInstance{rec.id, rec.runtime, rec.persisted});
    (void)store_->deleteSandbox(rec.id);
    return tl::unexpected(err.context("start sandbox " + rec.id));
  }
  rec.persisted = inst->persisted.state;
  if (egress_.on() && rt.network(inst->persisted)) {
    // The CA goes into the trust store through the agent: a VM fresh from prepare is restored first
    // (no code of the request runs before its identity either way), a pooled one runs again meanwhile.
    auto attached = [&]() -> Status {
      bool parked = rt.parked(inst->persisted);
      if (!inst->agent) TRY(rt.activate(*inst));
      if (parked) TRY(rt.resume(*inst));
      TRY(egress_.attach(rec, *inst));
      if (parked) TRY(rt.pause(*inst));
      rec.persisted = inst->persisted.state;
      return ok();
    }();
    if (auto st = attached; !st) {
      (void)rt.destroy(inst->persisted);
      (void)store_->deleteSandbox(rec.id);
      return tl::unexpected(st.error().context("start sandbox " + rec.id + ": egress"));
    }
  }
  // A pooled sandbox is ready; one being made for a request is starting until the request is answered
  // (the reaper leaves it alone, and a crash before then cleans it at start-up).
  if (pooled) enter(rec, transitionOf(rec, LifecycleEvent::kReady).value());
  if (auto st = store_->updateSandbox(rec); !st) {
    (void)rt.destroy(inst->persisted);
    (void)store_->deleteSandbox(rec.id);
    return tl::unexpected(st.error());
  }
  return Started{std::move(rec), std::move(*inst)};
}

PoolService::Hooks Manager::poolHooks() {
  PoolService::Hooks hooks;
  hooks.ready = [this](const store::TemplateRecord& tpl, const std::string& tier) {
    store::SandboxRecord probe;
    return runtimeFor(tier).templateReady(specFor(probe, tpl, defaultLimits(tier)));
  };
  hooks.start = [this](const store::TemplateRecord& tpl, const std::string& tier) {
    return startSandbox(tpl, defaultLimits(tier), {}, /*pooled=*/true, tier);
  };
  hooks.started = [this](const Started& s) {
    std::lock_guard lock(mu_);
    live_[s.record.id] = s.instance;
  };
  hooks.destroy = [this](const store::SandboxRecord& rec) { (void)destroyRecord(rec); };
  return hooks;
}

Status Manager::handOver(Started& started, const std::map<std::string, std::string>& env,
                         const AfterRestore* restored) {
  runtime::Runtime& rt = runtimeFor(started.record.runtime);
  TRY(rt.activate(started.instance));
  runtime::HandOver h;
  h.hostname = started.record.id;
  h.env = env;
  if (restored) h.restored = agent::Identity::Generation{restored->processes, restored->signal};
  h.explicit_proxy_port = egress_.explicitProxyPort();
  TRY(rt.handOver(started.instance, h));
  // Activation may change what the runtime persists (a VM is restored now).
  started.record.persisted = started.instance.persisted.state;
  return ok();
}

Result<SandboxView> Manager::create(const CreateSandbox& cmd) {
  if (draining_)
    return makeError(ErrorKind::kUnavailable, "this node is draining: it takes no new sandboxes until spaced restarts");
  std::string template_name = cmd.template_name.empty() ? config_.default_template : cmd.template_name;
  ASSIGN_OR_RETURN(std::string isolation, resolveIsolation(cmd.isolation));
  if (cmd.ttl_s < 0 || cmd.ttl_s > config_.max_ttl_s)
    return makeError(ErrorKind::kInvalidArgument, "ttl must be between 0 and {} seconds", config_.max_ttl_s);
  ASSIGN_OR_RETURN(runtime::Limits limits, resolveLimits(cmd, isolation));
  if (cmd.cold_boot && !runtimeFor(isolation).capabilities().cold_boot)
    return makeError(ErrorKind::kInvalidArgument, "cold_boot applies to the vm tier only");
  TRY(egress_.checkRequest(cmd, isolation));
  auto tpl = store_->getTemplate(template_name);
  if (!tpl) {
    if (tpl.error().kind == ErrorKind::kNotFound)
      return notFoundError("template",
                           "template '{}' not found; build it with `space template build {} …` "
                           "or list templates with `space template ls`",
                           template_name, template_name);
    return tl::unexpected(tpl.error());
  }
  {
    auto count = store_->listSandboxes({});
    if (count && static_cast<int>(count->size()) >= config_.max_sandboxes)
      return makeError(ErrorKind::kResourceExhausted, "this node already runs its maximum of {} sandboxes",
                       config_.max_sandboxes);
  }

  std::optional<Started> started;
  if (pool_.serves(cmd, template_name) && !cmd.cold_boot)
    started = pool_.take(PoolService::key(isolation, template_name));
  if (started) {
    counters_.creates_pool++;
  } else {
    std::optional<std::string> warming;
    if (isolation == "vm" && !cmd.cold_boot) warming = vmWarmNotice(*tpl, limits);
    if (warming && cmd.progress) cmd.progress(*warming);
    auto t0 = std::chrono::steady_clock::now();
    auto fresh = startSandbox(*tpl, limits, cmd.env, /*pooled=*/false, isolation, cmd.cold_boot);
    if (warming && fresh)
      last_vm_warm_ms_ =
          std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
    if (!fresh) {
      counters_.create_failures++;
      return tl::unexpected(fresh.error());
    }
    counters_.creates_fresh++;
    started = std::move(*fresh);
  }
  return completeCreate(*started, cmd);
}

Result<SandboxView> Manager::completeCreate(Started& started_ref, const CreateSandbox& cmd,
                                            const AfterRestore* restored) {
  Started* started = &started_ref;
  std::map<std::string, std::string> env = cmd.env;
  if (egress_.on() && started->record.spec.contains("egress")) {
    auto extra = egress_.handOver(started->record, cmd);
    if (!extra) {
      counters_.create_failures++;
      (void)destroyRecord(started->record);
      return tl::unexpected(extra.error().context("start sandbox " + started->record.id));
    }
    for (auto& [k, v] : *extra) env.emplace(k, v);  // the request's own env wins
  }
  if (auto st = handOver(*started, env, restored); !st) {
    counters_.create_failures++;
    (void)destroyRecord(started->record);
    return tl::unexpected(st.error().context("start sandbox " + started->record.id));
  }

  store::SandboxRecord& rec = started->record;
  auto handed = transitionOf(rec, LifecycleEvent::kHandOver);
  if (!handed) {
    (void)destroyRecord(rec);
    return tl::unexpected(handed.error());
  }
  rec.pooled = false;
  enter(rec, *handed);
  rec.labels = cmd.labels;
  rec.created_ms = nowUnixMs();
  int64_t ttl = cmd.ttl_s ? cmd.ttl_s : config_.default_ttl_s;
  rec.expires_ms = ttl ? rec.created_ms + ttl * 1000 : 0;
  rec.spec["env_keys"] = nlohmann::json::array();  // names only: values (placeholders too) stay out of the row
  for (auto& [k, v] : cmd.env) rec.spec["env_keys"].push_back(k);
  rec.spec["ttl_s"] = ttl;
  if (cmd.idle_pause_s > 0) rec.spec["idle_pause_s"] = cmd.idle_pause_s;
  if (cmd.history) rec.spec["history"] = *cmd.history;
  if (auto st = sealUserEnv(rec, cmd.env); !st) {
    (void)destroyRecord(rec);
    return tl::unexpected(st.error());
  }
  if (auto st = store_->updateSandbox(rec); !st) {
    (void)destroyRecord(rec);
    return tl::unexpected(st.error());
  }
  {
    std::lock_guard lock(mu_);
    live_[rec.id] = started->instance;
    last_used_[rec.id] = nowUnixMs();
  }
  return viewOf(rec, false);
}

Result<SandboxView> Manager::get(const std::string& id) {
  ASSIGN_OR_RETURN(store::SandboxRecord rec, store_->getSandbox(id));
  if (rec.pooled) return notFoundError("sandbox", "sandbox {} not found", id);
  return viewOf(rec, true);
}

Result<std::vector<SandboxView>> Manager::list(const ListSandboxes& cmd) {
  store::SandboxFilter filter;
  filter.labels = cmd.labels;
  if (cmd.state) {
    filter.state = store::parseSandboxState(*cmd.state);
    if (!filter.state) return std::vector<SandboxView>{};  // a state the API names that no sandbox is in ("stopped")
  }
  ASSIGN_OR_RETURN(auto records, store_->listSandboxes(filter));
  std::vector<SandboxView> out;
  for (auto& r : records) out.push_back(viewOf(r, false));
  return out;
}

Status Manager::destroyRecord(store::SandboxRecord rec) {
  ASSIGN_OR_RETURN(Transition deleting, transitionOf(rec, LifecycleEvent::kDelete));
  enter(rec, deleting);
  TRY(store_->updateSandbox(rec));
  {
    std::lock_guard lock(mu_);
    live_.erase(rec.id);
  }
  egress_.detach(rec);
  TRY(runtimeFor(rec.runtime).destroy(runtime::PersistedInstance{rec.id, rec.runtime, rec.persisted}));
  deleteSnapshotsOf(rec.id);
  TRY(store_->deleteSandbox(rec.id));
  counters_.destroys++;
  return ok();
}

Status Manager::destroy(const std::string& id) {
  ASSIGN_OR_RETURN(store::SandboxRecord rec, store_->getSandbox(id));
  if (rec.pooled) return notFoundError("sandbox", "sandbox {} not found", id);
  if (auto st = destroyRecord(rec); !st) {
    Error err = st.error();
    return tl::unexpected(err.context("delete sandbox " + id));
  }
  return ok();
}

runtime::Instance Manager::instanceOf(const store::SandboxRecord& rec) {
  runtime::Instance inst;
  {
    std::lock_guard lock(mu_);
    auto it = live_.find(rec.id);
    if (it != live_.end()) inst = it->second;
  }
  inst.id = rec.id;
  inst.persisted = runtime::PersistedInstance{rec.id, rec.runtime, rec.persisted};
  return inst;
}

Status Manager::pause(const std::string& id) {
  ASSIGN_OR_RETURN(store::SandboxRecord rec, store_->getSandbox(id));
  if (rec.pooled) return notFoundError("sandbox", "sandbox {} not found", id);
  ASSIGN_OR_RETURN(Transition t, transitionOf(rec, LifecycleEvent::kPause));
  if (t.action == Transition::Action::kNothing) return ok();
  runtime::Runtime& rt = runtimeFor(rec.runtime);
  if (!rt.capabilities().pause)
    return makeError(ErrorKind::kUnsupported, "pause is not supported by the {} runtime yet", rec.runtime);
  runtime::Instance inst = instanceOf(rec);
  TRY(rt.pause(inst));
  enter(rec, t);  // paused by its owner: only an explicit resume wakes it
  stopTtlClock(rec, nowUnixMs());
  if (auto st = store_->updateSandbox(rec); !st) {
    (void)rt.resume(inst);
    return st;
  }
  return ok();
}

Status Manager::resume(const std::string& id) {
  ASSIGN_OR_RETURN(store::SandboxRecord rec, store_->getSandbox(id));
  if (rec.pooled) return notFoundError("sandbox", "sandbox {} not found", id);
  ASSIGN_OR_RETURN(Transition t, transitionOf(rec, LifecycleEvent::kResume));
  if (t.action == Transition::Action::kNothing) return ok();
  runtime::Instance inst = instanceOf(rec);
  TRY(runtimeFor(rec.runtime).resume(inst));
  enter(rec, t);
  startTtlClock(rec, nowUnixMs());
  TRY(store_->updateSandbox(rec));
  touch(id);
  return ok();
}

void Manager::touch(const std::string& id) {
  std::lock_guard lock(mu_);
  last_used_[id] = nowUnixMs();
}

Result<std::shared_ptr<agent::AgentClient>> Manager::agent(const std::string& id) {
  touch(id);
  {
    std::lock_guard lock(mu_);
    auto it = live_.find(id);
    if (it != live_.end() && it->second.agent && it->second.agent->alive()) {
      // A pooled sandbox is not addressable until it is handed out.
      auto rec = store_->getSandbox(id);
      if (rec && !rec->pooled && rec->state == SandboxState::kRunning) return it->second.agent;
    }
  }
  ASSIGN_OR_RETURN(store::SandboxRecord rec, store_->getSandbox(id));
  if (rec.pooled) return notFoundError("sandbox", "sandbox {} not found", id);
  ASSIGN_OR_RETURN(Transition use, transitionOf(rec, LifecycleEvent::kUse));
  if (use.action == Transition::Action::kWakeFirst) {
    // Paused for being idle: the next use wakes it.
    TRY(resume(id));
    return agent(id);
  }
  // The connection broke (agent restarted, transient error): reconnect once.
  auto inst = runtimeFor(rec.runtime).reattach(runtime::PersistedInstance{rec.id, rec.runtime, rec.persisted});
  if (!inst) return makeError(ErrorKind::kUnavailable, "sandbox {} does not answer: {}", id, inst.error().message);
  std::lock_guard lock(mu_);
  live_[id] = *inst;
  return inst->agent;
}

Result<uint64_t> Manager::oomKills(const std::string& id) {
  ASSIGN_OR_RETURN(store::SandboxRecord rec, store_->getSandbox(id));
  if (rec.pooled) return makeError(ErrorKind::kNotFound, "sandbox {} not found", id);
  return runtimeFor(rec.runtime).oomKills(runtime::PersistedInstance{rec.id, rec.runtime, rec.persisted});
}

Result<store::TemplateRecord> Manager::buildTemplate(const BuildTemplate& cmd, const ProgressFn& progress) {
  store::TemplateBuildSpec spec{cmd.name, cmd.kind, cmd.suite, cmd.variant, cmd.packages, cmd.mirror, cmd.path};
  ASSIGN_OR_RETURN(store::TemplateRecord rec, templates_->build(spec, progress));
  pool_.wake();  // the pool may have been waiting for this template
  return rec;
}

Result<std::vector<store::TemplateRecord>> Manager::listTemplates() { return store_->listTemplates(); }

Result<nlohmann::json> Manager::warmTemplate(const std::string& name) {
  ASSIGN_OR_RETURN(runtime::Runtime * vm, availableTier("vm"));
  ASSIGN_OR_RETURN(store::TemplateRecord tpl, store_->getTemplate(name));
  store::SandboxRecord rec;
  rec.id = "warm";
  runtime::SandboxSpec spec = specFor(rec, tpl, defaultLimits("vm"));
  auto t0 = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(nlohmann::json warmed, vm->warmTemplate(spec));
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
  if (ms > 1000) last_vm_warm_ms_ = ms;  // a warm-up, not artifacts that were there already
  warmed["template"] = name;
  warmed["elapsed_ms"] = ms;
  return warmed;
}

std::optional<std::string> Manager::vmWarmNotice(const store::TemplateRecord& tpl,
                                                 const runtime::Limits& limits) const {
  auto vm = availableTier("vm");
  if (!vm) return std::nullopt;
  auto typical = (*vm)->typicalWarmMs();
  if (!typical) return std::nullopt;  // the create waits for the KVM probe first; whether it warms is not known
  store::SandboxRecord probe;
  probe.id = "warm";
  if ((*vm)->templateReady(specFor(probe, tpl, limits))) return std::nullopt;
  // This node's own last warm-up when there was one; else the tier's typical figure.
  int64_t ms = last_vm_warm_ms_.load();
  int64_t seconds = ((ms > 0 ? ms : *typical) + 500) / 1000;
  return fmt::format("warming template {} for VMs, one time, ~{} s", tpl.name, std::max<int64_t>(seconds, 1));
}

Status Manager::removeTemplate(const std::string& name) {
  // Pooled sandboxes of the template go first: they are not users of it yet.
  for (auto& s : pool_.takeTemplate(name)) (void)destroyRecord(s.record);
  return templates_->remove(name);
}

}  // namespace space::core
