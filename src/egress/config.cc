#include "egress/config.h"

#include <ifaddrs.h>

#include <fstream>
#include <sstream>

namespace space::egress {

namespace {

// Limits that would switch a protection off, or contradict each other, are refused rather than clamped:
// the operator learns at start that the setting does not mean what they thought.
Status validateLimits(const Config& c) {
  auto bad = [](std::string_view what) { return makeError(ErrorKind::kInvalidArgument, "config: {}", what); };
  for (const auto& [name, r] : {std::pair{"audit_lines_per_second / audit_line_burst", c.audit.lines_per_sandbox},
                                {"connections_per_second / connection_burst", c.connection_rate},
                                {"dns_queries_per_second / dns_query_burst", c.dns_rate}})
    if (!(r.per_second > 0) || !(r.burst >= 1)) return bad(fmt::format("{} must be > 0 and >= 1", name));
  if (c.audit.max_bytes != 0 && c.audit.max_bytes < kMinAuditBytes)
    return bad(fmt::format("audit_log_max_bytes must be 0 (no cap) or at least {}", kMinAuditBytes));
  if (c.audit.interval < std::chrono::milliseconds(100) || c.audit.interval > std::chrono::minutes(10))
    return bad("audit_interval_ms must be between 100 and 600000");
  if (c.connections.max_total == 0 || c.connections.max_per_sandbox == 0)
    return bad("max_connections and max_connections_per_sandbox must be > 0");
  if (c.connections.reserve >= c.connections.max_total)
    return bad("reserved_connections must be less than max_connections");
  if (c.head_deadline < std::chrono::milliseconds(100) || c.handshake_timeout < std::chrono::milliseconds(100))
    return bad("head_deadline_ms and handshake_timeout_ms must be at least 100");
  return ok();
}

Result<ConfineConfig> parseConfine(const nlohmann::json& v) {
  if (!v.is_object())
    return makeError(ErrorKind::kInvalidArgument, "confine must be an object {{uid, gid, root_dir, seccomp_policy}}");
  ConfineConfig c;
  c.enabled = true;
  for (const auto& [k, x] : v.items()) {
    if (k == "uid")
      c.uid = x.get<uint32_t>();
    else if (k == "gid")
      c.gid = x.get<uint32_t>();
    else if (k == "root_dir")
      c.root_dir = x.get<std::string>();
    else if (k == "seccomp_policy")
      c.seccomp_policy = x.get<std::string>();
    else
      return makeError(ErrorKind::kInvalidArgument, "unknown confine key '{}'", k);
  }
  if (c.uid == 0 || c.gid == 0)
    return makeError(ErrorKind::kInvalidArgument, "confine: uid and gid must be given, not 0");
  for (const auto& [name, path] : {std::pair{"root_dir", &c.root_dir}, {"seccomp_policy", &c.seccomp_policy}})
    if (path->empty() || path->front() != '/')
      return makeError(ErrorKind::kInvalidArgument, "confine: {} must be an absolute path", name);
  return c;
}

}  // namespace

Result<Config> parseConfig(const nlohmann::json& j) {
  if (!j.is_object()) return makeError(ErrorKind::kInvalidArgument, "config must be a JSON object");
  Config c;
  bool reserve_given = false;
  try {
    for (const auto& [k, v] : j.items()) {
      if (k == "control_socket")
        c.control_socket = v.get<std::string>();
      else if (k == "transparent_listen")
        c.transparent_listen = v.get<std::string>();
      else if (k == "proxy_listen")
        c.proxy_listen = v.get<std::string>();
      else if (k == "dns_listen")
        c.dns_listen = v.get<std::string>();
      else if (k == "upstream_resolvers")
        c.upstream_resolvers = v.get<std::string>();
      else if (k == "upstream_ca_file")
        c.upstream_ca_file = v.get<std::string>();
      else if (k == "audit_log")
        c.audit_log = v.get<std::string>();
      else if (k == "audit_log_max_bytes")
        c.audit.max_bytes = v.get<uint64_t>();
      else if (k == "audit_lines_per_second")
        c.audit.lines_per_sandbox.per_second = v.get<double>();
      else if (k == "audit_line_burst")
        c.audit.lines_per_sandbox.burst = v.get<double>();
      else if (k == "audit_interval_ms")
        c.audit.interval = std::chrono::milliseconds(v.get<uint32_t>());
      else if (k == "max_connections")
        c.connections.max_total = v.get<size_t>();
      else if (k == "max_connections_per_sandbox")
        c.connections.max_per_sandbox = v.get<size_t>();
      else if (k == "reserved_connections") {
        c.connections.reserve = v.get<size_t>();
        reserve_given = true;
      } else if (k == "reserved_connections_per_sandbox")
        c.connections.reserve_per_sandbox = v.get<size_t>();
      else if (k == "connections_per_second")
        c.connection_rate.per_second = v.get<double>();
      else if (k == "connection_burst")
        c.connection_rate.burst = v.get<double>();
      else if (k == "dns_queries_per_second")
        c.dns_rate.per_second = v.get<double>();
      else if (k == "dns_query_burst")
        c.dns_rate.burst = v.get<double>();
      else if (k == "handshake_timeout_ms")
        c.handshake_timeout = std::chrono::milliseconds(v.get<uint32_t>());
      else if (k == "head_deadline_ms")
        c.head_deadline = std::chrono::milliseconds(v.get<uint32_t>());
      else if (k == "idle_timeout_ms")
        c.idle_timeout = std::chrono::milliseconds(v.get<uint32_t>());
      else if (k == "detect_host_addresses")
        c.detect_host_addresses = v.get<bool>();
      else if (k == "host_addresses") {
        for (const auto& a : v) {
          ASSIGN_OR_RETURN(auto ip, parseIp(a.get<std::string>()));
          c.host_addresses.push_back(ip);
        }
      } else if (k == "sandbox_pools" || k == "test_external_subnets") {
        auto& out = k == "sandbox_pools" ? c.sandbox_pools : c.test_external_subnets;
        for (const auto& a : v) {
          ASSIGN_OR_RETURN(auto cidr, parseCidr(a.get<std::string>()));
          out.push_back(cidr);
        }
      } else if (k == "protected_listeners") {
        for (const auto& a : v) {
          std::string s = a.get<std::string>();
          size_t colon = s.rfind(':');
          if (colon == std::string::npos)
            return makeError(ErrorKind::kInvalidArgument, "listener '{}' needs a port", s);
          std::string host = s.substr(0, colon);
          if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
          ASSIGN_OR_RETURN(auto ip, parseIp(host));
          c.protected_listeners.push_back({ip, uint16_t(std::stoul(s.substr(colon + 1)))});
        }
      } else if (k == "confine") {
        ASSIGN_OR_RETURN(c.confine, parseConfine(v));
      } else if (k == "sandboxes") {
        if (!v.is_array()) return makeError(ErrorKind::kInvalidArgument, "sandboxes must be an array");
        c.sandboxes = v;
      } else {
        return makeError(ErrorKind::kInvalidArgument, "unknown config key '{}'", k);
      }
    }
  } catch (const std::exception& e) {
    return makeError(ErrorKind::kInvalidArgument, "config: {}", e.what());
  }
  if (!reserve_given) c.connections.reserve = c.connections.max_total / 8;
  TRY(validateLimits(c));
  return c;
}

Result<Config> loadConfig(const std::string& path) {
  std::ifstream in(path);
  if (!in) return sysError(errno, "open config {}", path);
  std::stringstream ss;
  ss << in.rdbuf();
  auto j = nlohmann::json::parse(ss.str(), nullptr, false);
  if (j.is_discarded()) return makeError(ErrorKind::kInvalidArgument, "config {} is not valid JSON", path);
  auto c = parseConfig(j);
  if (!c) return tl::unexpected(c.error().context(path));
  return c;
}

Result<std::vector<IpAddress>> hostAddresses() {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return sysError(errno, "getifaddrs");
  std::vector<IpAddress> out;
  for (auto* i = list; i; i = i->ifa_next)
    if (i->ifa_addr)
      if (auto ip = fromSockaddr(i->ifa_addr)) out.push_back(*ip);
  freeifaddrs(list);
  return out;
}

}  // namespace space::egress
