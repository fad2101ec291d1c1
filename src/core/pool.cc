// The pool: sandboxes started ahead of demand so that create is one database update and one hand-over.
// A pooled sandbox is handed out once and never returns to the pool.
#include <sstream>

#include <spdlog/spdlog.h>

#include "common/ids.h"
#include "core/manager_impl.h"

namespace space::core {
namespace {

constexpr int64_t kRefillQuietMs = 100;

}  // namespace

std::vector<std::string> Manager::pooledTemplateNames() const {
  std::vector<std::string> names;
  if (config_.pool_size <= 0 && (!runtimes_.find("vm") || config_.vm_pool_size <= 0)) return names;
  if (config_.pool_templates.empty()) {
    names.push_back(config_.default_template);
    return names;
  }
  std::stringstream ss(config_.pool_templates);
  std::string name;
  while (std::getline(ss, name, ','))
    if (!name.empty()) names.push_back(name);
  return names;
}

std::vector<std::string> Manager::poolKeys() const {
  std::vector<std::string> keys;
  for (const auto& name : pooledTemplateNames()) {
    if (config_.pool_size > 0) keys.push_back(poolKey("jail", name));
    if (runtimes_.find("vm") && config_.vm_pool_size > 0) keys.push_back(poolKey("vm", name));
  }
  return keys;
}

bool Manager::poolServes(const CreateSandbox& cmd, const std::string& template_name) const {
  // Pooled sandboxes run with the default limits; a request for other limits starts fresh.
  if (cmd.cpu_millis || cmd.memory_bytes || cmd.pids || cmd.disk_bytes) return false;
  for (auto& n : pooledTemplateNames())
    if (n == template_name) return true;
  return false;
}

std::optional<Manager::Started> Manager::takePooled(const std::string& key) {
  last_take_ms_ = nowUnixMs();
  std::unique_lock lock(mu_);
  auto it = pool_.find(key);
  while (it != pool_.end() && !it->second.empty()) {
    Started s = std::move(it->second.front());
    it->second.pop_front();
    pool_cv_.notify_all();
    if (runtimeFor(s.record.runtime).alive(s.instance)) return s;
    // Died while waiting: clean it outside the lock and try the next one.
    lock.unlock();
    (void)destroyRecord(s.record);
    lock.lock();
    it = pool_.find(key);
  }
  pool_cv_.notify_all();
  return std::nullopt;
}

void Manager::fillPoolLoop() {
  while (!stopping_ && !draining_) {
    bool started_one = false;
    for (const std::string& key : poolKeys()) {
      if (stopping_) return;
      bool vm = key.rfind("vm:", 0) == 0;
      std::string name = vm ? key.substr(3) : key;
      size_t want = static_cast<size_t>(vm ? config_.vm_pool_size : config_.pool_size);
      size_t have;
      {
        std::lock_guard lock(mu_);
        have = pool_[key].size();
      }
      if (have >= want) continue;
      // Refill in a quiet moment: starting a sandbox (mkfs, clone, mounts) right after a create would
      // compete for the CPU with the first command of the sandbox just handed out.
      while (!stopping_ && have > 0 && nowUnixMs() - last_take_ms_ < kRefillQuietMs)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      std::lock_guard fill(pool_fill_mu_);
      if (stopping_ || draining_) return;
      auto tpl = store_->getTemplate(name);
      if (!tpl) continue;  // not built yet; buildTemplate wakes us
      std::string tier = vm ? "vm" : "jail";
      // Warming a template boots a VM (seconds under emulation): the pool waits until a vm create or
      // `space template warm` has made it, and never does it behind the operator's back.
      store::SandboxRecord probe;
      if (!runtimeFor(tier).templateReady(specFor(probe, *tpl, defaultLimits(tier)))) continue;
      auto started = startSandbox(*tpl, defaultLimits(tier), {}, /*pooled=*/true, tier);
      if (!started) {
        spdlog::warn("pool: start sandbox for {}: {}", key, started.error().message);
        continue;
      }
      std::lock_guard lock(mu_);
      live_[started->record.id] = started->instance;
      pool_[key].push_back(std::move(*started));
      started_one = true;
    }
    if (started_one) continue;
    std::unique_lock lock(mu_);
    pool_cv_.wait_for(lock, std::chrono::seconds(2));
  }
}

}  // namespace space::core
