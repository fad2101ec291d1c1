// Per-sandbox egress policy and the decisions made with it. A decision always names the rule that made it
// and why, so that every audit line can be explained.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "egress/address.h"

namespace space::egress {

enum class Mode { kDenyAll, kAllowList, kAllowAllPublic };
const char* modeName(Mode m);
Result<Mode> parseMode(std::string_view s);

enum class Verdict { kAllow, kDeny };
const char* verdictName(Verdict v);

struct Rule {
  bool allow = true;
  std::string domain;           // normalised; "*.suffix" or exact; empty for a CIDR rule
  std::optional<Cidr> cidr;     // set for a CIDR rule
  std::vector<uint16_t> ports;  // empty: any port

  bool portMatches(uint16_t port) const;  // port 0 (unknown, e.g. DNS) matches any rule
  std::string describe() const;           // "allow domain *.example.com port 443"
};

// Which TLS connections the gateway terminates. Only then does it see the requests inside and can hold
// Host to SNI (E9); for a tunnel it only relays, it sees the SNI alone, and a sandbox can front any site
// that shares the allowed host's addresses (a CDN) with another Host inside.
enum class TlsMode {
  kInterceptBound,  // "intercept-bound": only hosts a secret is bound to (it must be put into requests)
  kInterceptAll,    // "intercept-all": every allowed TLS connection that names its host (SNI)
};
const char* tlsModeName(TlsMode m);
Result<TlsMode> parseTlsMode(std::string_view s);

struct Policy {
  Mode mode = Mode::kDenyAll;
  std::vector<Rule> rules;
  TlsMode tls = TlsMode::kInterceptBound;
};

// {"mode": "allow-list", "rules": [{"action": "allow", "domain": "*.example.com", "ports": [443]},
//                                  {"action": "deny", "cidr": "203.0.113.0/24"}],
//  "tls": "intercept-all"}
Result<Policy> parsePolicy(const nlohmann::json& j);
nlohmann::json policyToJson(const Policy& p);

// What the operator should know about a valid policy: allow rules for shared CDN and hosting domains,
// whose sites share addresses and TLS fronts with everyone else's (fronting, and wildcards that admit
// every customer of the CDN). One sentence per rule concerned.
std::vector<std::string> policyWarnings(const Policy& p);

struct Decision {
  Verdict verdict = Verdict::kDeny;
  std::string rule;    // the rule or built-in list entry that decided
  std::string reason;  // a sentence for the audit log
  bool allowed() const { return verdict == Verdict::kAllow; }
};

// What the policy is evaluated against. The host facts and the test setting are node-wide.
struct PolicyContext {
  const HostFacts* facts = nullptr;
  // Loudly named on purpose: only the test harness sets this, and only in the config file (config.h).
  const std::vector<Cidr>* test_external_subnets = nullptr;
};

// May the sandbox learn the addresses of (and connect by name to) this normalised name? port 0 = any.
// Used by DNS (E16: anything not allowed answers NXDOMAIN) and before resolving for the proxy.
Decision decideName(const Policy& p, std::string_view name, uint16_t port);

// May the sandbox open a TCP connection to ip:port? name is the normalised name it was reached by (SNI,
// Host, CONNECT), empty when there is none or the target was an IP literal. The caller guarantees that a
// named connection goes to an address vetted for that name (resolver pinning).
Decision decideConnection(const Policy& p, const PolicyContext& ctx, std::string_view name, const IpAddress& ip,
                          uint16_t port);

// Only an address check: is this resolved answer usable at all (E4, E6)? Ignores the mode and name rules.
Decision decideAnswer(const Policy& p, const PolicyContext& ctx, const IpAddress& ip, uint16_t port);

}  // namespace space::egress
