// Foreground exec: POST /v1/sandboxes/{id}/exec -> chunked NDJSON, one line per agent event.
#include <signal.h>

#include <thread>

#include "api/errors.h"
#include "api/json_input.h"
#include "api/ndjson.h"
#include "api/routes/routes.h"
#include "api/validate.h"

namespace space::api {

Result<ExecCommand> parseExec(std::string_view body, bool foreground) {
  // Two named lists: an initializer_list chosen by ?: would point at arrays that die with the expression.
  static const std::initializer_list<std::string_view> kForegroundFields = {"cmd", "shell", "env", "cwd", "user", "stdin", "timeout_s"};
  static const std::initializer_list<std::string_view> kBackgroundFields = {"cmd", "shell", "env", "cwd", "user"};
  ASSIGN_OR_RETURN(auto in, JsonInput::parse(body, foreground ? kForegroundFields : kBackgroundFields));
  ExecCommand out;
  auto& req = out.request;
  ASSIGN_OR_RETURN(auto cmd, in.stringArray("cmd", 4096));
  ASSIGN_OR_RETURN(auto shell, in.string("shell", 256 * 1024));
  if (cmd.has_value() == shell.has_value()) {
    return makeError(ErrorKind::kInvalidArgument, "give exactly one of cmd (an argv array) or shell (a string for /bin/sh -c)");
  }
  if (cmd) {
    if (cmd->empty() || (*cmd)[0].empty()) return makeError(ErrorKind::kInvalidArgument, "cmd must name a program: [\"ls\", \"-l\"]");
    req.argv = std::move(*cmd);
  } else {
    req.argv = {"/bin/sh", "-c", std::move(*shell)};
  }
  ASSIGN_OR_RETURN(req.env, in.stringMap("env", 256));
  for (const auto& [k, v] : req.env) {
    if (k.empty() || k.find('=') != std::string::npos) return makeError(ErrorKind::kInvalidArgument, "env name '{}' is not valid", k.substr(0, 64));
  }
  ASSIGN_OR_RETURN(auto cwd, in.string("cwd", 4096));
  if (cwd) {
    TRY(checkSandboxPath("cwd", *cwd));
    req.cwd = *cwd;
  }
  ASSIGN_OR_RETURN(auto user, in.string("user", 64));
  if (user) {
    TRY(checkName("user", *user));
    req.user = *user;
  }
  if (foreground) {
    ASSIGN_OR_RETURN(out.stdin_data, in.string("stdin", 1 << 20));
    req.stdin_open = out.stdin_data.has_value();
    ASSIGN_OR_RETURN(auto timeout, in.number("timeout_s"));
    if (timeout) {
      if (!(*timeout >= 0) || *timeout > 7 * 24 * 3600) return makeError(ErrorKind::kInvalidArgument, "timeout_s must be from 0 (none) to 604800");
      req.timeout_s = *timeout;
    }
  }
  return out;
}

namespace {

// A SIGKILL while the sandbox's OOM kill counter went up is the memory limit's doing: the exit line says
// so, with the limit, so that clients can report "killed: memory limit 64 MiB" rather than a bare 137.
// Another process of the sandbox killed for memory at the same moment would be taken for this one; the
// kernel offers no per-process record to tell them apart.
void markOomKill(RouteContext& ctx, std::optional<uint64_t> oom_before, nlohmann::json& exit_line) {
  if (!oom_before || exit_line.value("signal", 0) != SIGKILL) return;
  auto after = ctx.manager.oomKills(ctx.param("id"));
  if (!after || *after <= *oom_before) return;
  exit_line["oom_killed"] = true;
  if (auto view = ctx.manager.get(ctx.param("id")); view && view->record.spec.contains("limits"))
    exit_line["memory_limit_mib"] = view->record.spec["limits"].value("memory_bytes", uint64_t{0}) >> 20;
}

}  // namespace

void registerExecRoutes(Router& r) {
  r.add("POST", "/v1/sandboxes/{id}/exec", [](RouteContext& ctx) -> Status {
    ASSIGN_OR_RETURN(std::string body, ctx.jsonBody());
    ASSIGN_OR_RETURN(auto cmd, parseExec(body, true));
    ASSIGN_OR_RETURN(auto agent, ctx.manager.agent(ctx.param("id")));
    std::optional<uint64_t> oom_before;
    if (auto n = ctx.manager.oomKills(ctx.param("id"))) oom_before = *n;
    ASSIGN_OR_RETURN(std::unique_ptr<agent::ExecStream> stream, agent->exec(cmd.request));
    // stdin goes in from its own thread: a process that writes a lot before reading its input would
    // otherwise wait on us while we wait on it.
    std::thread feeder;
    if (cmd.stdin_data) {
      feeder = std::thread([&stream, data = std::move(*cmd.stdin_data)] {
        if (stream->writeStdin(data)) (void)stream->closeStdin();
      });
    }
    Status st = ctx.resp.beginStream(200, "application/x-ndjson", std::nullopt);
    if (st) st = ctx.resp.write(ndjsonLine({{"type", "started"}, {"pid", stream->pid()}}));
    if (st) st = streamEvents(ctx.resp, [&] { return stream->next(); },
                              [&](nlohmann::json& exit_line) { markOomKill(ctx, oom_before, exit_line); });
    if (st) st = ctx.resp.end();
    if (!st) (void)stream->signal(9);  // the client is gone: nobody will read the rest
    if (feeder.joinable()) feeder.join();
    // After the exit went out: the rolling history (after_exec) looks at the files on its own thread.
    ctx.manager.execFinished(ctx.param("id"));
    return st;
  });
}

}  // namespace space::api
