#include "sys/host_command.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <deque>
#include <string_view>

#include "common/unique_fd.h"

extern char** environ;

namespace space::sys {
namespace {

// spaced may run with a minimal PATH (systemd); debootstrap and its helpers live in sbin.
constexpr const char* kToolPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
constexpr size_t kTailLines = 8;        // lines of output quoted in an error
constexpr size_t kMaxLineBytes = 4096;  // a longer line is passed on in pieces

// The child: killed and reaped if the caller gives up before it exits, so no zombie or stray builder lingers.
class Child {
 public:
  explicit Child(pid_t pid) : pid_(pid) {}
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  ~Child() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      (void)wait();
    }
  }
  // Waits for exit; returns the raw wait status.
  Result<int> wait() {
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0) {
      if (errno != EINTR) return sysError(errno, "waitpid {}", pid_);
    }
    pid_ = -1;
    return status;
  }

 private:
  pid_t pid_;
};

// The environment of the child: ours (proxy settings reach debootstrap), with a PATH that finds the
// tools and the C locale so messages parse the same everywhere.
std::vector<std::string> childEnvironment() {
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) {
    std::string_view v(*e);
    if (v.starts_with("PATH=") || v.starts_with("LC_ALL=") || v.starts_with("LANG=")) continue;
    env.emplace_back(v);
  }
  env.emplace_back(kToolPath);
  env.emplace_back("LC_ALL=C");
  return env;
}

std::vector<char*> pointers(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

std::string describeExit(int status) {
  if (WIFEXITED(status)) return fmt::format("exit status {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return fmt::format("killed by signal {}", WTERMSIG(status));
  return fmt::format("wait status {:#x}", status);
}

}  // namespace

Status runCommand(const std::vector<std::string>& argv_in, const LineFn& on_line) {
  if (argv_in.empty()) return makeError(ErrorKind::kInternal, "runCommand: empty argv");
  const std::string& tool = argv_in[0];

  int fds[2];
  // O_CLOEXEC: a command spawned by another thread at the same moment must not inherit our pipe, or our
  // read would wait for that unrelated process to exit.
  if (::pipe2(fds, O_CLOEXEC) != 0) return sysError(errno, "pipe2 for {}", tool);
  UniqueFd read_end(fds[0]);
  UniqueFd write_end(fds[1]);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, write_end.get(), STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, write_end.get(), STDERR_FILENO);

  // posix_spawnp would search spaced's own PATH, which may lack the sbin directories: resolve here.
  std::string resolved = tool;
  if (tool.find('/') == std::string::npos) {
    for (std::string_view dir : {"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"}) {
      std::string candidate = fmt::format("{}/{}", dir, tool);
      if (::access(candidate.c_str(), X_OK) == 0) {
        resolved = candidate;
        break;
      }
    }
  }

  std::vector<std::string> argv_copy = argv_in;
  std::vector<std::string> env = childEnvironment();
  auto argv = pointers(argv_copy);
  auto envp = pointers(env);
  pid_t pid = -1;
  int rc = ::posix_spawn(&pid, resolved.c_str(), &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return sysError(rc, "spawn {}", tool);
  Child child(pid);
  write_end.reset();  // only the child writes now: EOF arrives when it (and its children) exit

  std::deque<std::string> tail;
  auto emit = [&](std::string line) {
    if (on_line) on_line(line);
    tail.push_back(std::move(line));
    if (tail.size() > kTailLines) tail.pop_front();
  };
  std::string pending;
  char buf[8192];
  for (;;) {
    ssize_t n = ::read(read_end.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return sysError(errno, "read output of {}", tool);
    if (n == 0) break;
    pending.append(buf, static_cast<size_t>(n));
    size_t start = 0;
    for (size_t nl; (nl = pending.find('\n', start)) != std::string::npos; start = nl + 1) {
      emit(pending.substr(start, nl - start));
    }
    pending.erase(0, start);
    while (pending.size() > kMaxLineBytes) {
      emit(pending.substr(0, kMaxLineBytes));
      pending.erase(0, kMaxLineBytes);
    }
  }
  if (!pending.empty()) emit(pending);

  ASSIGN_OR_RETURN(int status, child.wait());
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return ok();
  std::string last;
  for (const auto& l : tail) last += (last.empty() ? "" : " | ") + l;
  return makeError(ErrorKind::kInternal, "{} failed ({}): {}", tool, describeExit(status),
                   last.empty() ? "no output" : last);
}

Status runTool(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  // An empty environment and stdout to /dev/null: mkfs needs nothing of spaced, and its chatter is noise.
  char* const envp[] = {const_cast<char*>("PATH=/usr/sbin:/usr/bin:/sbin:/bin"), nullptr};
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  pid_t pid;
  int rc = posix_spawnp(&pid, args[0], &fa, nullptr, args.data(), envp);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return sysError(rc, "spawn {}", argv[0]);
  int status = 0;
  if (waitpid(pid, &status, 0) < 0) return sysError(errno, "waitpid {}", argv[0]);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return makeError(ErrorKind::kInternal, "{} failed (status {:#x})", argv[0], status);
  return ok();
}

}  // namespace space::sys
