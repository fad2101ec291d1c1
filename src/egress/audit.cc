#include "egress/audit.h"

#include <chrono>
#include <cstdio>

namespace space::egress {

namespace {

std::string nowIso() {
  auto now = std::chrono::system_clock::now();
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count();
  time_t secs = time_t(ms / 1000);
  tm t{};
  gmtime_r(&secs, &t);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", t.tm_year + 1900, t.tm_mon + 1, t.tm_mday, t.tm_hour,
                     t.tm_min, t.tm_sec, int(ms % 1000));
}

// Decisions worth one line each are the ones that let traffic through; a repeated refusal, error or DNS
// answer says nothing new after its first line in an interval.
bool aggregated(const AuditRecord& r) { return r.kind == "dns" || (r.verdict != "allow" && r.verdict != "intercept"); }

// What makes two records the same decision: everything but the time and the measurements.
std::string decisionKey(const AuditRecord& r) {
  std::string k;
  for (const std::string* f : {&r.kind, &r.sandbox, &r.source, &r.verdict, &r.rule, &r.reason, &r.mode, &r.name, &r.sni,
                               &r.used, &r.method, &r.path}) {
    k += *f;
    k += '\x1f';
  }
  for (const auto& a : r.resolved) (k += a) += ',';
  k += '\x1f';
  for (const auto& s : r.secrets) (k += s) += ',';
  return k;
}

}  // namespace

nlohmann::json auditToJson(const AuditRecord& r) {
  nlohmann::json j{{"time", nowIso()},     {"kind", r.kind}, {"sandbox", r.sandbox},
                   {"verdict", r.verdict}, {"rule", r.rule}, {"reason", r.reason}};
  auto opt = [&](const char* k, const std::string& v) {
    if (!v.empty()) j[k] = v;
  };
  opt("source", r.source);
  opt("mode", r.mode);
  opt("name", r.name);
  opt("sni", r.sni);
  if (!r.resolved.empty()) j["resolved"] = r.resolved;
  opt("used", r.used);
  opt("method", r.method);
  opt("path", r.path);
  if (r.bytes_up || r.bytes_down) {
    j["bytes_up"] = r.bytes_up;
    j["bytes_down"] = r.bytes_down;
  }
  if (r.duration_ms >= 0) j["duration_ms"] = r.duration_ms;
  if (!r.secrets.empty()) j["secrets"] = r.secrets;
  return j;
}

Result<std::unique_ptr<Audit>> Audit::open(const std::string& path, AuditOptions options) {
  ASSIGN_OR_RETURN(auto file, AuditFile::open(path, options.max_bytes));
  return std::unique_ptr<Audit>(new Audit(std::move(file), options));
}

Audit::Audit(std::unique_ptr<AuditFile> file, AuditOptions options)
    : file_(std::move(file)), opts_(options), interval_start_(Clock::now()) {}

Audit::~Audit() = default;

Audit::PerSandbox& Audit::sandboxLocked(const std::string& id, Clock::time_point now) {
  auto it = sandboxes_.find(id);
  if (it == sandboxes_.end()) it = sandboxes_.emplace(id, PerSandbox(TokenBucket(opts_.lines_per_sandbox, now))).first;
  it->second.last_seen = now;
  return it->second;
}

void Audit::emitLocked(const nlohmann::json& j) {
  // The JSON library escapes every byte a sandbox could put in a name or path; a line stays one line.
  std::string line = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  line += '\n';
  if (auto st = file_->append(line); !st) {
    ++stats_.write_failures;
    if (!failing_) fprintf(stderr, "space-egress: audit lines are being lost: %s\n", st.error().message.c_str());
    failing_ = true;
  } else {
    failing_ = false;
    ++stats_.lines;
    stats_.bytes += line.size();
  }
  line.pop_back();
  recent_.push_back(std::move(line));
  if (recent_.size() > 256) recent_.erase(recent_.begin());
}

void Audit::endIntervalLocked(Clock::time_point now) {
  double interval_s = std::chrono::duration<double>(now - interval_start_).count();
  interval_s = double(int64_t(interval_s * 1000)) / 1000;
  for (auto& [key, p] : pending_) {
    if (!p.repeated) continue;
    nlohmann::json j = std::move(p.line);
    j["time"] = nowIso();
    j["repeated"] = p.repeated;
    j["interval_s"] = interval_s;
    emitLocked(j);
    ++stats_.summaries;
  }
  pending_.clear();
  for (auto it = sandboxes_.begin(); it != sandboxes_.end();) {
    PerSandbox& s = it->second;
    if (s.dropped_now) {
      emitLocked({{"time", nowIso()},
                  {"kind", "audit"},
                  {"sandbox", it->first},
                  {"verdict", "dropped"},
                  {"rule", "audit-rate-limit"},
                  {"reason", fmt::format("over {} lines/s: counted, not written", opts_.lines_per_sandbox.per_second)},
                  {"repeated", s.dropped_now},
                  {"interval_s", interval_s}});
      s.dropped_now = 0;
    }
    if (now - s.last_seen > kForgetIdle && s.budget.full(opts_.lines_per_sandbox, now))
      it = sandboxes_.erase(it);
    else
      ++it;
  }
  interval_start_ = now;
}

void Audit::tick(bool force) {
  std::lock_guard lock(mu_);
  auto now = now_();
  if (force || now - interval_start_ >= opts_.interval) endIntervalLocked(now);
}

void Audit::forgetSandbox(const std::string& id) {
  std::lock_guard lock(mu_);
  endIntervalLocked(now_());
  sandboxes_.erase(id);
}

void Audit::write(const AuditRecord& r) {
  std::lock_guard lock(mu_);
  writeLocked(r, 1, true);
}

void Audit::writeTally(const AuditRecord& r, uint64_t count) {
  if (count == 0) return;
  std::lock_guard lock(mu_);
  writeLocked(r, count, false);
}

void Audit::writeLocked(const AuditRecord& r, uint64_t count, bool budgeted) {
  auto now = now_();
  if (now - interval_start_ >= opts_.interval) endIntervalLocked(now);
  if (r.kind == "control") {  // spaced's changes: rare, and each one matters
    emitLocked(auditToJson(r));
    return;
  }
  PerSandbox& sb = sandboxLocked(r.sandbox, now);
  by_verdict_[r.verdict] += count;  // counters are about sandbox traffic, every record of it
  if (r.verdict != "allow") {
    std::string rule = r.verdict + ": " + r.rule;
    sb.counters.denials[rule] += count;
    by_rule_[std::move(rule)] += count;
  }
  std::string key;
  if (aggregated(r)) {
    key = decisionKey(r);
    if (auto it = pending_.find(key); it != pending_.end()) {
      it->second.repeated += count;
      sb.counters.aggregated += count;
      stats_.aggregated += count;
      return;
    }
  }
  if (budgeted && !sb.budget.take(opts_.lines_per_sandbox, now)) {
    sb.dropped_now += count;
    sb.counters.dropped += count;
    stats_.dropped += count;
    return;
  }
  nlohmann::json j = auditToJson(r);
  emitLocked(j);
  // Only a decision whose first line went out is tracked: every "repeated" line follows a line written in
  // full in the same interval, so summaries never outnumber the budget.
  if (!key.empty() && pending_.size() < kMaxPending) {
    for (const char* f : {"time", "duration_ms", "bytes_up", "bytes_down"}) j.erase(f);
    pending_.emplace(std::move(key), Pending{std::move(j), count - 1});
    sb.counters.aggregated += count - 1;
    stats_.aggregated += count - 1;
  } else if (count > 1) {  // no room to aggregate: the rest are counted as not written
    sb.dropped_now += count - 1;
    sb.counters.dropped += count - 1;
    stats_.dropped += count - 1;
  }
}

std::map<std::string, uint64_t> Audit::countersByVerdict() const {
  std::lock_guard lock(mu_);
  return by_verdict_;
}

std::map<std::string, uint64_t> Audit::countersByReason() const {
  std::lock_guard lock(mu_);
  return by_rule_;
}

AuditStats Audit::stats() const {
  std::lock_guard lock(mu_);
  AuditStats s = stats_;
  s.rotations = file_->rotations();
  s.file_bytes = file_->currentBytes();
  return s;
}

std::map<std::string, SandboxAuditCounters> Audit::sandboxCounters() const {
  std::lock_guard lock(mu_);
  std::map<std::string, SandboxAuditCounters> out;
  for (const auto& [id, s] : sandboxes_) out[id] = s.counters;
  return out;
}

std::vector<std::string> Audit::lastLinesForTest() const {
  std::lock_guard lock(mu_);
  return recent_;
}

}  // namespace space::egress
