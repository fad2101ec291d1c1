#include "api/api_server.h"

#include <unistd.h>

#include "api/errors.h"
#include "api/logging.h"
#include "api/routes/routes.h"
#include "api/validate.h"

namespace space::api {

uint64_t hostMemoryBytes() {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? uint64_t(pages) * uint64_t(page) : (1ull << 40);
}

ApiServer::ApiServer(core::SandboxManager& manager, ApiOptions options) : manager_(manager), options_(options) {
  if (options_.host_memory_bytes == 0) options_.host_memory_bytes = hostMemoryBytes();
  // Literal segments before parameters: /files/stat must not be taken for a file operation on "stat".
  registerSystemRoutes(router_);
  registerSandboxRoutes(router_);
  registerExecRoutes(router_);
  registerProcessRoutes(router_);
  registerPtyRoutes(router_);
  registerFileRoutes(router_);
  registerTemplateRoutes(router_);
  registerKeyRoutes(router_);
  registerNetworkRoutes(router_);
}

namespace {

// Liveness answers without a key (api/openapi.yaml marks it `security: []`): probes and load balancers
// carry none, and the answer reveals nothing.
bool isPublicRoute(const http::Request& req) { return req.method == "GET" && req.path == "/healthz"; }

}  // namespace

Status ApiServer::authenticate(const http::Request& req) {
  if (req.trusted || isPublicRoute(req)) return ok();
  auto auth = req.header("authorization");
  constexpr std::string_view kBearer = "Bearer ";
  if (!auth || auth->size() <= kBearer.size() || std::string_view(*auth).substr(0, kBearer.size()) != kBearer) {
    return makeError(
        ErrorKind::kUnauthenticated,
        "missing 'Authorization: Bearer <api key>' (create a key with 'space key create NAME' on the daemon's host)");
  }
  auto key = manager_.store().verifyApiKey(auth->substr(kBearer.size()));
  if (!key) return makeError(ErrorKind::kUnauthenticated, "invalid or revoked API key");
  return ok();
}

namespace {

// Which check applies to each {param} of a route pattern.
Status checkParams(const std::map<std::string, std::string>& params) {
  for (const auto& [name, value] : params) {
    if (name == "id")
      TRY(checkName("sandbox id", value));
    else if (name == "pid")
      TRY(checkName("process id", value));
    else if (name == "name")
      TRY(checkName("template name", value));
    else if (name == "key")
      TRY(checkName("key id", value));
    else
      TRY(checkName(name, value));
  }
  return ok();
}

}  // namespace

void ApiServer::handle(http::Request& req, http::BodyReader& body, http::ResponseWriter& resp) {
  std::string route_name = "unmatched";
  try {
    if (auto auth = authenticate(req); !auth) {
      metrics_.countRejection("unauthenticated");
      (void)sendError(resp, auth.error());
      metrics_.countRequest(req.method, route_name, resp.status());
      return;
    }
    req.authenticated = true;
    auto match = router_.match(req.method, req.path);
    if (!match.route) {
      metrics_.countRejection(match.path_known ? "method_not_allowed" : "unknown_route");
      if (match.path_known) {
        (void)sendError(resp, 405, "method_not_allowed",
                        fmt::format("{} is not allowed on this path", req.method.substr(0, 16)));
      } else {
        (void)sendError(resp, 404, "not_found", "no such API route (see api/openapi.yaml)");
      }
      metrics_.countRequest(req.method.size() <= 16 ? req.method : "other", route_name, resp.status());
      return;
    }
    route_name = match.route->pattern;
    RouteContext ctx{req, body, resp, manager_, metrics_, options_, std::move(match.params)};
    Status st = checkParams(ctx.params);
    if (st) st = match.route->handler(ctx);
    if (!st) {
      const Error& err = st.error();
      if (!resp.started()) {
        int status = ctx.error_status ? ctx.error_status : httpStatus(err);
        std::string code = status == 413 ? "payload_too_large" : status == 403 ? "forbidden" : errorKindName(err.kind);
        if (status >= 400 && status < 500) metrics_.countRejection(code);
        if (status >= 500)
          logJson(spdlog::level::warn, "request failed",
                  {{"route", route_name}, {"status", status}, {"error", err.message}});
        nlohmann::json body = errorJson(code, err.message, err.reason);
        if (!err.resource.empty()) body["error"]["resource"] = err.resource;  // what was not found
        (void)sendJson(resp, status, body);
      } else if (resp.status() != 408) {  // the server's own answer to a body that stopped arriving (counted there)
        logJson(spdlog::level::info, "stream ended early", {{"route", route_name}, {"error", err.message}});
      }
    }
  } catch (const std::exception& e) {
    // Only a bug gets here (handlers return errors); answer and keep serving.
    logJson(spdlog::level::err, "handler threw", {{"route", route_name}, {"what", e.what()}});
    if (!resp.started()) (void)sendError(resp, 500, "internal", "internal error");
  }
  metrics_.countRequest(req.method, route_name, resp.status());
}

}  // namespace space::api
