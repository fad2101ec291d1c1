// GET /healthz, GET /metrics, GET /v1/node, POST /v1/node/drain
#include "api/errors.h"
#include "api/json_input.h"
#include "api/metrics.h"
#include "api/routes/routes.h"

namespace space::api {

void registerSystemRoutes(Router& r) {
  r.add("GET", "/healthz", [](RouteContext& ctx) -> Status { return sendJson(ctx.resp, 200, {{"status", "ok"}}); });
  // What this node offers: the isolation tiers, their accelerator (with what is known of KVM) and
  // capabilities, and whether egress is on.
  r.add("GET", "/v1/node", [](RouteContext& ctx) -> Status {
    return sendJson(ctx.resp, 200, {{"isolation", ctx.manager.isolationInfo()}, {"egress", ctx.manager.egressInfo()}});
  });
  // Takes the node out of service (the operator's, over the unix socket only): new creates and forks get
  // 503, the pools are emptied, and with delete_sandboxes every sandbox goes; a stop then leaves nothing.
  r.add("POST", "/v1/node/drain", [](RouteContext& ctx) -> Status {
    if (!ctx.req.trusted) {
      ctx.error_status = 403;
      return makeError(ErrorKind::kUnauthenticated, "a node can be drained only over the unix socket, on its host");
    }
    ASSIGN_OR_RETURN(std::string body, ctx.jsonBody());
    ASSIGN_OR_RETURN(auto in, JsonInput::parse(body, {"delete_sandboxes"}));
    ASSIGN_OR_RETURN(auto del, in.boolean("delete_sandboxes"));
    ASSIGN_OR_RETURN(auto out, ctx.manager.drain(del.value_or(false)));
    return sendJson(ctx.resp, 200, out);
  });
  r.add("GET", "/metrics", [](RouteContext& ctx) -> Status {
    std::string text = ctx.metrics.text() + ctx.manager.metricsText();
    return ctx.resp.send(200, "text/plain; version=0.0.4", text);
  });
}

}  // namespace space::api
