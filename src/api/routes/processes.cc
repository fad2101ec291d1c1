// Background processes: start, list, signal, logs (NDJSON like exec, optionally following).
#include "api/errors.h"
#include "api/json_input.h"
#include "api/ndjson.h"
#include "api/routes/routes.h"
#include "api/validate.h"

namespace space::api {
namespace {

nlohmann::json processJson(const agent::ProcessInfo& p) {
  nlohmann::json j = {{"id", p.id},
                      {"pid", p.pid},
                      {"argv", p.argv},
                      {"running", p.running},
                      {"output_bytes", p.output_bytes},
                      {"started_unix_ms", p.started_unix_ms}};
  if (!p.running) j["exit"] = exitJson(p.exit);
  return j;
}

}  // namespace

Result<int> parseSignalBody(std::string_view body) {
  ASSIGN_OR_RETURN(auto in, JsonInput::parse(body, {"signal"}));
  if (!in.has("signal")) return 15;
  const auto& v = in.raw()["signal"];
  if (v.is_string()) return parseSignal(v.get<std::string>());
  if (v.is_number_integer()) {
    int64_t n = v.get<int64_t>();
    if (n >= 1 && n <= 64) return static_cast<int>(n);
  }
  return makeError(ErrorKind::kInvalidArgument, "signal must be a name like \"TERM\" or a number from 1 to 64");
}

void registerProcessRoutes(Router& r) {
  r.add("POST", "/v1/sandboxes/{id}/processes", [](RouteContext& ctx) -> Status {
    ASSIGN_OR_RETURN(std::string body, ctx.jsonBody());
    ASSIGN_OR_RETURN(auto cmd, parseExec(body, false));
    ASSIGN_OR_RETURN(auto agent, ctx.manager.agent(ctx.param("id")));
    ASSIGN_OR_RETURN(auto info, agent->startBackground(cmd.request));
    return sendJson(ctx.resp, 201, processJson(info));
  });
  r.add("GET", "/v1/sandboxes/{id}/processes", [](RouteContext& ctx) -> Status {
    ASSIGN_OR_RETURN(auto agent, ctx.manager.agent(ctx.param("id")));
    ASSIGN_OR_RETURN(auto list, agent->listProcesses());
    nlohmann::json out = nlohmann::json::array();
    for (const auto& p : list) out.push_back(processJson(p));
    return sendJson(ctx.resp, 200, {{"processes", out}});
  });
  r.add("POST", "/v1/sandboxes/{id}/processes/{pid}/signal", [](RouteContext& ctx) -> Status {
    ASSIGN_OR_RETURN(std::string body, ctx.jsonBody());
    ASSIGN_OR_RETURN(int signo, parseSignalBody(body));
    ASSIGN_OR_RETURN(auto agent, ctx.manager.agent(ctx.param("id")));
    TRY(about("process", agent->signalProcess(ctx.param("pid"), signo)));
    return sendJson(ctx.resp, 200, {{"signal", signo}});
  });
  r.add("GET", "/v1/sandboxes/{id}/processes/{pid}/logs", [](RouteContext& ctx) -> Status {
    bool follow = false;
    if (auto f = ctx.req.queryValue("follow")) {
      ASSIGN_OR_RETURN(follow, parseFlag("follow", *f));
    }
    ASSIGN_OR_RETURN(auto agent, ctx.manager.agent(ctx.param("id")));
    ASSIGN_OR_RETURN(std::unique_ptr<agent::OutputReader> reader,
                     about("process", agent->readOutput(ctx.param("pid"), follow)));
    TRY(ctx.resp.beginStream(200, "application/x-ndjson", std::nullopt));
    TRY(streamEvents(ctx.resp, [&] { return reader->next(); }));
    return ctx.resp.end();
  });
}

}  // namespace space::api
