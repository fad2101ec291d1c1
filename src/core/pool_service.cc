// The pool of pre-started sandboxes (core/pool_service.h).
#include "core/pool_service.h"

#include <spdlog/spdlog.h>

#include <sstream>

#include "common/ids.h"

namespace space::core {
namespace {

constexpr int64_t kRefillQuietMs = 100;

}  // namespace

std::vector<std::string> PoolService::pooledTemplateNames() const {
  const DaemonConfig& config = ctx_.config;
  std::vector<std::string> names;
  if (config.pool_size <= 0 && (!ctx_.runtimes.find("vm") || config.vm_pool_size <= 0)) return names;
  if (config.pool_templates.empty()) {
    names.push_back(config.default_template);
    return names;
  }
  std::stringstream ss(config.pool_templates);
  std::string name;
  while (std::getline(ss, name, ','))
    if (!name.empty()) names.push_back(name);
  return names;
}

std::vector<std::string> PoolService::keys() const {
  std::vector<std::string> keys;
  for (const auto& name : pooledTemplateNames()) {
    if (ctx_.config.pool_size > 0) keys.push_back(key("jail", name));
    if (ctx_.runtimes.find("vm") && ctx_.config.vm_pool_size > 0) keys.push_back(key("vm", name));
  }
  return keys;
}

bool PoolService::serves(const CreateSandbox& cmd, const std::string& template_name) const {
  // Pooled sandboxes run with the default limits; a request for other limits starts fresh.
  if (cmd.cpu_millis || cmd.memory_bytes || cmd.pids || cmd.disk_bytes) return false;
  for (auto& n : pooledTemplateNames())
    if (n == template_name) return true;
  return false;
}

std::optional<Started> PoolService::take(const std::string& key) {
  last_take_ms_ = nowUnixMs();
  std::unique_lock lock(mu_);
  auto it = pool_.find(key);
  while (it != pool_.end() && !it->second.empty()) {
    Started s = std::move(it->second.front());
    it->second.pop_front();
    cv_.notify_all();
    if (ctx_.runtimeFor(s.record.runtime).alive(s.instance)) return s;
    // Died while waiting: clean it outside the lock and try the next one.
    lock.unlock();
    hooks_.destroy(s.record);
    lock.lock();
    it = pool_.find(key);
  }
  cv_.notify_all();
  return std::nullopt;
}

void PoolService::adopt(Started s) {
  std::lock_guard lock(mu_);
  pool_[key(s.record.runtime, s.record.template_name)].push_back(std::move(s));
}

std::vector<Started> PoolService::takeTemplate(const std::string& template_name) {
  std::vector<Started> out;
  std::lock_guard lock(mu_);
  for (const auto& k : {key("jail", template_name), key("vm", template_name)}) {
    auto it = pool_.find(k);
    if (it == pool_.end()) continue;
    for (auto& s : it->second) out.push_back(std::move(s));
    it->second.clear();
  }
  return out;
}

std::map<std::string, size_t> PoolService::readyCounts() {
  std::map<std::string, size_t> out;
  std::lock_guard lock(mu_);
  for (auto& [k, q] : pool_) out[k] = q.size();
  return out;
}

void PoolService::startFilling() {
  thread_ = std::thread([this] { fillLoop(); });
}

std::unique_lock<std::mutex> PoolService::stop() {
  stopping_ = true;
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  return std::unique_lock(fill_mu_);
}

std::vector<Started> PoolService::drain() {
  draining_ = true;
  cv_.notify_all();
  // A start in flight finishes (and lands in the pool) before the pool is emptied.
  { std::lock_guard fill(fill_mu_); }
  std::vector<Started> pooled;
  std::lock_guard lock(mu_);
  for (auto& [k, queue] : pool_)
    for (auto& s : queue) pooled.push_back(std::move(s));
  pool_.clear();
  return pooled;
}

void PoolService::fillLoop() {
  while (!stopping_ && !draining_) {
    bool started_one = false;
    for (const std::string& k : keys()) {
      if (stopping_) return;
      bool vm = k.rfind("vm:", 0) == 0;
      std::string name = vm ? k.substr(3) : k;
      size_t want = static_cast<size_t>(vm ? ctx_.config.vm_pool_size : ctx_.config.pool_size);
      size_t have;
      {
        std::lock_guard lock(mu_);
        have = pool_[k].size();
      }
      if (have >= want) continue;
      // Refill in a quiet moment: starting a sandbox (mkfs, clone, mounts) right after a create would
      // compete for the CPU with the first command of the sandbox just handed out.
      while (!stopping_ && have > 0 && nowUnixMs() - last_take_ms_ < kRefillQuietMs)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      std::lock_guard fill(fill_mu_);
      if (stopping_ || draining_) return;
      auto tpl = ctx_.store.getTemplate(name);
      if (!tpl) continue;  // not built yet; a build wakes us
      std::string tier = vm ? "vm" : "jail";
      // Warming a template boots a VM (seconds under emulation): the pool waits until a vm create or
      // `space template warm` has made it, and never does it behind the operator's back.
      if (!hooks_.ready(*tpl, tier)) continue;
      auto started = hooks_.start(*tpl, tier);
      if (!started) {
        spdlog::warn("pool: start sandbox for {}: {}", k, started.error().message);
        continue;
      }
      hooks_.started(*started);
      {
        std::lock_guard lock(mu_);
        pool_[k].push_back(std::move(*started));
      }
      started_one = true;
    }
    if (started_one) continue;
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, std::chrono::seconds(2));
  }
}

}  // namespace space::core
