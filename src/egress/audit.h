// One JSON line per decision (connection, request, DNS answer, control change), written to a file or a
// stream, plus counters per verdict and reason for metrics. Secret names appear; values never do.
//
// What a sandbox can make the gateway write is bounded (SECURITY.md E19):
// - identical decisions (same sandbox, kind, verdict, rule, reason, name, ...) within one interval are
//   written once; the rest are counted and end the interval as one line with "repeated" and
//   "interval_s". Denials, errors and every DNS decision are aggregated so; allowed connections and
//   requests are written one by one.
// - each sandbox has a budget of lines per second; lines over it are counted, not written, and the
//   interval ends with one line {"kind": "audit", "verdict": "dropped", "repeated": N} for that sandbox.
//   The gateway's tallies of refusals for a rate (writeTally) are bounded by construction and exempt.
// - the file is capped and rotated (audit_file.h).
// Control lines (spaced's changes) are never aggregated, budgeted or dropped for budget.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/result.h"
#include "egress/audit_file.h"
#include "egress/limits.h"

namespace space::egress {

struct AuditRecord {
  std::string kind;     // "connect", "request", "dns", "control"
  std::string sandbox;  // id, or "" when the source was not a known sandbox
  std::string source;   // the sandbox-side address
  std::string verdict;  // "allow", "deny", "intercept", "error"
  std::string rule;
  std::string reason;
  std::string mode;  // "transparent", "connect", "http-proxy"
  std::string name;  // normalised name decided on (CONNECT host, Host, DNS question)
  std::string sni;
  std::vector<std::string> resolved;  // addresses the name resolved to (after pinning)
  std::string used;                   // address:port the gateway connected to
  std::string method;                 // intercepted or plain HTTP requests
  std::string path;                   // without the query
  uint64_t bytes_up = 0;
  uint64_t bytes_down = 0;
  double duration_ms = -1;
  std::vector<std::string> secrets;  // names of injected secrets
};

nlohmann::json auditToJson(const AuditRecord& r);

struct AuditOptions {
  uint64_t max_bytes = uint64_t(64) << 20;   // the log and its rotated predecessor together; 0: no cap
  Rate lines_per_sandbox{50, 500};           // lines per second, per sandbox (unknown sources share one)
  std::chrono::milliseconds interval{1000};  // the aggregation interval
};

// What the audit wrote and what it held back, since the gateway started.
struct AuditStats {
  uint64_t lines = 0;  // written, summary lines included
  uint64_t bytes = 0;
  uint64_t aggregated = 0;      // records counted into a "repeated" line instead of written
  uint64_t summaries = 0;       // "repeated" lines written
  uint64_t dropped = 0;         // records over a sandbox's line budget, counted in a "dropped" line
  uint64_t write_failures = 0;  // lines that could not be written (disk full, rotation failed)
  uint64_t rotations = 0;
  uint64_t file_bytes = 0;  // in the current file
};

struct SandboxAuditCounters {
  std::map<std::string, uint64_t> denials;  // "deny: <rule>"
  uint64_t aggregated = 0;
  uint64_t dropped = 0;
};

class Audit {
 public:
  using Clock = LimitClock;
  // path "-" writes to stdout; "" discards lines but keeps the counters.
  static Result<std::unique_ptr<Audit>> open(const std::string& path, AuditOptions options = {});
  ~Audit();

  void write(const AuditRecord& r);
  // count identical decisions at once: the gateway's tally of rate-limit drops since its last tick. A
  // tally is at most one record per sandbox and kind per tick, so it is aggregated but never held back by
  // the line budget: under a flood, what was refused for its rate is always in the log.
  void writeTally(const AuditRecord& r, uint64_t count);
  // Ends the aggregation interval if it is over (or now, with force): writes its "repeated" and
  // "dropped" lines. The gateway calls it on a timer; write() calls it too.
  void tick(bool force = false);
  // A removed sandbox: its pending lines are written now and its counters are forgotten.
  void forgetSandbox(const std::string& id);

  std::map<std::string, uint64_t> countersByVerdict() const;
  std::map<std::string, uint64_t> countersByReason() const;  // "deny: <rule>"
  AuditStats stats() const;
  // Sandboxes seen lately (counters of a sandbox idle for kForgetIdle are forgotten).
  std::map<std::string, SandboxAuditCounters> sandboxCounters() const;
  const AuditOptions& options() const { return opts_; }
  std::vector<std::string> lastLinesForTest() const;
  void setClockForTest(std::function<Clock::time_point()> now) {
    std::lock_guard lock(mu_);
    now_ = std::move(now);
    interval_start_ = now_();
  }

  static constexpr size_t kMaxPending = 4096;  // distinct decisions tracked per interval
  static constexpr std::chrono::minutes kForgetIdle{10};

 private:
  struct Pending {
    nlohmann::json line;  // the decision's line without time and measurements
    uint64_t repeated = 0;
  };
  struct PerSandbox {
    explicit PerSandbox(TokenBucket b) : budget(b) {}
    TokenBucket budget;
    uint64_t dropped_now = 0;  // in the current interval
    Clock::time_point last_seen;
    SandboxAuditCounters counters;
  };

  Audit(std::unique_ptr<AuditFile> file, AuditOptions options);
  PerSandbox& sandboxLocked(const std::string& id, Clock::time_point now);
  void writeLocked(const AuditRecord& r, uint64_t count, bool budgeted);
  void emitLocked(const nlohmann::json& j);
  void endIntervalLocked(Clock::time_point now);

  std::unique_ptr<AuditFile> file_;
  AuditOptions opts_;
  std::function<Clock::time_point()> now_ = [] { return Clock::now(); };
  mutable std::mutex mu_;
  Clock::time_point interval_start_;
  std::unordered_map<std::string, Pending> pending_;
  std::unordered_map<std::string, PerSandbox> sandboxes_;
  std::map<std::string, uint64_t> by_verdict_;
  std::map<std::string, uint64_t> by_rule_;
  AuditStats stats_;
  bool failing_ = false;  // the last write failed: said once on stderr until one succeeds
  std::vector<std::string> recent_;
};

}  // namespace space::egress
