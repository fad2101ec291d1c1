#include "egress/audit.h"

#include <chrono>
#include <nlohmann/json.hpp>

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

Result<std::unique_ptr<Audit>> Audit::open(const std::string& path) {
  std::unique_ptr<Audit> a(new Audit);
  if (path == "-") {
    a->out_ = stdout;
  } else if (!path.empty()) {
    a->out_ = fopen(path.c_str(), "ae");
    if (!a->out_) return sysError(errno, "open audit log {}", path);
    a->owned_ = true;
  }
  return a;
}

Audit::~Audit() {
  if (owned_ && out_) fclose(out_);
}

void Audit::write(const AuditRecord& r) {
  // The JSON library escapes every byte a sandbox could put in a name or path; a line stays one line.
  std::string line = auditToJson(r).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  std::lock_guard lock(mu_);
  if (r.kind != "control") {  // counters are about sandbox traffic
    ++by_verdict_[r.verdict];
    if (r.verdict != "allow") ++by_rule_[r.verdict + ": " + r.rule];
  }
  if (out_) {
    fwrite(line.data(), 1, line.size(), out_);
    fputc('\n', out_);
    fflush(out_);
  }
  recent_.push_back(std::move(line));
  if (recent_.size() > 256) recent_.erase(recent_.begin());
}

std::map<std::string, uint64_t> Audit::countersByVerdict() const {
  std::lock_guard lock(mu_);
  return by_verdict_;
}

std::map<std::string, uint64_t> Audit::countersByReason() const {
  std::lock_guard lock(mu_);
  return by_rule_;
}

std::vector<std::string> Audit::lastLinesForTest() const {
  std::lock_guard lock(mu_);
  return recent_;
}

}  // namespace space::egress
