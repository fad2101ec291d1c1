// JSON views of sandboxes and the manager's Prometheus metrics.
#include <fmt/format.h>

#include "common/ids.h"
#include "core/manager_impl.h"
#include "core/ttl.h"

namespace space::core {

nlohmann::json SandboxView::toJson() const {
  const auto& r = record;
  nlohmann::json j = {
      {"id", r.id},
      {"template", r.template_name},
      {"template_id", r.template_id},
      {"state", std::string(store::toString(r.state))},
      {"isolation", r.runtime},
      {"labels", r.labels},
      {"created_at", isoTimeMs(r.created_ms)},
      {"expires_at", r.expires_ms ? nlohmann::json(isoTimeMs(r.expires_ms)) : nlohmann::json(nullptr)},
      {"capabilities", capabilities.toJson()},
  };
  if (r.spec.contains("limits")) {
    const auto& l = r.spec["limits"];
    j["limits"] = {{"cpus", l.value("cpu_millis", 0) / 1000.0},
                   {"memory_mib", l.value("memory_bytes", uint64_t{0}) >> 20},
                   {"pids", l.value("pids", 0)},
                   {"disk_mib", l.value("disk_bytes", uint64_t{0}) >> 20}};
  }
  if (r.spec.contains("ttl_s") && r.spec["ttl_s"].get<int64_t>() > 0) j["ttl_s"] = r.spec["ttl_s"];
  if (auto left = ttlLeftMs(r, nowUnixMs())) j["ttl_remaining_s"] = *left / 1000;
  if (!r.error.empty()) j["error"] = r.error;
  if (r.spec.contains("idle_pause_s")) j["idle_pause_s"] = r.spec["idle_pause_s"];
  if (r.state == SandboxState::kPaused) j["auto_paused"] = r.auto_paused;
  if (usage) {
    j["usage"] = {{"memory_bytes", usage->memory_bytes},
                  {"cpu_seconds", usage->cpu_usage_ns / 1e9},
                  {"pids", usage->pids},
                  {"disk_bytes", usage->disk_bytes}};
    if (usage->oom_kills) j["usage"]["oom_kills"] = *usage->oom_kills;
  }
  return j;
}

// Where the runtime cannot count OOM kills from the host (a VM: its guest kernel does the killing), the
// sandbox's agent reads its own kernel's count. The live connection only: inspect neither wakes nor
// reconnects a sandbox for it.
std::optional<uint64_t> Manager::agentOomKills(const std::string& id) {
  std::shared_ptr<agent::AgentClient> agent;
  {
    std::lock_guard lock(mu_);
    if (auto it = live_.find(id); it != live_.end()) agent = it->second.agent;
  }
  if (!agent || !agent->alive()) return std::nullopt;
  auto kills = agent->oomKills();
  if (!kills) return std::nullopt;
  return *kills;
}

SandboxView Manager::viewOf(const store::SandboxRecord& record, bool with_usage) {
  SandboxView v;
  v.record = record;
  v.capabilities = runtimeFor(record.runtime).capabilities();
  if (with_usage && record.state == SandboxState::kRunning) {
    auto u = runtimeFor(record.runtime).usage(runtime::PersistedInstance{record.id, record.runtime, record.persisted});
    if (u && !u->oom_kills) u->oom_kills = agentOomKills(record.id);
    if (u) v.usage = *u;
  }
  return v;
}

std::string Manager::metricsText() {
  std::string out;
  std::map<SandboxState, int> by_state;
  if (auto records = store_->listSandboxes({})) {
    for (auto& r : *records) by_state[r.state]++;
  }
  out += "# TYPE space_sandboxes gauge\n";
  for (SandboxState s : store::kSandboxStates)
    out += fmt::format("space_sandboxes{{state=\"{}\"}} {}\n", store::toString(s), by_state[s]);
  out += "# TYPE space_pool_ready gauge\n";
  for (auto& [name, ready] : pool_.readyCounts())
    out += fmt::format("space_pool_ready{{template=\"{}\"}} {}\n", name, ready);
  out += "# TYPE space_sandbox_creates_total counter\n";
  out += fmt::format("space_sandbox_creates_total{{source=\"pool\"}} {}\n", counters_.creates_pool.load());
  out += fmt::format("space_sandbox_creates_total{{source=\"fresh\"}} {}\n", counters_.creates_fresh.load());
  out += "# TYPE space_sandbox_create_failures_total counter\n";
  out += fmt::format("space_sandbox_create_failures_total {}\n", counters_.create_failures.load());
  out += "# TYPE space_sandbox_destroys_total counter\n";
  out += fmt::format("space_sandbox_destroys_total {}\n", counters_.destroys.load());
  out += "# TYPE space_sandbox_ttl_reaped_total counter\n";
  out += fmt::format("space_sandbox_ttl_reaped_total {}\n", counters_.reaped_ttl.load());
  out += "# TYPE space_sandbox_paused_reaped_total counter\n";
  out += fmt::format("space_sandbox_paused_reaped_total {}\n", counters_.reaped_paused.load());
  out += "# TYPE space_sandbox_failed_total counter\n";
  out += fmt::format("space_sandbox_failed_total {}\n", counters_.failed_sandboxes.load());
  return out;
}

}  // namespace space::core
