// Foreground exec: POST /v1/sandboxes/{id}/exec -> chunked NDJSON, one line per agent event.
#include <signal.h>

#include <cerrno>
#include <csignal>
#include <thread>

#include "api/errors.h"
#include "api/json_input.h"
#include "api/ndjson.h"
#include "api/routes/routes.h"
#include "api/validate.h"

namespace space::api {

namespace {

// The fields every way of starting a process shares: the command, its environment, where and as whom.
Status parseProcessFields(const JsonInput& in, agent::ExecRequest& req) {
  ASSIGN_OR_RETURN(auto cmd, in.stringArray("cmd", 4096));
  ASSIGN_OR_RETURN(auto shell, in.string("shell", 256 * 1024));
  if (cmd.has_value() == shell.has_value()) {
    return makeError(ErrorKind::kInvalidArgument,
                     "give exactly one of cmd (an argv array) or shell (a string for /bin/sh -c)");
  }
  if (cmd) {
    if (cmd->empty() || (*cmd)[0].empty())
      return makeError(ErrorKind::kInvalidArgument, "cmd must name a program: [\"ls\", \"-l\"]");
    req.argv = std::move(*cmd);
  } else {
    req.argv = {"/bin/sh", "-c", std::move(*shell)};
  }
  ASSIGN_OR_RETURN(req.env, in.stringMap("env", 256));
  for (const auto& [k, v] : req.env) {
    if (k.empty() || k.find('=') != std::string::npos)
      return makeError(ErrorKind::kInvalidArgument, "env name '{}' is not valid", k.substr(0, 64));
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
  return ok();
}

Status parseTimeout(const JsonInput& in, agent::ExecRequest& req) {
  ASSIGN_OR_RETURN(auto timeout, in.number("timeout_s"));
  if (timeout) {
    if (!(*timeout >= 0) || *timeout > 7 * 24 * 3600)
      return makeError(ErrorKind::kInvalidArgument, "timeout_s must be from 0 (none) to 604800");
    req.timeout_s = *timeout;
  }
  return ok();
}

// How often a stream whose process is quiet looks whether its client is still there.
constexpr agent::Duration kClientCheckInterval{500};

// The next agent event, or an error once the client went away: a process that writes nothing would
// otherwise run on unwatched until its next write fails.
Result<agent::ExecEvent> nextWhileClientStays(agent::ExecStream& stream, http::ResponseWriter& resp, bool* gone) {
  for (;;) {
    auto ev = stream.next(kClientCheckInterval);
    if (ev || ev.error().sys_errno != ETIMEDOUT) return ev;
    if (resp.peerGone()) {
      *gone = true;
      return makeError(ErrorKind::kUnavailable, "the client went away");
    }
  }
}

}  // namespace

Result<ExecCommand> parseExec(std::string_view body, bool foreground) {
  // Two named lists: an initializer_list chosen by ?: would point at arrays that die with the expression.
  static const std::initializer_list<std::string_view> kForegroundFields = {"cmd",  "shell", "env",      "cwd",
                                                                            "user", "stdin", "timeout_s"};
  static const std::initializer_list<std::string_view> kBackgroundFields = {"cmd", "shell", "env", "cwd", "user"};
  ASSIGN_OR_RETURN(auto in, JsonInput::parse(body, foreground ? kForegroundFields : kBackgroundFields));
  ExecCommand out;
  TRY(parseProcessFields(in, out.request));
  if (foreground) {
    ASSIGN_OR_RETURN(out.stdin_data, in.string("stdin", 1 << 20));
    out.request.stdin_open = out.stdin_data.has_value();
    TRY(parseTimeout(in, out.request));
  }
  return out;
}

Result<agent::ExecRequest> parseExecSessionRequest(std::string_view text) {
  ASSIGN_OR_RETURN(auto in, JsonInput::parse(text, {"cmd", "shell", "env", "cwd", "user", "stdin", "timeout_s"}));
  agent::ExecRequest req;
  TRY(parseProcessFields(in, req));
  ASSIGN_OR_RETURN(auto stdin_open, in.boolean("stdin"));
  req.stdin_open = stdin_open.value_or(false);
  TRY(parseTimeout(in, req));
  return req;
}

Result<ExecControl> parseExecControl(std::string_view text) {
  ASSIGN_OR_RETURN(auto in, JsonInput::parse(text, {"type", "signal"}));
  ASSIGN_OR_RETURN(auto type, in.string("type", 16));
  if (type == "eof" && !in.has("signal")) return ExecControl{ExecControl::Kind::kEof};
  if (type == "signal" && in.has("signal")) {
    // The same names and numbers as POST .../processes/{pid}/signal.
    ASSIGN_OR_RETURN(int signo, parseSignalBody(nlohmann::json{{"signal", in.raw()["signal"]}}.dump()));
    return ExecControl{ExecControl::Kind::kSignal, signo};
  }
  return makeError(ErrorKind::kInvalidArgument,
                   "control message must be {\"type\":\"eof\"} or {\"type\":\"signal\",\"signal\":\"INT\"}");
}

// A SIGKILL while the sandbox's OOM kill counter went up is the memory limit's doing: the exit line says
// so, with the limit, so that clients can report "killed: memory limit 64 MiB" rather than a bare 137.
// Another process of the sandbox killed for memory at the same moment would be taken for this one; the
// kernel offers no per-process record to tell them apart. A VM's counter is its guest kernel's, which
// only its agent reads: the agent then says so in the exit itself.
void markOomKill(RouteContext& ctx, std::optional<uint64_t> oom_before, const agent::ExitStatus& exit,
                 nlohmann::json& exit_line) {
  if (exit.signal != SIGKILL) return;
  if (!exit.oom_killed) {
    if (!oom_before) return;
    auto after = ctx.manager.oomKills(ctx.param("id"));
    if (!after || *after <= *oom_before) return;
  }
  exit_line["oom_killed"] = true;
  if (auto view = ctx.manager.get(ctx.param("id")); view && view->record.spec.contains("limits"))
    exit_line["memory_limit_mib"] = view->record.spec["limits"].value("memory_bytes", uint64_t{0}) >> 20;
}

void registerExecRoutes(Router& r) {
  registerExecSessionRoute(r);
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
    bool client_gone = false;
    if (st)
      st = streamEvents(
          ctx.resp, [&] { return nextWhileClientStays(*stream, ctx.resp, &client_gone); },
          [&](const agent::ExitStatus& exit, nlohmann::json& exit_line) {
            markOomKill(ctx, oom_before, exit, exit_line);
          });
    if (st) st = ctx.resp.end();
    // The client is gone: nobody will read the rest. The agent signals the whole process group.
    if (!st || client_gone) (void)stream->signal(SIGKILL);
    if (feeder.joinable()) feeder.join();
    // After the exit went out: the rolling history (after_exec) looks at the files on its own thread.
    ctx.manager.execFinished(ctx.param("id"));
    return st;
  });
}

}  // namespace space::api
