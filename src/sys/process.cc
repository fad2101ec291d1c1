#include "sys/process.h"

#include <linux/sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>

namespace space::sys {

Result<Clone3Result> clone3Fork(uint64_t flags) {
  int pidfd = -1;
  clone_args args;
  std::memset(&args, 0, sizeof args);
  args.flags = flags;
  // The kernel writes the new pidfd through this pointer (CLONE_PIDFD); it must be a valid int*.
  args.pidfd = reinterpret_cast<uint64_t>(&pidfd);
  args.exit_signal = SIGCHLD;
  long rc = syscall(SYS_clone3, &args, sizeof args);
  if (rc < 0) return sysError(errno, "clone3(flags={:#x})", flags);
  Clone3Result out;
  out.pid = static_cast<pid_t>(rc);
  if (rc > 0 && (flags & CLONE_PIDFD)) out.pidfd.reset(pidfd);
  return out;
}

Result<UniqueFd> pidfdOpen(pid_t pid) {
  long fd = syscall(SYS_pidfd_open, pid, 0);
  if (fd < 0) return sysError(errno, "pidfd_open({})", pid);
  return UniqueFd(static_cast<int>(fd));
}

Status pidfdSendSignal(int pidfd, int signo) {
  if (syscall(SYS_pidfd_send_signal, pidfd, signo, nullptr, 0) < 0)
    return sysError(errno, "pidfd_send_signal(sig={})", signo);
  return ok();
}

void resetSignalsForExec() {
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) (void)sigaction(sig, &dfl, nullptr);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
}

}  // namespace space::sys
