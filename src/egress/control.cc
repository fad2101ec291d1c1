#include "egress/control.h"

#include <sys/stat.h>
#include <unistd.h>

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
    if (k != "id" && k != "sources" && k != "policy" && k != "secrets" && k != "ca")
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
    return {{"ok", true},         {"id", sb->id},
            {"sources", sources}, {"policy", policyToJson(sb->policy)},
            {"secrets", secrets}, {"ca_cert_pem", sb->ca->certPem()}};
  }
  if (op == "stats") return statsReply(audit, gateway_stats);
  return errorReply(Error{ErrorKind::kInvalidArgument, 0, fmt::format("unknown op '{}'", op)});
}

struct ControlServer::Impl {
  asio::io_context& io;
  std::string path;
  Registry& registry;
  Audit& audit;
  GatewayStats gateway_stats;
  stream_protocol::acceptor acceptor;

  Impl(asio::io_context& i, std::string p, Registry& r, Audit& a, GatewayStats g)
      : io(i), path(std::move(p)), registry(r), audit(a), gateway_stats(std::move(g)), acceptor(i) {}

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
  ::unlink(impl_->path.c_str());
}

Result<std::unique_ptr<ControlServer>> ControlServer::listen(asio::io_context& io, const std::string& path,
                                                             Registry& registry, Audit& audit,
                                                             GatewayStats gateway_stats) {
  auto impl = std::make_unique<Impl>(io, path, registry, audit, std::move(gateway_stats));
  ::unlink(path.c_str());  // a stale socket from a previous run; the pid file lock is the caller's business
  boost::system::error_code ec;
  stream_protocol::endpoint ep(path);
  impl->acceptor.open(ep.protocol(), ec);
  // Only root may talk to the gateway's control socket: it carries secret values.
  mode_t old = umask(0077);
  if (!ec) impl->acceptor.bind(ep, ec);
  umask(old);
  if (!ec) impl->acceptor.listen(64, ec);
  if (ec) return makeError(ErrorKind::kUnavailable, "control socket {}: {}", path, ec.message());
  Impl* p = impl.get();
  asio::co_spawn(io, p->acceptLoop(), asio::detached);
  return std::unique_ptr<ControlServer>(new ControlServer(std::move(impl)));
}

}  // namespace space::egress
