#include "egress/control.h"

#include <net/if.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cctype>
#include <cstring>
#include <nlohmann/json.hpp>

#include "egress/asio.h"
#include "egress/names.h"

namespace space::egress {

namespace asio = boost::asio;
using asio::local::stream_protocol;

namespace {

constexpr size_t kMaxLine = 4 << 20;

Result<SecretBinding> parseSecret(const nlohmann::json& j) {
  if (!j.is_object()) return makeError(ErrorKind::kInvalidArgument, "a secret must be an object");
  for (const auto& [k, v] : j.items())
    if (k != "name" && k != "placeholder" && k != "value" && k != "hosts" && k != "header" && k != "format" &&
        k != "methods" && k != "path_prefixes")
      return makeError(ErrorKind::kInvalidArgument, "unknown secret field '{}'", k);
  SecretBinding b;
  auto str = [&](const char* k, std::string& out, bool required) -> Status {
    if (!j.contains(k)) {
      if (required) return makeError(ErrorKind::kInvalidArgument, "secret needs '{}'", k);
      return ok();
    }
    if (!j[k].is_string()) return makeError(ErrorKind::kInvalidArgument, "secret '{}' must be a string", k);
    out = j[k].get<std::string>();
    return ok();
  };
  TRY(str("name", b.name, true));
  TRY(str("placeholder", b.placeholder, true));
  TRY(str("value", b.value, true));
  TRY(str("header", b.header, false));
  TRY(str("format", b.format, false));
  if (!j.contains("hosts") || !j["hosts"].is_array())
    return makeError(ErrorKind::kInvalidArgument, "secret {} needs 'hosts': [names]", b.name);
  for (const auto& h : j["hosts"]) {
    if (!h.is_string()) return makeError(ErrorKind::kInvalidArgument, "hosts are strings");
    auto n = normalizePattern(h.get<std::string>());
    if (!n) return makeError(ErrorKind::kInvalidArgument, "secret {} host: {}", b.name, n.error().message);
    b.hosts.push_back(*n);
  }
  auto strings = [&](const char* k, std::vector<std::string>& out) -> Status {
    if (!j.contains(k)) return ok();
    if (!j[k].is_array()) return makeError(ErrorKind::kInvalidArgument, "secret {} '{}' must be an array", b.name, k);
    for (const auto& v : j[k]) {
      if (!v.is_string()) return makeError(ErrorKind::kInvalidArgument, "secret {} '{}' holds strings", b.name, k);
      out.push_back(v.get<std::string>());
    }
    return ok();
  };
  TRY(strings("methods", b.methods));
  TRY(strings("path_prefixes", b.path_prefixes));
  TRY(validateBinding(b));
  return b;
}

nlohmann::json errorReply(const Error& e) {
  return {{"ok", false}, {"error", {{"kind", errorKindName(e.kind)}, {"message", e.message}}}};
}

}  // namespace

Result<std::shared_ptr<Sandbox>> parseSandbox(const nlohmann::json& j) {
  if (!j.is_object()) return makeError(ErrorKind::kInvalidArgument, "sandbox must be an object");
  for (const auto& [k, v] : j.items())
    if (k != "id" && k != "sources" && k != "link" && k != "policy" && k != "secrets" && k != "ca")
      return makeError(ErrorKind::kInvalidArgument, "unknown sandbox field '{}'", k);
  auto sb = std::make_shared<Sandbox>();
  if (!j.contains("id") || !j["id"].is_string() || j["id"].get<std::string>().empty() ||
      j["id"].get<std::string>().size() > 128)
    return makeError(ErrorKind::kInvalidArgument, "sandbox needs an 'id' string");
  sb->id = j["id"];
  if (!j.contains("sources") || !j["sources"].is_array() || j["sources"].empty())
    return makeError(ErrorKind::kInvalidArgument, "sandbox {} needs 'sources': [CIDR]", sb->id);
  for (const auto& s : j["sources"]) {
    if (!s.is_string()) return makeError(ErrorKind::kInvalidArgument, "sources are CIDR strings");
    auto c = parseCidr(s.get<std::string>());
    if (!c) return tl::unexpected(c.error());
    sb->sources.push_back(*c);
  }
  if (j.contains("link")) {
    // An interface name: 1 to IFNAMSIZ-1 bytes, no '/' and no whitespace (the kernel's dev_valid_name).
    const auto& l = j["link"];
    bool valid = l.is_string() && !l.get<std::string>().empty() && l.get<std::string>().size() < IFNAMSIZ;
    if (valid)
      for (char ch : l.get<std::string>()) valid = valid && ch != '/' && ch != ':' && !std::isspace(uint8_t(ch));
    if (!valid) return makeError(ErrorKind::kInvalidArgument, "sandbox {}: 'link' must be an interface name", sb->id);
    sb->link = l.get<std::string>();
  }
  if (j.contains("policy")) {
    ASSIGN_OR_RETURN(sb->policy, parsePolicy(j["policy"]));
  }
  if (j.contains("secrets")) {
    if (!j["secrets"].is_array()) return makeError(ErrorKind::kInvalidArgument, "secrets must be an array");
    for (const auto& s : j["secrets"]) {
      ASSIGN_OR_RETURN(auto b, parseSecret(s));
      for (const auto& other : sb->secrets)
        if (other.name == b.name || other.placeholder == b.placeholder)
          return makeError(ErrorKind::kInvalidArgument, "secret {} is declared twice", b.name);
      sb->secrets.push_back(std::move(b));
    }
  }
  if (j.contains("ca")) {
    const auto& ca = j["ca"];
    if (!ca.is_object() || !ca.contains("cert_pem") || !ca.contains("key_pem") || !ca["cert_pem"].is_string() ||
        !ca["key_pem"].is_string())
      return makeError(ErrorKind::kInvalidArgument, "ca needs cert_pem and key_pem strings");
    ASSIGN_OR_RETURN(sb->ca, tls::CertAuthority::fromPem({ca["cert_pem"], ca["key_pem"]}));
  } else {
    ASSIGN_OR_RETURN(sb->ca, tls::CertAuthority::generate(sb->id));
  }
  return sb;
}

namespace {

// "stats": the audit's counters (verdicts, denials by rule, what was aggregated or dropped, per sandbox
// seen lately) and the gateway's (connections, limits).
nlohmann::json statsReply(const Audit& audit, const GatewayStats& gateway_stats) {
  AuditStats a = audit.stats();
  nlohmann::json sandboxes = nlohmann::json::object();
  for (const auto& [id, s] : audit.sandboxCounters())
    sandboxes[id.empty() ? "(unknown source)" : id] = {
        {"denials", s.denials}, {"aggregated", s.aggregated}, {"dropped", s.dropped}};
  nlohmann::json reply = {{"ok", true},
                          {"verdicts", audit.countersByVerdict()},
                          {"denials", audit.countersByReason()},
                          {"audit",
                           {{"lines", a.lines},
                            {"bytes", a.bytes},
                            {"aggregated", a.aggregated},
                            {"summaries", a.summaries},
                            {"dropped", a.dropped},
                            {"write_failures", a.write_failures},
                            {"rotations", a.rotations},
                            {"file_bytes", a.file_bytes},
                            {"max_bytes", audit.options().max_bytes}}},
                          {"sandboxes", sandboxes}};
  if (gateway_stats) reply.update(gateway_stats());
  return reply;
}

}  // namespace

nlohmann::json handleControl(Registry& registry, Audit& audit, const nlohmann::json& req,
                             const GatewayStats& gateway_stats) {
  if (!req.is_object() || !req.contains("op") || !req["op"].is_string())
    return errorReply(Error{ErrorKind::kInvalidArgument, 0, "request needs an 'op'"});
  std::string op = req["op"];
  AuditRecord rec;
  rec.kind = "control";
  rec.verdict = "allow";
  rec.rule = op;
  if (op == "ping") return {{"ok", true}, {"sandboxes", registry.size()}};
  if (op == "register") {
    if (!req.contains("sandbox")) return errorReply(Error{ErrorKind::kInvalidArgument, 0, "register needs 'sandbox'"});
    auto sb = parseSandbox(req["sandbox"]);
    if (!sb) return errorReply(sb.error());
    std::string ca_pem = (*sb)->ca->certPem();
    rec.sandbox = (*sb)->id;
    if (auto s = registry.add(*sb); !s) return errorReply(s.error());
    rec.reason = fmt::format("registered, mode {}, {} rules, {} secrets", modeName((*sb)->policy.mode),
                             (*sb)->policy.rules.size(), (*sb)->secrets.size());
    for (const auto& b : (*sb)->secrets) rec.secrets.push_back(b.name);
    audit.write(rec);
    return {{"ok", true}, {"id", (*sb)->id}, {"ca_cert_pem", ca_pem}};
  }
  if (op == "update") {
    if (!req.contains("id") || !req["id"].is_string())
      return errorReply(Error{ErrorKind::kInvalidArgument, 0, "update needs 'id'"});
    auto old = registry.byId(req["id"]);
    if (!old) return errorReply(Error{ErrorKind::kNotFound, 0, "no such sandbox"});
    for (const auto& [k, v] : req.items())
      if (k != "op" && k != "id" && k != "policy" && k != "secrets")
        return errorReply(Error{ErrorKind::kInvalidArgument, 0, fmt::format("unknown update field '{}'", k)});
    auto sb = std::make_shared<Sandbox>(*old);
    if (req.contains("policy")) {
      auto p = parsePolicy(req["policy"]);
      if (!p) return errorReply(p.error());
      sb->policy = *p;
    }
    if (req.contains("secrets")) {
      std::vector<SecretBinding> secrets;
      if (!req["secrets"].is_array())
        return errorReply(Error{ErrorKind::kInvalidArgument, 0, "secrets must be an array"});
      for (const auto& s : req["secrets"]) {
        auto b = parseSecret(s);
        if (!b) return errorReply(b.error());
        secrets.push_back(std::move(*b));
      }
      sb->secrets = std::move(secrets);
    }
    rec.sandbox = sb->id;
    if (auto s = registry.replace(sb); !s) return errorReply(s.error());
    rec.reason = fmt::format("updated, mode {}, {} rules, {} secrets", modeName(sb->policy.mode),
                             sb->policy.rules.size(), sb->secrets.size());
    audit.write(rec);
    return {{"ok", true}};
  }
  if (op == "remove") {
    if (!req.contains("id") || !req["id"].is_string())
      return errorReply(Error{ErrorKind::kInvalidArgument, 0, "remove needs 'id'"});
    if (auto s = registry.remove(req["id"]); !s) return errorReply(s.error());
    rec.sandbox = req["id"];
    rec.reason = "removed";
    audit.forgetSandbox(rec.sandbox);  // its last summary lines go out before the line saying it is gone
    audit.write(rec);
    return {{"ok", true}};
  }
  if (op == "get") {
    if (!req.contains("id") || !req["id"].is_string())
      return errorReply(Error{ErrorKind::kInvalidArgument, 0, "get needs 'id'"});
    auto sb = registry.byId(req["id"]);
    if (!sb) return errorReply(Error{ErrorKind::kNotFound, 0, "no such sandbox"});
    nlohmann::json sources = nlohmann::json::array(), secrets = nlohmann::json::array();
    for (const auto& c : sb->sources) sources.push_back(c.str());
    for (const auto& b : sb->secrets)  // never the value
      secrets.push_back({{"name", b.name},
                         {"hosts", b.hosts},
                         {"header", b.header},
                         {"format", b.format},
                         {"methods", b.methods},
                         {"path_prefixes", b.path_prefixes}});
    return {{"ok", true},
            {"id", sb->id},
            {"sources", sources},
            {"link", sb->link},
            {"policy", policyToJson(sb->policy)},
            {"secrets", secrets},
            {"ca_cert_pem", sb->ca->certPem()}};
  }
  if (op == "stats") return statsReply(audit, gateway_stats);
  return errorReply(Error{ErrorKind::kInvalidArgument, 0, fmt::format("unknown op '{}'", op)});
}

struct ControlServer::Impl {
  asio::io_context& io;
  Registry& registry;
  Audit& audit;
  GatewayStats gateway_stats;
  stream_protocol::acceptor acceptor;

  Impl(asio::io_context& i, Registry& r, Audit& a, GatewayStats g)
      : io(i), registry(r), audit(a), gateway_stats(std::move(g)), acceptor(i) {}

  asio::awaitable<void> serve(stream_protocol::socket s) {
    std::string buf;
    char tmp[8192];
    boost::system::error_code ec;
    while (true) {
      size_t nl;
      while ((nl = buf.find('\n')) == std::string::npos) {
        if (buf.size() > kMaxLine) co_return;
        size_t n = co_await s.async_read_some(asio::buffer(tmp), asio::redirect_error(asio::use_awaitable, ec));
        if (ec) co_return;
        buf.append(tmp, n);
      }
      std::string line = buf.substr(0, nl);
      buf.erase(0, nl + 1);
      nlohmann::json reply;
      auto req = nlohmann::json::parse(line, nullptr, false);
      if (req.is_discarded())
        reply = errorReply(Error{ErrorKind::kInvalidArgument, 0, "not JSON"});
      else
        reply = handleControl(registry, audit, req, gateway_stats);
      std::string out = reply.dump() + "\n";
      co_await asio::async_write(s, asio::buffer(out), asio::redirect_error(asio::use_awaitable, ec));
      if (ec) co_return;
    }
  }

  asio::awaitable<void> acceptLoop() {
    while (true) {
      boost::system::error_code ec;
      auto s = co_await acceptor.async_accept(asio::redirect_error(asio::use_awaitable, ec));
      if (ec) {
        if (ec == asio::error::operation_aborted) co_return;
        continue;
      }
      asio::co_spawn(io, serve(std::move(s)), asio::detached);
    }
  }
};

ControlServer::ControlServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ControlServer::~ControlServer() {
  boost::system::error_code ec;
  impl_->acceptor.close(ec);
}

Result<UniqueFd> bindControlSocket(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path) return sysError(ENAMETOOLONG, "control socket {}", path);
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) return sysError(errno, "socket(AF_UNIX)");
  ::unlink(path.c_str());  // a stale socket from a previous run; the pid file lock is the caller's business
  // Only root may talk to the gateway's control socket: it carries secret values.
  mode_t old = umask(0077);
  int rc = bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  int err = errno;
  umask(old);
  if (rc < 0) return sysError(err, "bind control socket {}", path);
  if (::listen(fd.get(), 64) < 0) return sysError(errno, "listen on control socket {}", path);
  return fd;
}

Result<std::unique_ptr<ControlServer>> ControlServer::serve(asio::io_context& io, UniqueFd listening,
                                                            Registry& registry, Audit& audit,
                                                            GatewayStats gateway_stats) {
  auto impl = std::make_unique<Impl>(io, registry, audit, std::move(gateway_stats));
  int type = 0;
  socklen_t len = sizeof type;
  if (getsockopt(listening.get(), SOL_SOCKET, SO_TYPE, &type, &len) < 0 || type != SOCK_STREAM)
    return makeError(ErrorKind::kInvalidArgument, "control descriptor {} is not a stream socket", listening.get());
  boost::system::error_code ec;
  impl->acceptor.assign(stream_protocol(), listening.release(), ec);
  if (ec) return makeError(ErrorKind::kUnavailable, "control socket: {}", ec.message());
  Impl* p = impl.get();
  asio::co_spawn(io, p->acceptLoop(), asio::detached);
  return std::unique_ptr<ControlServer>(new ControlServer(std::move(impl)));
}

}  // namespace space::egress
