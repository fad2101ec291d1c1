// One JSON line per decision (connection, request, DNS answer, control change), written to a file or a
// stream, plus counters per verdict and reason for metrics. Secret names appear; values never do.
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <mutex>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "common/result.h"

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

class Audit {
 public:
  // path "-" writes to stdout; "" discards lines but keeps the counters.
  static Result<std::unique_ptr<Audit>> open(const std::string& path);
  ~Audit();

  void write(const AuditRecord& r);
  std::map<std::string, uint64_t> countersByVerdict() const;
  std::map<std::string, uint64_t> countersByReason() const;  // "deny: <rule>"
  std::vector<std::string> lastLinesForTest() const;

 private:
  Audit() = default;
  FILE* out_ = nullptr;
  bool owned_ = false;
  mutable std::mutex mu_;
  std::map<std::string, uint64_t> by_verdict_;
  std::map<std::string, uint64_t> by_rule_;
  std::vector<std::string> recent_;
};

}  // namespace space::egress
