#include "agent/server/spawn.h"

#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

namespace space::agent {
namespace {

// Shared between parent and child: the child runs on the parent's memory until execve or _exit, and
// the parent is suspended meanwhile (CLONE_VFORK), so plain fields are enough.
struct ChildArgs {
  const SpawnSpec* spec;
  char* const* argv;
  char* const* envp;
  const char* const* candidates;
  size_t ncandidates;
  int err;
  const char* step;
};

// The child stack. The agent is single-threaded and CLONE_VFORK keeps the parent suspended until the
// child has exec'd or exited, so one stack is never used twice at once.
alignas(64) char g_child_stack[128 * 1024];

[[noreturn]] void childFail(ChildArgs* a, const char* step) {
  a->err = errno;
  a->step = step;
  _exit(127);
}

// Runs in the child. Only async-signal-safe calls: the child shares the agent's memory.
int childMain(void* arg) {
  auto* a = static_cast<ChildArgs*>(arg);
  const SpawnSpec& s = *a->spec;
  if (setsid() < 0) childFail(a, "setsid");
  // Sources are >= 3 (the agent keeps 0-2 occupied), so these dup2 calls never clobber each other.
  if (dup2(s.stdin_fd, 0) < 0 || dup2(s.stdout_fd, 1) < 0 || dup2(s.stderr_fd, 2) < 0) childFail(a, "dup2");
  if (s.controlling_tty && ioctl(0, TIOCSCTTY, 0) < 0) childFail(a, "ioctl TIOCSCTTY");
  // Every agent fd is O_CLOEXEC already; closing the rest here also covers fds someone forgot.
  if (close_range(3, ~0U, 0) < 0) childFail(a, "close_range");
  if (s.set_user) {
    if (setgroups(s.groups.size(), s.groups.data()) < 0) childFail(a, "setgroups");
    if (setgid(s.gid) < 0) childFail(a, "setgid");
    if (setuid(s.uid) < 0) childFail(a, "setuid");
  }
  if (chdir(s.cwd.c_str()) < 0 && (!s.cwd_fallback_to_root || chdir("/") < 0)) childFail(a, "chdir");
  // Dispositions set to SIG_IGN survive execve; the agent ignores several as PID 1.
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig != SIGKILL && sig != SIGSTOP) sigaction(sig, &dfl, nullptr);
  }
  sigset_t empty;
  sigemptyset(&empty);
  sigprocmask(SIG_SETMASK, &empty, nullptr);
  int first_err = ENOENT;
  for (size_t i = 0; i < a->ncandidates; ++i) {
    execve(a->candidates[i], a->argv, a->envp);
    // Like execvp: keep searching after ENOENT/ENOTDIR, remember EACCES to report it.
    if (errno != ENOENT && errno != ENOTDIR) first_err = errno;
    if (errno != ENOENT && errno != ENOTDIR && errno != EACCES) break;
  }
  errno = first_err;
  childFail(a, "execve");
}

// A program that could not be executed, told apart from every other failure to start (a missing cwd or
// user is also ENOENT) so that clients can answer as shells do: 127 when it is not there, 126 when it
// is there but cannot run.
Error execFailure(int err, const std::string& program) {
  Error e = clientSysError(err, "execve {}", program).value();
  if (err == ENOENT || err == ENOTDIR) {
    e.message = fmt::format("{}: command not found", program);
    e.reason = "executable_not_found";
  } else if (err == EACCES || err == ENOEXEC || err == EISDIR || err == EPERM) {
    e.kind = ErrorKind::kInvalidArgument;
    e.message = fmt::format("{}: cannot execute: {}", program, describeErrno(err));
    e.reason = "not_executable";
  }
  return e;
}

std::vector<char*> cStrings(const std::vector<std::string>& v) {
  std::vector<char*> out;
  out.reserve(v.size() + 1);
  for (const auto& s : v) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

}  // namespace

std::vector<std::string> executableCandidates(const std::string& argv0, const std::string& path_env) {
  if (argv0.find('/') != std::string::npos) return {argv0};
  std::vector<std::string> out;
  std::string path = path_env.empty() ? "/usr/local/bin:/usr/bin:/bin" : path_env;
  size_t i = 0;
  while (i <= path.size()) {
    size_t j = path.find(':', i);
    if (j == std::string::npos) j = path.size();
    std::string dir = path.substr(i, j - i);
    if (dir.empty()) dir = ".";
    out.push_back(dir + "/" + argv0);
    i = j + 1;
  }
  return out;
}

Result<pid_t> spawnChild(const SpawnSpec& spec) {
  if (spec.argv.empty()) return makeError(ErrorKind::kInvalidArgument, "empty argv");
  std::vector<char*> argv = cStrings(spec.argv);
  std::vector<char*> envp = cStrings(spec.env);
  std::vector<const char*> candidates;
  for (const auto& c : spec.candidates) candidates.push_back(c.c_str());
  ChildArgs args{&spec, argv.data(), envp.data(), candidates.data(), candidates.size(), 0, nullptr};
  // clone(2) via glibc: fn runs on the given stack top; CLONE_VM shares memory, CLONE_VFORK suspends
  // us until the child execs or exits; SIGCHLD is the exit signal so waitpid sees a normal child.
  pid_t pid = clone(childMain, g_child_stack + sizeof g_child_stack, CLONE_VM | CLONE_VFORK | SIGCHLD, &args);
  if (pid < 0) return sysError(errno, "clone for {}", spec.argv[0]);
  if (args.step != nullptr) {
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (std::strcmp(args.step, "execve") == 0) return tl::unexpected(execFailure(args.err, spec.argv[0]));
    std::string what = std::strcmp(args.step, "chdir") == 0 ? spec.cwd : std::string();
    return clientSysError(args.err, "{} {}", args.step, what);
  }
  return pid;
}

}  // namespace space::agent
