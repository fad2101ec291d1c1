#include "archive/kek_command.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>

#include "common/hex.h"
#include "common/unique_fd.h"
#include "crypto/aes_gcm.h"
#include "sys/pipe.h"

extern char** environ;

namespace space::archive {
namespace {

constexpr size_t kMaxOutputBytes = 64 * 1024;
constexpr int kTimeoutMs = 60'000;

struct Output {
  std::string out, err;
  int status = 0;
};

// Runs argv with input on stdin; collects stdout and stderr (bounded) until both close, then reaps.
Result<Output> runWithInput(const std::vector<std::string>& argv, const std::vector<std::string>& extra_env,
                            std::string_view input) {
  ASSIGN_OR_RETURN(sys::Pipe in, sys::makePipe());
  ASSIGN_OR_RETURN(sys::Pipe out, sys::makePipe());
  ASSIGN_OR_RETURN(sys::Pipe err, sys::makePipe());
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<std::string> env_storage = extra_env;
  std::vector<char*> envp;
  for (auto& e : env_storage) envp.push_back(e.data());
  for (char** e = environ; e && *e; ++e) {
    std::string_view var(*e);
    if (var.starts_with("SPACE_KEK_ID=") || var.starts_with("SPACE_KEK_CONTEXT=")) continue;
    envp.push_back(*e);
  }
  envp.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in.read.get(), 0);
  posix_spawn_file_actions_adddup2(&actions, out.write.get(), 1);
  posix_spawn_file_actions_adddup2(&actions, err.write.get(), 2);
  pid_t pid = 0;
  int rc = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return sysError(rc, "run key command {}", argv[0]);
  in.read.reset();
  out.write.reset();
  err.write.reset();

  // The input is a key or a wrapped key (a few hundred bytes), below the pipe's capacity: one write does
  // not block even when the command never reads.
  Output result;
  // A command that exits without reading would raise SIGPIPE: block it on this thread for the write and
  // discard it, rather than change the process-wide disposition under the daemon.
  sigset_t pipe_only, old_mask;
  sigemptyset(&pipe_only);
  sigaddset(&pipe_only, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_only, &old_mask);
  std::string_view rest = input;
  bool broken = false;
  while (!rest.empty()) {
    ssize_t w = write(in.write.get(), rest.data(), rest.size());
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) {
      broken = errno == EPIPE;
      break;  // the command closed stdin early; its exit status tells the rest
    }
    rest.remove_prefix(static_cast<size_t>(w));
  }
  if (broken && !sigismember(&old_mask, SIGPIPE)) {
    timespec zero{};
    sigtimedwait(&pipe_only, nullptr, &zero);
  }
  pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  in.write.reset();

  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kTimeoutMs);
  bool timed_out = false;
  while (out.read || err.read) {
    pollfd fds[2] = {{out.read.get(), POLLIN, 0}, {err.read.get(), POLLIN, 0}};
    int left = static_cast<int>(
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count());
    if (left <= 0) {
      timed_out = true;
      break;
    }
    int n = poll(fds, 2, left);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      UniqueFd& fd = i == 0 ? out.read : err.read;
      std::string& sink = i == 0 ? result.out : result.err;
      char buf[4096];
      ssize_t r = read(fd.get(), buf, sizeof buf);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) {
        fd.reset();
        continue;
      }
      if (sink.size() + static_cast<size_t>(r) > kMaxOutputBytes) {
        kill(pid, SIGKILL);
        waitpid(pid, nullptr, 0);
        return makeError(ErrorKind::kInvalidArgument, "key command {} wrote more than {} bytes", argv[0],
                         kMaxOutputBytes);
      }
      sink.append(buf, static_cast<size_t>(r));
    }
  }
  if (timed_out) kill(pid, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out)
    return makeError(ErrorKind::kUnavailable, "key command {} did not finish within {} s", argv[0], kTimeoutMs / 1000);
  result.status = status;
  return result;
}

std::string describeFailure(const std::string& program, const std::string& op, const Output& o) {
  std::string why = WIFEXITED(o.status) ? fmt::format("exit status {}", WEXITSTATUS(o.status))
                                        : fmt::format("signal {}", WTERMSIG(o.status));
  std::string err = o.err.substr(0, 512);
  while (!err.empty() && (err.back() == '\n' || err.back() == '\r')) err.pop_back();
  return fmt::format("key command {} {} failed ({}){}{}", program, op, why, err.empty() ? "" : ": ", err);
}

class CommandKek final : public Kek {
 public:
  CommandKek(std::vector<std::string> argv, std::string id) : argv_(std::move(argv)), id_(std::move(id)) {}
  const std::string& id() const override { return id_; }

  Result<std::string> wrap(std::string_view dek, std::string_view context) const override {
    ASSIGN_OR_RETURN(auto o, run("wrap", dek, context));
    if (o.out.empty()) return makeError(ErrorKind::kInternal, "key command {} wrap returned nothing", argv_[0]);
    return o.out;
  }
  Result<std::string> unwrap(std::string_view wrapped, std::string_view context) const override {
    ASSIGN_OR_RETURN(auto o, run("unwrap", wrapped, context));
    if (o.out.size() != crypto::kAesKeyBytes)
      return makeError(ErrorKind::kUnauthenticated, "key command {} unwrap returned {} bytes, not a 32-byte key",
                       argv_[0], o.out.size());
    return o.out;
  }

 private:
  Result<Output> run(const std::string& op, std::string_view input, std::string_view context) const {
    auto argv = argv_;
    argv.push_back(op);
    std::vector<std::string> env = {"SPACE_KEK_ID=" + id_, "SPACE_KEK_CONTEXT=" + toHex(context)};
    ASSIGN_OR_RETURN(auto o, runWithInput(argv, env, input));
    if (!WIFEXITED(o.status) || WEXITSTATUS(o.status) != 0) {
      // A refusal to unwrap is what a wrong key looks like through a KMS.
      return makeError(op == "unwrap" ? ErrorKind::kUnauthenticated : ErrorKind::kInternal,
                       describeFailure(argv_[0], op, o));
    }
    return o;
  }

  std::vector<std::string> argv_;
  std::string id_;
};

}  // namespace

Result<std::unique_ptr<Kek>> makeCommandKek(std::vector<std::string> argv, std::string key_id) {
  return std::make_unique<CommandKek>(std::move(argv), std::move(key_id));
}

}  // namespace space::archive
