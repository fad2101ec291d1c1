// Egress: a sandbox's network policy (GET/PUT /v1/sandboxes/{id}/network), its audit lines
// (GET .../network/log), and the node's secrets (/v1/secrets). Secret values go in, never out.
#include "api/errors.h"
#include "api/json_input.h"
#include "api/ndjson.h"
#include "api/routes/routes.h"
#include "egress/policy.h"

namespace space::api {
namespace {

constexpr size_t kMaxRules = 256;
constexpr size_t kMaxSecretBytes = 64 << 10;
constexpr int kProbesPerKeepAlive = 25;  // a blank line every ~5 s while following a quiet log

nlohmann::json secretJson(const store::SecretRecord& r) {
  nlohmann::json j = {{"name", r.name}, {"hosts", r.hosts}, {"header", r.header}, {"created_ms", r.created_ms}};
  if (!r.format.empty()) j["format"] = r.format;
  if (!r.methods.empty()) j["methods"] = r.methods;
  if (!r.path_prefixes.empty()) j["path_prefixes"] = r.path_prefixes;
  return j;
}

}  // namespace

Result<nlohmann::json> parseNetworkPolicy(const nlohmann::json& j) {
  if (!j.is_object())
    return makeError(ErrorKind::kInvalidArgument, "network must be an object {\"mode\": ..., \"rules\": [...]}");
  for (const auto& [k, v] : j.items())
    if (k != "mode" && k != "rules" && k != "tls")
      return makeError(ErrorKind::kInvalidArgument, "network: unknown field '{}' (allowed: mode, rules, tls)",
                       k.substr(0, 64));
  if (j.contains("rules") && j["rules"].is_array() && j["rules"].size() > kMaxRules)
    return makeError(ErrorKind::kInvalidArgument, "network: at most {} rules", kMaxRules);
  nlohmann::json full = j;
  if (!full.contains("mode")) full["mode"] = "deny-all";
  if (!full.contains("rules")) full["rules"] = nlohmann::json::array();
  auto policy = egress::parsePolicy(full);
  if (!policy) return makeError(ErrorKind::kInvalidArgument, "network: {}", policy.error().message);
  return egress::policyToJson(*policy);
}

std::vector<std::string> networkWarnings(const nlohmann::json& policy) {
  auto p = egress::parsePolicy(policy);
  return p ? egress::policyWarnings(*p) : std::vector<std::string>{};
}

Result<core::SetSecret> parseSetSecret(std::string_view body) {
  ASSIGN_OR_RETURN(auto in,
                   JsonInput::parse(body, {"name", "value", "hosts", "header", "format", "methods", "path_prefixes"}));
  core::SetSecret cmd;
  ASSIGN_OR_RETURN(auto name, in.string("name", 64));
  if (!name) return makeError(ErrorKind::kInvalidArgument, "name is required");
  cmd.name = *name;
  ASSIGN_OR_RETURN(auto value, in.string("value", kMaxSecretBytes));
  if (!value || value->empty()) return makeError(ErrorKind::kInvalidArgument, "value is required (at most 64 KiB)");
  cmd.value = *value;
  ASSIGN_OR_RETURN(auto hosts, in.stringArray("hosts", 32));
  if (!hosts || hosts->empty())
    return makeError(ErrorKind::kInvalidArgument, "hosts is required: the names the secret may be sent to");
  cmd.hosts = *hosts;
  ASSIGN_OR_RETURN(auto header, in.string("header", 128));
  if (header) cmd.header = *header;
  ASSIGN_OR_RETURN(auto format, in.string("format", 1024));
  if (format) cmd.format = *format;
  // Checked in full (upper-case methods, plain prefixes) by the gateway's own rules when the manager
  // sets the secret.
  ASSIGN_OR_RETURN(auto methods, in.stringArray("methods", 16));
  if (methods) cmd.methods = *methods;
  ASSIGN_OR_RETURN(auto prefixes, in.stringArray("path_prefixes", 32));
  if (prefixes) cmd.path_prefixes = *prefixes;
  return cmd;
}

void registerNetworkRoutes(Router& r) {
  r.add("GET", "/v1/sandboxes/{id}/network", [](RouteContext& ctx) -> Status {
    ASSIGN_OR_RETURN(auto net, ctx.manager.getNetwork(ctx.param("id")));
    return sendJson(ctx.resp, 200, net);
  });
  r.add("PUT", "/v1/sandboxes/{id}/network", [](RouteContext& ctx) -> Status {
    ASSIGN_OR_RETURN(std::string body, ctx.jsonBody());
    auto j = nlohmann::json::parse(body.empty() ? std::string("{}") : body, nullptr, false);
    if (j.is_discarded()) return makeError(ErrorKind::kInvalidArgument, "body is not valid JSON");
    ASSIGN_OR_RETURN(auto policy, parseNetworkPolicy(j));
    ASSIGN_OR_RETURN(auto net, ctx.manager.setNetwork(ctx.param("id"), policy));
    net["warnings"] = networkWarnings(policy);
    return sendJson(ctx.resp, 200, net);
  });
  r.add("GET", "/v1/sandboxes/{id}/network/log", [](RouteContext& ctx) -> Status {
    bool follow = false;
    for (const auto& [k, v] : ctx.req.query) {
      if (k != "follow")
        return makeError(ErrorKind::kInvalidArgument, "unknown query parameter '{}' (allowed: follow)",
                         k.substr(0, 64));
      follow = v == "1" || v == "true";
    }
    // Errors before the first line (unknown sandbox, egress off) still get their status.
    ASSIGN_OR_RETURN(auto net, ctx.manager.getNetwork(ctx.param("id")));
    (void)net;
    TRY(ctx.resp.beginStream(200, "application/x-ndjson", std::nullopt));
    int probes = 0;
    Status client = ok();
    TRY(ctx.manager.streamNetLog(ctx.param("id"), follow, [&](const std::string& line) {
      if (line.empty()) {
        if (++probes % kProbesPerKeepAlive) return true;
        client = ctx.resp.write("\n");
        return bool(client);
      }
      client = ctx.resp.write(line + "\n");
      return bool(client);
    }));
    if (!client) return ok();  // the client went away
    return ctx.resp.end();
  });
  r.add("POST", "/v1/secrets", [](RouteContext& ctx) -> Status {
    ASSIGN_OR_RETURN(std::string body, ctx.jsonBody());
    ASSIGN_OR_RETURN(auto cmd, parseSetSecret(body));
    ASSIGN_OR_RETURN(auto rec, ctx.manager.setSecret(cmd));
    return sendJson(ctx.resp, 201, secretJson(rec));
  });
  r.add("GET", "/v1/secrets", [](RouteContext& ctx) -> Status {
    ASSIGN_OR_RETURN(auto all, ctx.manager.listSecrets());
    nlohmann::json out = nlohmann::json::array();
    for (const auto& s : all) out.push_back(secretJson(s));
    return sendJson(ctx.resp, 200, {{"secrets", out}});
  });
  r.add("DELETE", "/v1/secrets/{name}", [](RouteContext& ctx) -> Status {
    TRY(ctx.manager.removeSecret(ctx.param("name")));
    return ctx.resp.send(204, "application/json", "");
  });
}

}  // namespace space::api
