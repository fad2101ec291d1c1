// The pool: sandboxes started ahead of demand so that create is one database update and one hand-over.
// A pooled sandbox is handed out once and never returns to the pool. Pools are per template and tier:
// "<template>" for jails, "vm:<template>" for VMs.
//
// Locks: fill_mu_ is held around one pool start (the manager's start, which takes its slot and live-table
// locks); mu_ guards the queues only and is held for queue work and a runtime liveness probe (take), never
// across a start or a destroy, and never together with the manager's live-table lock.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/thread_annotations.h"
#include "core/context.h"
#include "core/manager.h"

namespace space::core {

// A sandbox started (pooled: only prepared) by the manager, with its row.
struct Started {
  store::SandboxRecord record;
  runtime::Instance instance;
};

class PoolService {
 public:
  // What the pool asks of the manager, which owns starting and deleting sandboxes.
  struct Hooks {
    // Whether a tier can start a sandbox of the template without warming it first (a VM pool waits).
    std::function<bool(const store::TemplateRecord&, const std::string& tier)> ready;
    // Starts one pooled sandbox of the template on the tier.
    std::function<Result<Started>(const store::TemplateRecord&, const std::string& tier)> start;
    // A started sandbox is live (before the pool offers it).
    std::function<void(const Started&)> started;
    // Deletes a sandbox the pool gives up (it died while waiting).
    std::function<void(const store::SandboxRecord&)> destroy;
  };

  PoolService(const Context& ctx, Hooks hooks) : ctx_(ctx), hooks_(std::move(hooks)) {}
  ~PoolService() { stop(); }

  static std::string key(const std::string& isolation, const std::string& template_name) {
    return isolation == "jail" ? template_name : isolation + ":" + template_name;
  }

  void startFilling();
  // Ends the filler: no start begins after this returns (releaseIfIdle holds the result across the release).
  std::unique_lock<std::mutex> stop();
  // A drain: the filler stops for good once a start in flight has landed; returns every pooled sandbox.
  std::vector<Started> drain();
  // Whether a create is served from the pool: a pooled template, and the default limits.
  bool serves(const CreateSandbox& cmd, const std::string& template_name) const;
  // A live pooled sandbox for the key, or none (dead ones on the way are deleted).
  std::optional<Started> take(const std::string& key);
  // A pooled sandbox an earlier spaced left (reconciliation).
  void adopt(Started s);
  // The pooled sandboxes of a template being removed.
  std::vector<Started> takeTemplate(const std::string& template_name);
  // A template was built: the filler may have been waiting for it.
  void wake() { cv_.notify_all(); }
  // Ready sandboxes per pool key (metrics).
  std::map<std::string, size_t> readyCounts();

 private:
  void fillLoop();
  std::vector<std::string> pooledTemplateNames() const;
  std::vector<std::string> keys() const;

  const Context& ctx_;
  Hooks hooks_;
  std::mutex fill_mu_ SPACE_ACQUIRED_BEFORE(mu_);
  std::mutex mu_;
  std::condition_variable cv_;  // waits on mu_
  std::map<std::string, std::deque<Started>> pool_ SPACE_GUARDED_BY(mu_);
  std::atomic<bool> stopping_{false};
  std::atomic<bool> draining_{false};
  std::atomic<int64_t> last_take_ms_{0};  // when a create last took a pooled sandbox
  std::thread thread_;
};

}  // namespace space::core
