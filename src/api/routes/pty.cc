// Interactive terminal: GET /v1/sandboxes/{id}/pty upgrades to a WebSocket. Binary messages carry terminal
// bytes both ways; text messages carry JSON control ({"type":"resize"}); the server ends with a text
// {"type":"exit",...} and closes.
#include <atomic>
#include <csignal>
#include <thread>

#include "api/errors.h"
#include "api/metrics.h"
#include "api/ndjson.h"
#include "api/routes/routes.h"
#include "api/validate.h"

namespace space::api {
namespace {

// Output queued for a slow client, beyond which the pump waits (and the agent's credits stop the process).
constexpr size_t kMaxQueuedOutput = 1 << 20;

}  // namespace

Result<agent::ExecRequest> parsePtyQuery(const http::Request& req) {
  agent::ExecRequest out;
  out.pty = true;
  out.stdin_open = true;
  std::string cmd = "/bin/sh";
  std::vector<std::string> args;
  for (const auto& [key, value] : req.query) {
    if (key == "cmd") {
      if (value.empty() || value.size() > 4096)
        return makeError(ErrorKind::kInvalidArgument, "cmd must name a program, e.g. cmd=/bin/bash");
      cmd = value;
    } else if (key == "arg") {
      if (args.size() >= 256) return makeError(ErrorKind::kInvalidArgument, "too many arg parameters");
      args.push_back(value);
    } else if (key == "rows") {
      ASSIGN_OR_RETURN(int64_t rows, parseQueryInt("rows", value, 1, 1000));
      out.rows = static_cast<uint16_t>(rows);
    } else if (key == "cols") {
      ASSIGN_OR_RETURN(int64_t cols, parseQueryInt("cols", value, 1, 1000));
      out.cols = static_cast<uint16_t>(cols);
    } else if (key == "cwd") {
      TRY(checkSandboxPath("cwd", value));
      out.cwd = value;
    } else if (key == "user") {
      TRY(checkName("user", value));
      out.user = value;
    } else if (key == "env") {
      size_t eq = value.find('=');
      if (eq == std::string::npos || eq == 0) return makeError(ErrorKind::kInvalidArgument, "env must be KEY=VALUE");
      out.env[value.substr(0, eq)] = value.substr(eq + 1);
    } else {
      return makeError(ErrorKind::kInvalidArgument,
                       "unknown query parameter '{}' (allowed: cmd, arg, rows, cols, cwd, user, env)",
                       key.substr(0, 64));
    }
  }
  out.argv.push_back(cmd);
  for (auto& a : args) out.argv.push_back(std::move(a));
  if (!out.env.count("TERM")) out.env["TERM"] = "xterm-256color";
  return out;
}

Result<PtyControl> parsePtyControl(std::string_view text) {
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_discarded() && j.is_object() && j.size() == 1 && j.value("type", "") == "eof") {
    return PtyControl{PtyControl::Kind::kEof};
  }
  if (j.is_discarded() || !j.is_object() || !j.contains("type") || j["type"] != "resize") {
    return makeError(ErrorKind::kInvalidArgument,
                     "control message must be {\"type\":\"resize\",\"rows\":N,\"cols\":N} or {\"type\":\"eof\"}");
  }
  PtyControl rc;
  for (const char* key : {"rows", "cols"}) {
    if (!j.contains(key) || !j[key].is_number_integer() || j[key].get<int64_t>() < 1 || j[key].get<int64_t>() > 1000) {
      return makeError(ErrorKind::kInvalidArgument, "{} must be an integer from 1 to 1000", key);
    }
  }
  rc.rows = static_cast<uint16_t>(j["rows"].get<int>());
  rc.cols = static_cast<uint16_t>(j["cols"].get<int>());
  return rc;
}

void registerPtyRoutes(Router& r) {
  r.add("GET", "/v1/sandboxes/{id}/pty", [](RouteContext& ctx) -> Status {
    if (!ctx.resp.isWebSocketUpgrade()) {
      return makeError(ErrorKind::kInvalidArgument, "this route needs a WebSocket upgrade (e.g. 'space shell ID')");
    }
    ASSIGN_OR_RETURN(auto request, parsePtyQuery(ctx.req));
    ASSIGN_OR_RETURN(auto agent, ctx.manager.agent(ctx.param("id")));
    ASSIGN_OR_RETURN(std::unique_ptr<agent::ExecStream> stream, agent->exec(request));
    ASSIGN_OR_RETURN(auto ws, ctx.resp.acceptWebSocket());

    std::atomic<bool> ended{false};
    // The pump owns the sandbox -> client direction; run() below owns client -> sandbox.
    std::thread pump([&] {
      for (;;) {
        auto ev = stream->next();
        if (!ev) {
          nlohmann::json line = errorJson(errorKindName(ev.error().kind), ev.error().message);
          line["type"] = "error";
          ws->sendText(line.dump());
          break;
        }
        if (ev->kind == agent::ExecEvent::Kind::kExit) {
          ws->sendText(exitJson(ev->exit).dump());
          break;
        }
        ws->waitForRoom(kMaxQueuedOutput);
        ws->sendBinary(std::move(ev->data));
      }
      ended = true;
      ws->close();
    });
    Status st = ws->run([&](bool binary, std::string data) {
      if (binary) {
        (void)stream->writeStdin(data);
        return;
      }
      auto rc = parsePtyControl(data);
      if (!rc) {
        ctx.metrics.countRejection("invalid_pty_control");
        return;
      }
      if (rc->kind == PtyControl::Kind::kEof) {
        (void)stream->closeStdin();
        return;
      }
      (void)stream->resize(rc->rows, rc->cols);
    });
    // The terminal went away first: end the process so that the pump sees its exit.
    if (!ended) (void)stream->signal(SIGKILL);
    pump.join();
    return ok();
  });
}

}  // namespace space::api
