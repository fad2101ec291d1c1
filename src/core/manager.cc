#include "core/manager_impl.h"

#include <unistd.h>

#include <spdlog/spdlog.h>

#include "common/ids.h"

namespace space::core {
namespace {

constexpr uint64_t kMiB = 1ull << 20;

}  // namespace

Manager::Manager(DaemonConfig config, std::unique_ptr<store::Store> store, std::unique_ptr<runtime::Runtime> jail,
                 std::unique_ptr<store::TemplateBuilder> templates)
    : config_(std::move(config)), store_(std::move(store)), jail_(std::move(jail)), templates_(std::move(templates)) {}

Manager::~Manager() {
  stopping_ = true;
  pool_cv_.notify_all();
  if (pool_thread_.joinable()) pool_thread_.join();
  if (reaper_thread_.joinable()) reaper_thread_.join();
  // Live sandboxes keep running: the next spaced reattaches to them.
}

runtime::Runtime& Manager::runtimeFor(const std::string& name) { return *jail_; }

Result<runtime::Limits> Manager::resolveLimits(const CreateSandbox& cmd) const {
  runtime::Limits limits = config_.default_limits;
  long pages = sysconf(_SC_PHYS_PAGES);
  uint64_t host_memory = pages > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(sysconf(_SC_PAGESIZE)) : 0;
  if (cmd.cpu_millis) {
    if (*cmd.cpu_millis < 10 || *cmd.cpu_millis > 64000)
      return makeError(ErrorKind::kInvalidArgument, "cpus must be between 0.01 and 64");
    limits.cpu_millis = *cmd.cpu_millis;
  }
  if (cmd.memory_bytes) {
    if (*cmd.memory_bytes < 16 * kMiB)
      return makeError(ErrorKind::kInvalidArgument, "memory must be at least 16 MiB");
    if (host_memory && *cmd.memory_bytes > host_memory)
      return makeError(ErrorKind::kInvalidArgument, "memory of {} MiB exceeds this host's {} MiB",
                       *cmd.memory_bytes / kMiB, host_memory / kMiB);
    limits.memory_bytes = *cmd.memory_bytes;
  }
  if (cmd.pids) {
    if (*cmd.pids < 8 || *cmd.pids > 1u << 22)
      return makeError(ErrorKind::kInvalidArgument, "pids must be between 8 and 4194304");
    limits.pids = *cmd.pids;
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

Result<Manager::Started> Manager::startSandbox(const store::TemplateRecord& tpl, const runtime::Limits& limits,
                                               const std::map<std::string, std::string>& env, bool pooled) {
  store::SandboxRecord rec;
  rec.id = newSandboxId();
  rec.template_name = tpl.name;
  rec.template_id = tpl.id;
  rec.state = "starting";
  rec.runtime = "jail";
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
    if (static_cast<uint64_t>(slot) >= (0xFFFFFFFFull - kUidBase) / kUidRange)
      return makeError(ErrorKind::kResourceExhausted, "no free uid range for another sandbox");
    rec.uid_slot = slot;
    TRY(store_->insertSandbox(rec));
  }

  runtime::SandboxSpec spec;
  spec.id = rec.id;
  spec.template_rootfs = tpl.rootfs;
  spec.dir = dir;
  spec.hostname = rec.id;
  spec.uid_base = kUidBase + static_cast<uint32_t>(rec.uid_slot) * kUidRange;
  spec.uid_count = kUidRange;
  spec.limits = limits;
  spec.env = env;

  auto inst = jail_->start(spec);
  if (!inst) {
    Error err = inst.error();
    (void)jail_->destroy(runtime::PersistedInstance{rec.id, rec.runtime, rec.persisted});
    (void)store_->deleteSandbox(rec.id);
    return tl::unexpected(err.context("start sandbox " + rec.id));
  }
  rec.persisted = inst->persisted.state;
  rec.state = "running";
  if (auto st = store_->updateSandbox(rec); !st) {
    (void)jail_->destroy(inst->persisted);
    (void)store_->deleteSandbox(rec.id);
    return tl::unexpected(st.error());
  }
  return Started{std::move(rec), std::move(*inst)};
}

Result<SandboxView> Manager::create(const CreateSandbox& cmd) {
  std::string template_name = cmd.template_name.empty() ? config_.default_template : cmd.template_name;
  if (cmd.isolation != "auto" && cmd.isolation != "jail" && cmd.isolation != "vm")
    return makeError(ErrorKind::kInvalidArgument, "isolation must be jail, vm or auto, not '{}'", cmd.isolation);
  if (cmd.isolation == "vm")
    return makeError(ErrorKind::kUnsupported, "the vm isolation tier is not available on this node yet; use --isolation jail");
  if (cmd.ttl_s < 0 || cmd.ttl_s > config_.max_ttl_s)
    return makeError(ErrorKind::kInvalidArgument, "ttl must be between 0 and {} seconds", config_.max_ttl_s);
  ASSIGN_OR_RETURN(runtime::Limits limits, resolveLimits(cmd));
  auto tpl = store_->getTemplate(template_name);
  if (!tpl) {
    if (tpl.error().kind == ErrorKind::kNotFound)
      return makeError(ErrorKind::kNotFound, "template '{}' not found; build it with `space template build {} …` "
                       "or list templates with `space template ls`", template_name, template_name);
    return tl::unexpected(tpl.error());
  }
  {
    auto count = store_->listSandboxes({});
    if (count && static_cast<int>(count->size()) >= config_.max_sandboxes)
      return makeError(ErrorKind::kResourceExhausted, "this node already runs its maximum of {} sandboxes",
                       config_.max_sandboxes);
  }

  std::optional<Started> started;
  if (poolServes(cmd, template_name)) started = takePooled(template_name);
  if (started) {
    counters_.creates_pool++;
    if (!cmd.env.empty()) {
      agent::Identity identity;
      identity.env = cmd.env;
      if (auto st = started->instance.agent->setIdentity(identity); !st) {
        (void)destroyRecord(started->record);
        return tl::unexpected(st.error());
      }
    }
  } else {
    auto fresh = startSandbox(*tpl, limits, cmd.env, /*pooled=*/false);
    if (!fresh) {
      counters_.create_failures++;
      return tl::unexpected(fresh.error());
    }
    counters_.creates_fresh++;
    started = std::move(*fresh);
  }

  store::SandboxRecord& rec = started->record;
  rec.pooled = false;
  rec.labels = cmd.labels;
  rec.created_ms = nowUnixMs();
  int64_t ttl = cmd.ttl_s ? cmd.ttl_s : config_.default_ttl_s;
  rec.expires_ms = ttl ? rec.created_ms + ttl * 1000 : 0;
  rec.spec["env_keys"] = nlohmann::json::array();
  for (auto& [k, v] : cmd.env) rec.spec["env_keys"].push_back(k);
  rec.spec["ttl_s"] = ttl;
  if (auto st = store_->updateSandbox(rec); !st) {
    (void)destroyRecord(rec);
    return tl::unexpected(st.error());
  }
  {
    std::lock_guard lock(mu_);
    live_[rec.id] = started->instance;
  }
  return viewOf(rec, false);
}

Result<SandboxView> Manager::get(const std::string& id) {
  ASSIGN_OR_RETURN(store::SandboxRecord rec, store_->getSandbox(id));
  if (rec.pooled) return makeError(ErrorKind::kNotFound, "sandbox {} not found", id);
  return viewOf(rec, true);
}

Result<std::vector<SandboxView>> Manager::list(const ListSandboxes& cmd) {
  store::SandboxFilter filter;
  filter.labels = cmd.labels;
  filter.state = cmd.state;
  ASSIGN_OR_RETURN(auto records, store_->listSandboxes(filter));
  std::vector<SandboxView> out;
  for (auto& r : records) out.push_back(viewOf(r, false));
  return out;
}

Status Manager::destroyRecord(store::SandboxRecord rec) {
  rec.state = "deleting";
  TRY(store_->updateSandbox(rec));
  {
    std::lock_guard lock(mu_);
    live_.erase(rec.id);
  }
  TRY(runtimeFor(rec.runtime).destroy(runtime::PersistedInstance{rec.id, rec.runtime, rec.persisted}));
  TRY(store_->deleteSandbox(rec.id));
  counters_.destroys++;
  return ok();
}

Status Manager::destroy(const std::string& id) {
  ASSIGN_OR_RETURN(store::SandboxRecord rec, store_->getSandbox(id));
  if (rec.pooled) return makeError(ErrorKind::kNotFound, "sandbox {} not found", id);
  if (auto st = destroyRecord(rec); !st) {
    Error err = st.error();
    return tl::unexpected(err.context("delete sandbox " + id));
  }
  return ok();
}

Status Manager::pause(const std::string& id) {
  ASSIGN_OR_RETURN(store::SandboxRecord rec, store_->getSandbox(id));
  return makeError(ErrorKind::kUnsupported, "pause is not supported by the {} runtime yet", rec.runtime);
}

Status Manager::resume(const std::string& id) {
  ASSIGN_OR_RETURN(store::SandboxRecord rec, store_->getSandbox(id));
  return makeError(ErrorKind::kUnsupported, "resume is not supported by the {} runtime yet", rec.runtime);
}

Result<std::shared_ptr<agent::AgentClient>> Manager::agent(const std::string& id) {
  {
    std::lock_guard lock(mu_);
    auto it = live_.find(id);
    if (it != live_.end() && it->second.agent && it->second.agent->alive()) {
      // A pooled sandbox is not addressable until it is handed out.
      auto rec = store_->getSandbox(id);
      if (rec && !rec->pooled) return it->second.agent;
    }
  }
  ASSIGN_OR_RETURN(store::SandboxRecord rec, store_->getSandbox(id));
  if (rec.pooled) return makeError(ErrorKind::kNotFound, "sandbox {} not found", id);
  if (rec.state != "running")
    return makeError(ErrorKind::kConflict, "sandbox {} is {}, not running", id, rec.state);
  // The connection broke (agent restarted, transient error): reconnect once.
  auto inst = runtimeFor(rec.runtime).reattach(runtime::PersistedInstance{rec.id, rec.runtime, rec.persisted});
  if (!inst) return makeError(ErrorKind::kUnavailable, "sandbox {} does not answer: {}", id, inst.error().message);
  std::lock_guard lock(mu_);
  live_[id] = *inst;
  return inst->agent;
}

Result<store::TemplateRecord> Manager::buildTemplate(const BuildTemplate& cmd, const ProgressFn& progress) {
  store::TemplateBuildSpec spec{cmd.name, cmd.kind, cmd.suite, cmd.variant, cmd.packages, cmd.mirror, cmd.path};
  ASSIGN_OR_RETURN(store::TemplateRecord rec, templates_->build(spec, progress));
  pool_cv_.notify_all();  // the pool may have been waiting for this template
  return rec;
}

Result<std::vector<store::TemplateRecord>> Manager::listTemplates() { return store_->listTemplates(); }

Status Manager::removeTemplate(const std::string& name) {
  // Pooled sandboxes of the template go first: they are not users of it yet.
  std::deque<Started> drained;
  {
    std::lock_guard lock(mu_);
    auto it = pool_.find(name);
    if (it != pool_.end()) drained.swap(it->second);
  }
  for (auto& s : drained) (void)destroyRecord(s.record);
  return templates_->remove(name);
}

}  // namespace space::core
