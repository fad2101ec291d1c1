// space shell: an interactive terminal in a sandbox over the PTY WebSocket. The local terminal goes raw
// for the session and is restored on every way out.
#include <fmt/format.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "cli/commands.h"
#include "http/url.h"

namespace space::cli {
namespace {

std::pair<int, int> terminalSize() {
  struct winsize ws {};
  if (::ioctl(STDIN_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_row > 0 && ws.ws_col > 0) return {ws.ws_row, ws.ws_col};
  return {24, 80};
}

Result<std::vector<std::string>> shellArgv(const ShellOptions& o) {
  std::vector<std::string> argv = o.argv;
  if (argv.empty()) {
    // --cmd names one program, as the API's cmd= does; a command line would be looked up as one name.
    if (o.program.find_first_of(" \t") != std::string::npos) {
      return makeError(ErrorKind::kInvalidArgument,
                       "--cmd '{}' names one program; give arguments after --: space shell ID -- {}", o.program,
                       o.program);
    }
    argv.push_back(o.program.empty() ? "/bin/sh" : o.program);
  }
  return argv;
}

}  // namespace

Result<std::string> shellTarget(const std::string& id, const ShellOptions& o, int rows, int cols) {
  ASSIGN_OR_RETURN(std::vector<std::string> argv, shellArgv(o));
  std::string target =
      fmt::format("/v1/sandboxes/{}/pty?cmd={}", http::percentEncode(id), http::percentEncode(argv[0]));
  for (size_t i = 1; i < argv.size(); ++i) target += "&arg=" + http::percentEncode(argv[i]);
  return target + fmt::format("&rows={}&cols={}", rows, cols);
}

int cmdShell(Context& ctx, const std::string& id, const ShellOptions& o) {
  // Input that is not a terminal (`echo ls | space shell ID`, a script redirected in) has a real end,
  // which a terminal cannot pass on: a PTY's only end of input is the EOF character, and a shell's line
  // editor may take that as a keystroke and wait on. So the command runs on pipes, as `space exec -i`
  // runs it, and ends when its input does: what `kubectl exec -it` does when stdin is not a TTY.
  if (!::isatty(STDIN_FILENO)) {
    auto argv = shellArgv(o);
    if (!argv) {
      fmt::print(stderr, "space: {}\n", argv.error().message);
      return 2;
    }
    ExecOptions exec;
    exec.argv = std::move(*argv);
    exec.interactive = true;
    return cmdExec(ctx, id, exec);
  }
  auto [rows, cols] = terminalSize();
  auto target = shellTarget(id, o, rows, cols);
  if (!target) {
    fmt::print(stderr, "space: {}\n", target.error().message);
    return 2;
  }
  // SIGWINCH is taken by a waiting thread; blocked before any thread starts so that all inherit it.
  sigset_t winch;
  sigemptyset(&winch);
  sigaddset(&winch, SIGWINCH);
  pthread_sigmask(SIG_BLOCK, &winch, nullptr);

  auto ws_or = ctx.client.websocket(*target);
  if (!ws_or) return fail(&ctx, ws_or.error());
  std::shared_ptr<http::WebSocket> ws = std::move(*ws_or);

  bool tty = ::isatty(STDIN_FILENO);
  struct termios saved {};
  if (tty && ::tcgetattr(STDIN_FILENO, &saved) == 0) {
    struct termios raw = saved;
    ::cfmakeraw(&raw);
    ::tcsetattr(STDIN_FILENO, TCSANOW, &raw);
  }
  auto restore = [&] {
    if (tty) ::tcsetattr(STDIN_FILENO, TCSANOW, &saved);
  };

  std::thread([&ws, winch] {
    for (;;) {
      int sig = 0;
      if (sigwait(&winch, &sig) != 0) return;
      auto [r, c] = terminalSize();
      ws->sendText(fmt::format(R"({{"type":"resize","rows":{},"cols":{}}})", r, c));
    }
  }).detach();
  // Reads stdin for the whole process lifetime: a blocking read(2) cannot be interrupted portably, and
  // the process exits right after the session anyway.
  std::thread([session = ws] {
    auto& ws = session;
    char buf[4096];
    for (;;) {
      ssize_t n = ::read(STDIN_FILENO, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      ws->sendBinary(std::string(buf, static_cast<size_t>(n)));
    }
    // The local terminal is gone (hung up): the session ends with the CLI, which SIGHUP ends too.
  }).detach();

  int exit_code = -1;
  std::string error;
  Status st = ws->run([&](bool binary, std::string data) {
    if (binary) {
      std::string_view rest = data;
      while (!rest.empty()) {
        ssize_t n = ::write(STDOUT_FILENO, rest.data(), rest.size());
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        rest.remove_prefix(static_cast<size_t>(n));
      }
      return;
    }
    auto j = nlohmann::json::parse(data, nullptr, false);
    if (j.is_discarded() || !j.is_object()) return;
    if (j.value("type", "") == "exit") exit_code = exitCodeOf(j);
    if (j.value("type", "") == "error")
      error = j.value("error", nlohmann::json::object()).value("message", "session failed");
  });
  restore();
  if (!error.empty()) return fail(&ctx, Error{ErrorKind::kUnavailable, 0, error});
  if (!st) return fail(&ctx, st.error());
  if (exit_code < 0)
    return fail(&ctx, Error{ErrorKind::kUnavailable, 0, "the terminal session ended without an exit status"});
  return exit_code;
}

}  // namespace space::cli
