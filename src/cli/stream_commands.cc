// Commands that stream NDJSON from the daemon: exec, run, logs, template build; and the background
// process commands next to them.
#include <fmt/format.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <iterator>
#include <thread>

#include "cli/commands.h"
#include "cli/durations.h"
#include "cli/output.h"
#include "cli/template_tar.h"
#include "http/base64.h"
#include "http/url.h"

namespace space::cli {
namespace {

Status writeAll(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return sysError(errno, "write output");
    data.remove_prefix(static_cast<size_t>(n));
  }
  return ok();
}

// Splits the chunked body into lines and hands each parsed object to on_line.
class NdjsonReader {
 public:
  explicit NdjsonReader(std::function<Status(const nlohmann::json&)> on_line) : on_line_(std::move(on_line)) {}
  Status feed(std::string_view data) {
    buf_.append(data);
    size_t start = 0;
    for (size_t nl; (nl = buf_.find('\n', start)) != std::string::npos; start = nl + 1) {
      auto j = nlohmann::json::parse(buf_.substr(start, nl - start), nullptr, false);
      if (j.is_discarded()) return makeError(ErrorKind::kInternal, "the daemon sent a malformed stream line");
      TRY(on_line_(j));
    }
    buf_.erase(0, start);
    return ok();
  }

 private:
  std::function<Status(const nlohmann::json&)> on_line_;
  std::string buf_;
};

// Prints process output events (with --json, each event as the daemon sent it, one a line); returns the
// exit event when one came.
Result<std::optional<nlohmann::json>> streamProcess(Context& ctx, const std::string& method, const std::string& target,
                                                    const std::optional<std::string>& body) {
  std::optional<nlohmann::json> exit;
  std::optional<Error> stream_error;
  NdjsonReader reader([&](const nlohmann::json& line) -> Status {
    std::string type = line.value("type", "");
    if (ctx.json && (type == "started" || type == "stdout" || type == "stderr")) {
      printJson(line);
      return ok();
    }
    if (type == "stdout" || type == "stderr") {
      ASSIGN_OR_RETURN(std::string data, http::base64Decode(line.value("data", "")));
      return writeAll(type == "stdout" ? 1 : 2, data);
    }
    if (type == "exit") exit = line;
    if (type == "error") {
      auto e = line.value("error", nlohmann::json::object());
      stream_error = Error{ErrorKind::kUnavailable, 0, e.value("message", "the stream failed")};
    }
    return ok();
  });
  ASSIGN_OR_RETURN(auto resp,
                   ctx.client.stream(method, target, body, [&](std::string_view d) { return reader.feed(d); }));
  TRY(checkResponse(resp));
  if (stream_error) return tl::unexpected(*stream_error);
  return exit;
}

std::string sandboxPath(const std::string& id) { return "/v1/sandboxes/" + http::percentEncode(id); }

// The end of an exec: the exit code space returns, and with --json the final exit object carrying it.
int finishExec(const Context& ctx, nlohmann::json exit) {
  int rc = exitCodeOf(exit);
  if (exit.value("oom_killed", false)) {
    std::fflush(stdout);
    fmt::print(stderr, "killed: memory limit {} MiB\n", exit.value("memory_limit_mib", 0));
  }
  if (ctx.json) {
    exit["exit_status"] = rc;
    printJson(exit);
  }
  return rc;
}

}  // namespace

Result<nlohmann::json> execBody(const ExecOptions& o) {
  if (o.argv.empty()) return makeError(ErrorKind::kInvalidArgument, "no command given: space exec ID -- CMD [ARGS...]");
  nlohmann::json body = {{"cmd", o.argv}};
  for (const auto& e : o.env) {
    ASSIGN_OR_RETURN(auto kv, parseKeyValue("--env", e));
    body["env"][kv.first] = kv.second;
  }
  if (!o.cwd.empty()) body["cwd"] = o.cwd;
  if (!o.user.empty()) body["user"] = o.user;
  if (!o.timeout.empty()) {
    // The API's bound; 0 means none.
    ASSIGN_OR_RETURN(body["timeout_s"], durationSeconds("--timeout", o.timeout, std::chrono::hours(7 * 24)));
  }
  return body;
}

namespace {

// Signals that stop a command run in the foreground; while it runs they go to its process group.
sigset_t stopSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  return set;
}

// Blocked in every thread (the mask is inherited, so before any starts), then taken by sigwait.
void blockStopSignals() {
  sigset_t set = stopSignals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

// Ctrl-C, SIGTERM and SIGHUP go to the remote process group, as a terminal would send them; a second
// one kills it (the command may trap the first and carry on). The command's exit is then the CLI's.
void forwardStopSignals(std::shared_ptr<http::WebSocket> ws) {
  std::thread([ws] {
    sigset_t set = stopSignals();
    for (int count = 0;; ++count) {
      int sig = 0;
      if (sigwait(&set, &sig) != 0) return;
      ws->sendText(nlohmann::json{{"type", "signal"}, {"signal", count == 0 ? sig : SIGKILL}}.dump());
    }
  }).detach();
}

// Local stdin -> the process, as it arrives (a line typed, a line piped), then its end.
void forwardStdin(std::shared_ptr<http::WebSocket> ws) {
  // Detached: a blocking read(2) cannot be interrupted portably, and the CLI exits after the command.
  std::thread([ws] {
    char buf[65536];
    for (;;) {
      ssize_t n = ::read(STDIN_FILENO, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      ws->waitForRoom(1 << 20);
      ws->sendBinary(std::string(buf, static_cast<size_t>(n)));
    }
    ws->sendText(R"({"type":"eof"})");
  }).detach();
}

// The kind behind an error line's "code" ("not_found"), so that the failure gets its usual hint.
ErrorKind kindOfCode(std::string_view code) {
  for (ErrorKind k :
       {ErrorKind::kInvalidArgument, ErrorKind::kNotFound, ErrorKind::kConflict, ErrorKind::kUnauthenticated,
        ErrorKind::kResourceExhausted, ErrorKind::kUnsupported, ErrorKind::kInternal}) {
    if (code == errorKindName(k)) return k;
  }
  return ErrorKind::kUnavailable;
}

// Runs one command over the exec WebSocket (docs/api.md): output as it comes, stdin and stop signals
// forwarded; the exit code is the command's (128+signal, 124 on timeout).
int runExecSession(Context& ctx, const std::string& id, nlohmann::json body, bool interactive) {
  blockStopSignals();
  body["stdin"] = interactive;
  auto ws_or = ctx.client.websocket(sandboxPath(id) + "/exec");
  if (!ws_or) return fail(&ctx, ws_or.error());
  std::shared_ptr<http::WebSocket> ws = std::move(*ws_or);
  ws->sendText(body.dump());
  forwardStopSignals(ws);
  if (interactive) forwardStdin(ws);

  std::optional<nlohmann::json> exit;
  std::optional<Error> error;
  Status st = ws->run([&](bool binary, std::string data) {
    if (binary) {
      if (data.empty() || (data[0] != 1 && data[0] != 2)) return;
      if (ctx.json) {
        // The same events as POST .../exec streams: {"type":"stdout","data":<base64>}.
        printJson({{"type", data[0] == 1 ? "stdout" : "stderr"},
                   {"data", http::base64Encode(std::string_view(data).substr(1))}});
        return;
      }
      if (!writeAll(data[0] == 1 ? STDOUT_FILENO : STDERR_FILENO, std::string_view(data).substr(1))) ws->close();
      return;
    }
    auto j = nlohmann::json::parse(data, nullptr, false);
    if (j.is_discarded() || !j.is_object()) return;
    std::string type = j.value("type", "");
    if (ctx.json && type == "started") printJson(j);
    if (type == "exit") exit = j;
    if (type == "error") {
      auto e = j.value("error", nlohmann::json::object());
      error = Error{kindOfCode(e.value("code", "")), 0, e.value("message", "the command failed")};
      error->reason = e.value("reason", "");
    }
  });
  if (error) {
    // As shells and `docker exec` do: 127 for a program that is not there, 126 for one that cannot run.
    int rc = fail(&ctx, *error);
    int exec_rc = execFailureExitCode(*error);
    return exec_rc ? exec_rc : rc;
  }
  if (exit) return finishExec(ctx, *exit);
  if (!st) return fail(&ctx, st.error());
  return fail(&ctx, Error{ErrorKind::kUnavailable, 0, "the session ended before the process did"});
}

}  // namespace

int cmdExec(Context& ctx, const std::string& id, const ExecOptions& o) {
  auto body = execBody(o);
  if (!body) return fail(&ctx, body.error());
  return runExecSession(ctx, id, *body, o.interactive);
}

int cmdRun(Context& ctx, const CreateOptions& c, const ExecOptions& o) {
  auto create = createBody(c);
  if (!create) return fail(&ctx, create.error());
  auto exec = execBody(o);
  if (!exec) return fail(&ctx, exec.error());
  // From here a Ctrl-C is the command's to handle: one that comes while the sandbox is made waits and
  // reaches the command when it starts; the sandbox is deleted whichever way the command ends.
  blockStopSignals();
  auto sandbox = createSandbox(ctx, *create);
  if (!sandbox) return fail(&ctx, sandbox.error());
  std::string id = sandbox->value("id", "");
  if (ctx.json) printJson({{"type", "sandbox"}, {"id", id}});  // the stream's first event: which sandbox ran it
  int rc = runExecSession(ctx, id, *exec, o.interactive);
  if (auto del = callJson(ctx, "DELETE", sandboxPath(id)); !del) {
    fail(&ctx, del.error().context("delete sandbox " + id));
    if (rc == 0) rc = 1;
  }
  return rc;
}

int cmdLogs(Context& ctx, const std::string& id, const std::string& proc, bool follow) {
  auto exit = streamProcess(
      ctx, "GET", sandboxPath(id) + "/processes/" + http::percentEncode(proc) + "/logs" + (follow ? "?follow=1" : ""),
      std::nullopt);
  if (!exit) return fail(&ctx, exit.error());
  return 0;
}

int cmdPs(Context& ctx, const std::string& id) {
  auto j = callJson(ctx, "GET", sandboxPath(id) + "/processes");
  if (!j) return fail(&ctx, j.error());
  if (ctx.json) {
    printJson(*j);  // {"processes":[...]}, as every list
    return 0;
  }
  std::vector<std::vector<std::string>> rows;
  for (const auto& p : (*j)["processes"]) {
    std::string argv;
    for (const auto& a : p.value("argv", nlohmann::json::array()))
      argv += (argv.empty() ? "" : " ") + a.get<std::string>();
    std::string status = p.value("running", false)
                             ? "running"
                             : fmt::format("exited ({})", p.contains("exit") ? exitCodeOf(p["exit"]) : -1);
    rows.push_back({p.value("id", ""), std::to_string(p.value("pid", 0)), status, argv});
  }
  printTable({"ID", "PID", "STATUS", "COMMAND"}, rows);
  return 0;
}

int cmdStart(Context& ctx, const std::string& id, const ExecOptions& o) {
  auto body = execBody(o);
  if (!body) return fail(&ctx, body.error());
  body->erase("timeout_s");
  auto j = callJson(ctx, "POST", sandboxPath(id) + "/processes", *body);
  if (!j) return fail(&ctx, j.error());
  fmt::print("{}\n", ctx.json ? j->dump() : j->value("id", ""));
  return 0;
}

int cmdKill(Context& ctx, const std::string& id, const std::string& proc, const std::string& sig) {
  nlohmann::json body = {{"signal", sig.empty() ? "TERM" : sig}};
  if (!sig.empty() && std::all_of(sig.begin(), sig.end(), ::isdigit)) body["signal"] = std::stoi(sig.substr(0, 3));
  auto j = callJson(ctx, "POST", sandboxPath(id) + "/processes/" + http::percentEncode(proc) + "/signal", body);
  if (!j) return fail(&ctx, j.error());
  printResult(ctx, {{"sandbox", id}, {"process", proc}, {"signal", j->value("signal", 0)}}, "");
  return 0;
}

namespace {

// The upload for a --tar build, or for a --from-dir / --from-tar build when the daemon is on another
// host (it cannot read this machine's paths).
Result<UniqueFd> templateUploadBody(const TemplateBuildOptions& o) {
  if (!o.tar.empty()) return openTemplateTarball(o.tar);
  if (!o.from_tar.empty()) return openTemplateTarball(o.from_tar);
  fmt::print(stderr, "packing {} for the daemon at another host\n", o.from_dir);
  return packTemplateDir(o.from_dir);
}

}  // namespace

int cmdTemplateBuild(Context& ctx, const TemplateBuildOptions& o) {
  int sources = !o.debootstrap.empty() + !o.from_dir.empty() + !o.from_tar.empty() + !o.tar.empty();
  if (sources != 1) {
    fmt::print(stderr,
               "space: give exactly one of --debootstrap SUITE, --from-dir DIR, --from-tar FILE, --tar FILE|-\n");
    return 2;
  }
  bool upload = !o.tar.empty() || (!ctx.client.endpoint().is_unix && o.debootstrap.empty());
  nlohmann::json body = {{"name", o.name}};
  if (!o.debootstrap.empty()) {
    body["kind"] = "debootstrap";
    body["suite"] = o.debootstrap;
    if (!o.variant.empty()) body["variant"] = o.variant;
    if (!o.mirror.empty()) body["mirror"] = o.mirror;
    if (!o.packages.empty()) {
      nlohmann::json pkgs = nlohmann::json::array();
      size_t start = 0;
      while (start <= o.packages.size()) {
        size_t comma = o.packages.find(',', start);
        if (comma == std::string::npos) comma = o.packages.size();
        if (comma > start) pkgs.push_back(o.packages.substr(start, comma - start));
        start = comma + 1;
      }
      body["packages"] = pkgs;
    }
  } else if (!upload) {
    // The daemon reads the path on its own host: make it absolute here, where it was typed.
    std::string path = o.from_dir.empty() ? o.from_tar : o.from_dir;
    if (!path.empty() && path[0] != '/') {
      char cwd[4096];
      if (getcwd(cwd, sizeof cwd)) path = std::string(cwd) + "/" + path;
    }
    body["kind"] = o.from_dir.empty() ? "tar" : "dir";
    body["path"] = path;
  }
  std::optional<nlohmann::json> done;
  std::vector<std::string> warnings;
  std::optional<Error> failed;
  NdjsonReader reader([&](const nlohmann::json& line) -> Status {
    std::string type = line.value("type", "");
    if (type == "progress") fmt::print(stderr, "{}\n", line.value("line", ""));
    if (type == "done") {
      done = line.value("template", nlohmann::json::object());
      for (const auto& w : line.value("warnings", nlohmann::json::array()))
        if (w.is_string()) warnings.push_back(w.get<std::string>());
    }
    if (type == "error")
      failed = Error{ErrorKind::kInternal, 0,
                     line.value("error", nlohmann::json::object()).value("message", "build failed")};
    return ok();
  });
  auto sink = [&](std::string_view d) { return reader.feed(d); };
  Result<http::ClientResponse> resp = makeError(ErrorKind::kInternal, "no request made");
  if (upload) {
    auto tar = templateUploadBody(o);
    if (!tar) return fail(&ctx, tar.error());
    struct stat st {};
    if (::fstat(tar->get(), &st) != 0) return fail(&ctx, sysError(errno, "stat the tarball").value());
    off_t at = ::lseek(tar->get(), 0, SEEK_CUR);
    uint64_t length = static_cast<uint64_t>(st.st_size - (at > 0 ? at : 0));
    fmt::print(stderr, "uploading {} MiB\n", length >> 20);
    int fd = tar->get();
    resp = ctx.client.upload(
        "PUT", "/v1/templates/" + http::percentEncode(o.name) + "/archive", length,
        [&](char* out, size_t max) -> Result<size_t> {
          ssize_t n;
          do n = ::read(fd, out, max);
          while (n < 0 && errno == EINTR);
          if (n < 0) return sysError(errno, "read the tarball");
          return static_cast<size_t>(n);
        },
        sink);
  } else {
    resp = ctx.client.stream("POST", "/v1/templates", body.dump(), sink);
  }
  if (!resp) return fail(&ctx, resp.error());
  if (auto st = checkResponse(*resp); !st) return fail(&ctx, st.error());
  if (failed) return fail(&ctx, *failed);
  if (!done) return fail(&ctx, Error{ErrorKind::kUnavailable, 0, "the build stream ended without a result"});
  for (const auto& w : warnings) fmt::print(stderr, "space: warning: {}\n", w);
  fmt::print("{}\n", ctx.json ? done->dump() : done->value("name", o.name));
  return 0;
}

}  // namespace space::cli
