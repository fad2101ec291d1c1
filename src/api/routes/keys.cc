// API keys for TCP clients. Managing keys needs the unix socket: a leaked key must not mint more keys.
#include "api/errors.h"
#include "api/json_input.h"
#include "api/routes/routes.h"
#include "api/validate.h"
#include "common/ids.h"

namespace space::api {
namespace {

nlohmann::json keyJson(const store::ApiKeyRecord& k) {
  return {
      {"id", k.id}, {"name", k.name}, {"prefix", k.prefix}, {"created_ms", k.created_ms}, {"revoked_ms", k.revoked_ms}};
}

Status requireLocal(RouteContext& ctx) {
  if (ctx.req.trusted) return ok();
  ctx.error_status = 403;
  return makeError(ErrorKind::kUnauthenticated,
                   "API keys can be managed only over the unix socket, on the daemon's host");
}

}  // namespace

Result<std::string> parseCreateKey(std::string_view body) {
  ASSIGN_OR_RETURN(auto in, JsonInput::parse(body, {"name"}));
  ASSIGN_OR_RETURN(auto name, in.string("name", 64));
  if (!name) return makeError(ErrorKind::kInvalidArgument, "name is required");
  TRY(checkName("key name", *name));
  return *name;
}

void registerKeyRoutes(Router& r) {
  r.add("POST", "/v1/keys", [](RouteContext& ctx) -> Status {
    TRY(requireLocal(ctx));
    ASSIGN_OR_RETURN(std::string body, ctx.jsonBody());
    ASSIGN_OR_RETURN(std::string name, parseCreateKey(body));
    ASSIGN_OR_RETURN(auto created, ctx.manager.store().createApiKey(name));
    nlohmann::json j = keyJson(created.first);
    j["secret"] = created.second;
    return sendJson(ctx.resp, 201, j);
  });
  r.add("GET", "/v1/keys", [](RouteContext& ctx) -> Status {
    TRY(requireLocal(ctx));
    ASSIGN_OR_RETURN(auto keys, ctx.manager.store().listApiKeys());
    nlohmann::json out = nlohmann::json::array();
    for (const auto& k : keys) out.push_back(keyJson(k));
    return sendJson(ctx.resp, 200, {{"keys", out}});
  });
  // Snapshot key rotation (docs/snapshot-archive.md): every tenant's data key, wrapped by
  // snapshot_kek_previous, is rewrapped by snapshot_kek. No chunk or archive is touched.
  r.add("POST", "/v1/keys/rotate", [](RouteContext& ctx) -> Status {
    TRY(requireLocal(ctx));
    ASSIGN_OR_RETURN(std::string body, ctx.jsonBody());
    TRY(JsonInput::parse(body, {}));
    ASSIGN_OR_RETURN(size_t rewrapped, ctx.manager.rotateKeys());
    return sendJson(ctx.resp, 200, {{"rewrapped", rewrapped}});
  });
  // Revoked keys are kept (listed, refused) until purged: {"older_than_s": N} keeps those revoked less
  // than N seconds ago.
  r.add("POST", "/v1/keys/purge", [](RouteContext& ctx) -> Status {
    TRY(requireLocal(ctx));
    ASSIGN_OR_RETURN(std::string body, ctx.jsonBody());
    ASSIGN_OR_RETURN(auto in, JsonInput::parse(body, {"older_than_s"}));
    ASSIGN_OR_RETURN(auto older, in.integer("older_than_s"));
    if (older && (*older < 0 || *older > 100ll * 365 * 24 * 3600))
      return makeError(ErrorKind::kInvalidArgument, "older_than_s must be from 0 to 3153600000");
    ASSIGN_OR_RETURN(size_t purged, ctx.manager.store().purgeRevokedApiKeys(nowUnixMs() - older.value_or(0) * 1000));
    return sendJson(ctx.resp, 200, {{"purged", purged}});
  });
  r.add("DELETE", "/v1/keys/{key}", [](RouteContext& ctx) -> Status {
    TRY(requireLocal(ctx));
    TRY(ctx.manager.store().revokeApiKey(ctx.param("key")));
    return ctx.resp.send(204, "application/json", "");
  });
}

}  // namespace space::api
