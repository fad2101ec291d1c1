#include "egress/policy.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "egress/names.h"

namespace space::egress {

const char* modeName(Mode m) {
  switch (m) {
    case Mode::kDenyAll:
      return "deny-all";
    case Mode::kAllowList:
      return "allow-list";
    case Mode::kAllowAllPublic:
      return "allow-all-public";
  }
  return "deny-all";
}

Result<Mode> parseMode(std::string_view s) {
  if (s == "deny-all") return Mode::kDenyAll;
  if (s == "allow-list") return Mode::kAllowList;
  if (s == "allow-all-public") return Mode::kAllowAllPublic;
  return makeError(ErrorKind::kInvalidArgument, "unknown mode '{}' (deny-all, allow-list, allow-all-public)", s);
}

const char* tlsModeName(TlsMode m) { return m == TlsMode::kInterceptAll ? "intercept-all" : "intercept-bound"; }

Result<TlsMode> parseTlsMode(std::string_view s) {
  if (s == "intercept-bound") return TlsMode::kInterceptBound;
  if (s == "intercept-all") return TlsMode::kInterceptAll;
  return makeError(ErrorKind::kInvalidArgument, "unknown tls '{}' (intercept-bound, intercept-all)", s);
}

const char* verdictName(Verdict v) { return v == Verdict::kAllow ? "allow" : "deny"; }

bool Rule::portMatches(uint16_t port) const {
  return port == 0 || ports.empty() || std::find(ports.begin(), ports.end(), port) != ports.end();
}

std::string Rule::describe() const {
  std::string s =
      fmt::format("{} {} {}", allow ? "allow" : "deny", cidr ? "cidr" : "domain", cidr ? cidr->str() : domain);
  if (!ports.empty()) {
    s += " port ";
    for (size_t i = 0; i < ports.size(); ++i) s += fmt::format("{}{}", i ? "," : "", ports[i]);
  }
  return s;
}

Result<Policy> parsePolicy(const nlohmann::json& j) {
  if (!j.is_object()) return makeError(ErrorKind::kInvalidArgument, "policy must be an object");
  Policy p;
  for (const auto& [k, v] : j.items())
    if (k != "mode" && k != "rules" && k != "tls")
      return makeError(ErrorKind::kInvalidArgument, "unknown policy field '{}'", k);
  if (j.contains("mode")) {
    if (!j["mode"].is_string()) return makeError(ErrorKind::kInvalidArgument, "mode must be a string");
    ASSIGN_OR_RETURN(p.mode, parseMode(j["mode"].get<std::string>()));
  }
  if (j.contains("tls")) {
    if (!j["tls"].is_string()) return makeError(ErrorKind::kInvalidArgument, "tls must be a string");
    ASSIGN_OR_RETURN(p.tls, parseTlsMode(j["tls"].get<std::string>()));
  }
  if (!j.contains("rules")) return p;
  if (!j["rules"].is_array()) return makeError(ErrorKind::kInvalidArgument, "rules must be an array");
  if (j["rules"].size() > 4096) return makeError(ErrorKind::kInvalidArgument, "too many rules");
  for (const auto& r : j["rules"]) {
    if (!r.is_object()) return makeError(ErrorKind::kInvalidArgument, "a rule must be an object");
    for (const auto& [k, v] : r.items())
      if (k != "action" && k != "domain" && k != "cidr" && k != "ports")
        return makeError(ErrorKind::kInvalidArgument, "unknown rule field '{}'", k);
    Rule rule;
    if (!r.contains("action") || !r["action"].is_string())
      return makeError(ErrorKind::kInvalidArgument, "a rule needs \"action\": \"allow\" or \"deny\"");
    std::string action = r["action"];
    if (action != "allow" && action != "deny")
      return makeError(ErrorKind::kInvalidArgument, "action must be allow or deny, not '{}'", action);
    rule.allow = action == "allow";
    bool has_domain = r.contains("domain"), has_cidr = r.contains("cidr");
    if (has_domain == has_cidr) return makeError(ErrorKind::kInvalidArgument, "a rule has exactly one of domain, cidr");
    if (has_domain) {
      if (!r["domain"].is_string()) return makeError(ErrorKind::kInvalidArgument, "domain must be a string");
      const std::string domain = r["domain"].get<std::string>();
      // An address where a name goes ("10.252.77.2") would never match any name: it means that host.
      if (parseIp(domain)) {
        rule.cidr = *parseCidr(domain);
      } else {
        auto d = normalizePattern(domain);
        if (!d) return makeError(ErrorKind::kInvalidArgument, "rule domain: {}", d.error().message);
        rule.domain = *d;
      }
    } else {
      if (!r["cidr"].is_string()) return makeError(ErrorKind::kInvalidArgument, "cidr must be a string");
      auto c = parseCidr(r["cidr"].get<std::string>());
      if (!c) return makeError(ErrorKind::kInvalidArgument, "rule cidr: {}", c.error().message);
      rule.cidr = *c;
    }
    if (r.contains("ports")) {
      if (!r["ports"].is_array()) return makeError(ErrorKind::kInvalidArgument, "ports must be an array");
      for (const auto& port : r["ports"]) {
        if (!port.is_number_unsigned() || port.get<uint64_t>() < 1 || port.get<uint64_t>() > 65535)
          return makeError(ErrorKind::kInvalidArgument, "ports are integers 1..65535");
        rule.ports.push_back(port.get<uint16_t>());
      }
    }
    p.rules.push_back(std::move(rule));
  }
  return p;
}

nlohmann::json policyToJson(const Policy& p) {
  nlohmann::json rules = nlohmann::json::array();
  for (const auto& r : p.rules) {
    nlohmann::json j{{"action", r.allow ? "allow" : "deny"}};
    if (r.cidr)
      j["cidr"] = r.cidr->str();
    else
      j["domain"] = r.domain;
    if (!r.ports.empty()) j["ports"] = r.ports;
    rules.push_back(j);
  }
  return {{"mode", modeName(p.mode)}, {"rules", rules}, {"tls", tlsModeName(p.tls)}};
}

namespace {

// Domains under which many unrelated customers' sites share the same edge addresses and TLS front
// ends. An allow rule for one of their names lets a sandbox reach every other site there by domain
// fronting (the SNI names the allowed site, the Host inside the tunnel another), unless the gateway
// terminates the TLS; a wildcard over one admits every customer outright. The well-known ones only:
// the list warns, it decides nothing.
constexpr std::string_view kSharedCdnSuffixes[] = {
    "cloudfront.net",  // Amazon CloudFront
    "akamaiedge.net",
    "akamaized.net",
    "akamaihd.net",
    "edgekey.net",
    "edgesuite.net",  // Akamai
    "azureedge.net",
    "azurefd.net",
    "azurewebsites.net",  // Azure CDN, Front Door, App Service
    "fastly.net",
    "fastlylb.net",  // Fastly
    "cdn.cloudflare.net",
    "workers.dev",
    "pages.dev",  // Cloudflare
    "googleusercontent.com",
    "appspot.com",  // Google
    "herokuapp.com",
    "vercel.app",
    "netlify.app",  // hosting platforms
};

bool underSuffix(std::string_view name, std::string_view suffix) {
  return name == suffix ||
         (name.size() > suffix.size() && name.ends_with(suffix) && name[name.size() - suffix.size() - 1] == '.');
}

}  // namespace

std::vector<std::string> policyWarnings(const Policy& p) {
  std::vector<std::string> out;
  const bool intercepted = p.tls == TlsMode::kInterceptAll;
  for (const auto& r : p.rules) {
    if (!r.allow || r.cidr) continue;
    bool wildcard = r.domain.starts_with("*.");
    std::string_view base = wildcard ? std::string_view(r.domain).substr(2) : std::string_view(r.domain);
    for (std::string_view cdn : kSharedCdnSuffixes) {
      // The rule names a site on the CDN, or a wildcard covers all of it ("*.net" covers cloudfront.net).
      bool on_cdn = underSuffix(base, cdn);
      bool covers_cdn = wildcard && underSuffix(cdn, base);
      if (!on_cdn && !covers_cdn) continue;
      if (wildcard && (covers_cdn || base == cdn)) {
        out.push_back(fmt::format("rule '{}' allows every customer's site on the shared CDN {}", r.describe(), cdn));
      } else if (!intercepted) {
        out.push_back(fmt::format(
            "rule '{}' names a site on the shared CDN {}: the gateway sees only the SNI of TLS it does not "
            "intercept, so a sandbox can reach any other site on {} by domain fronting; \"tls\": \"intercept-all\" "
            "holds the Host inside to the SNI",
            r.describe(), cdn, cdn));
      }
      break;
    }
  }
  return out;
}

namespace {

Decision allow(std::string rule, std::string reason) { return {Verdict::kAllow, std::move(rule), std::move(reason)}; }
Decision deny(std::string rule, std::string reason) { return {Verdict::kDeny, std::move(rule), std::move(reason)}; }

const Rule* findDomainRule(const Policy& p, bool allow_rule, std::string_view name, uint16_t port) {
  if (name.empty()) return nullptr;
  for (const auto& r : p.rules)
    if (r.allow == allow_rule && !r.cidr && r.portMatches(port) && nameMatches(r.domain, name)) return &r;
  return nullptr;
}

// A CIDR rule matches the address as given or its unwrapped IPv4 form.
const Rule* findCidrRule(const Policy& p, bool allow_rule, const IpAddress& ip, const IpAddress& judged, uint16_t port,
                         bool explicit_port_for_25) {
  for (const auto& r : p.rules) {
    if (r.allow != allow_rule || !r.cidr || !r.portMatches(port)) continue;
    if (explicit_port_for_25 && std::find(r.ports.begin(), r.ports.end(), uint16_t{25}) == r.ports.end()) continue;
    if (r.cidr->contains(ip) || r.cidr->contains(judged)) return &r;
  }
  return nullptr;
}

// A rule that names the target but other ports: the denial is then about the port, and says so.
const Rule* findRuleOnOtherPort(const Policy& p, std::string_view name, const IpAddress* ip, const IpAddress* judged,
                                uint16_t port) {
  for (const auto& r : p.rules) {
    if (!r.allow || r.portMatches(port)) continue;
    if (r.cidr ? ip && (r.cidr->contains(*ip) || r.cidr->contains(*judged))
               : !name.empty() && nameMatches(r.domain, name))
      return &r;
  }
  return nullptr;
}

Decision portNotAllowed(const Rule& r, uint16_t port) {
  return deny(r.describe(), fmt::format("port {} not allowed: the rule for this destination names other ports", port));
}

}  // namespace

Decision decideName(const Policy& p, std::string_view name, uint16_t port) {
  if (p.mode == Mode::kDenyAll) return deny("mode deny-all", "the sandbox's policy denies all egress");
  if (const Rule* r = findDomainRule(p, false, name, port)) return deny(r->describe(), "name matches a deny rule");
  if (const Rule* r = findDomainRule(p, true, name, port)) return allow(r->describe(), "name matches an allow rule");
  if (p.mode == Mode::kAllowAllPublic)
    return allow("mode allow-all-public", "public names are allowed; addresses are still checked");
  if (const Rule* r = findRuleOnOtherPort(p, name, nullptr, nullptr, port)) return portNotAllowed(*r, port);
  return deny("mode allow-list", "no allow rule matches the name");
}

Decision decideAnswer(const Policy& p, const PolicyContext& ctx, const IpAddress& ip, uint16_t port) {
  static const HostFacts kNoFacts;
  static const std::vector<Cidr> kNone;
  Classification c = classify(ip, port, ctx.facts ? *ctx.facts : kNoFacts,
                              ctx.test_external_subnets ? *ctx.test_external_subnets : kNone);
  if (const Rule* r = findCidrRule(p, false, ip, c.judged, port, false))
    return deny(r->describe(), fmt::format("address {} matches a deny rule", ip.str()));
  if (c.cls == AddressClass::kLateral)
    return deny("default-deny " + c.range, fmt::format("address {} is the host, the gateway or a sandbox", ip.str()));
  if (c.cls == AddressClass::kReserved) {
    if (const Rule* r = findCidrRule(p, true, ip, c.judged, port, false))
      return allow(r->describe(), fmt::format("operator CIDR rule allows reserved address {}", ip.str()));
    if (const Rule* r = findRuleOnOtherPort(p, {}, &ip, &c.judged, port)) return portNotAllowed(*r, port);
    std::string judged = c.judged == ip ? "" : fmt::format(" (judged as {})", c.judged.str());
    return deny("default-deny " + c.range, fmt::format("address {}{} is in a reserved range", ip.str(), judged));
  }
  if (port == 25 && !findCidrRule(p, true, ip, c.judged, port, true))
    return deny("default-deny tcp port 25", "outbound mail is denied unless a CIDR rule names port 25");
  return allow("public address", fmt::format("{} is a public address", ip.str()));
}

Decision decideConnection(const Policy& p, const PolicyContext& ctx, std::string_view name, const IpAddress& ip,
                          uint16_t port) {
  if (p.mode == Mode::kDenyAll) return deny("mode deny-all", "the sandbox's policy denies all egress");
  if (const Rule* r = findDomainRule(p, false, name, port)) return deny(r->describe(), "name matches a deny rule");
  Decision address = decideAnswer(p, ctx, ip, port);
  if (!address.allowed()) return address;
  bool operator_cidr = address.rule.starts_with("allow cidr");
  if (const Rule* r = findCidrRule(p, true, ip, embeddedIpv4(ip).value_or(ip), port, false))
    return allow(r->describe(), fmt::format("address {} matches an allow rule", ip.str()));
  if (operator_cidr) return address;
  IpAddress judged = embeddedIpv4(ip).value_or(ip);
  if (name.empty() && p.mode == Mode::kAllowList)
    if (const Rule* r = findRuleOnOtherPort(p, {}, &ip, &judged, port)) return portNotAllowed(*r, port);
  if (name.empty())
    return deny(fmt::format("mode {}", modeName(p.mode)),
                "no name (SNI, Host or CONNECT host) and no CIDR rule allows the address");
  if (const Rule* r = findDomainRule(p, true, name, port)) return allow(r->describe(), "name matches an allow rule");
  if (p.mode == Mode::kAllowAllPublic) return allow("mode allow-all-public", "public address reached by name");
  if (const Rule* r = findRuleOnOtherPort(p, name, &ip, &judged, port)) return portNotAllowed(*r, port);
  return deny("mode allow-list", "no allow rule matches the name and port");
}

}  // namespace space::egress
