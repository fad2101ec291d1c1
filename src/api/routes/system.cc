// GET /healthz, GET /metrics, GET /v1/node
#include "api/errors.h"
#include "api/metrics.h"
#include "api/routes/routes.h"

namespace space::api {

void registerSystemRoutes(Router& r) {
  r.add("GET", "/healthz", [](RouteContext& ctx) -> Status {
    return sendJson(ctx.resp, 200, {{"status", "ok"}});
  });
  // What this node offers: the isolation tiers, their accelerator (with what is known of KVM) and
  // capabilities, and whether egress is on.
  r.add("GET", "/v1/node", [](RouteContext& ctx) -> Status {
    return sendJson(ctx.resp, 200, {{"isolation", ctx.manager.isolationInfo()}, {"egress", ctx.manager.egressInfo()}});
  });
  r.add("GET", "/metrics", [](RouteContext& ctx) -> Status {
    std::string text = ctx.metrics.text() + ctx.manager.metricsText();
    return ctx.resp.send(200, "text/plain; version=0.0.4", text);
  });
}

}  // namespace space::api
