#include "runtime/jail/launch.h"

#include <fcntl.h>
#include <linux/close_range.h>
#include <linux/mount.h>
#include <linux/sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <sstream>

#include "runtime/jail/inside/handshake.h"
#include "sys/mount_api.h"
#include "sys/process.h"

namespace space::jail {

namespace {

// Async-signal-safe error report from the stub: "error pre-exec <errno> <what>".
void stubFail(int sync_fd, const char* what) {
  int err = errno;
  char buf[96] = "error pre-exec ";
  size_t len = std::strlen(buf);
  char digits[12];
  int nd = 0;
  do digits[nd++] = static_cast<char>('0' + err % 10), err /= 10;
  while (err > 0 && nd < 11);
  while (nd > 0) buf[len++] = digits[--nd];
  buf[len++] = ' ';
  for (const char* p = what; *p && len < sizeof buf - 1; ++p) buf[len++] = *p;
  (void)!write(sync_fd, buf, len);
  _exit(127);
}

[[noreturn]] void preExecStub(int agent_fd, int sync_fd, int listen_fd, int stdio_fd, char* const argv[]) {
  // This copy of spaced holds every descriptor spaced had, the host's end of sync_fd included, so a
  // spaced killed before the go byte would never be seen as EOF: die with the launching thread instead
  // (it lives until the go byte is sent). Cleared after it: the sandbox's init must outlive that thread
  // (forks start children on threads that end), and from the go byte on it is in the sandbox's cgroup,
  // where a restarted spaced finds it.
  (void)syscall(SYS_prctl, PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
  char go = 0;
  ssize_t n;
  do n = read(sync_fd, &go, 1);
  while (n < 0 && errno == EINTR);
  if (n != 1 || go != kGoByte) _exit(126);  // the host gave up on us
  (void)syscall(SYS_prctl, PR_SET_PDEATHSIG, 0, 0, 0, 0);
  // Raw syscalls: glibc's set*id wrappers broadcast to all threads, and its bookkeeping is a copy of
  // spaced's multi-threaded state here. We are the only thread.
  if (syscall(SYS_setgroups, 0, nullptr) < 0) stubFail(sync_fd, "setgroups(0)");
  if (syscall(SYS_setresgid, 0, 0, 0) < 0) stubFail(sync_fd, "setresgid(0)");
  if (syscall(SYS_setresuid, 0, 0, 0) < 0) stubFail(sync_fd, "setresuid(0)");
  // The agent (PID 1) starts with a clean signal slate.
  sys::resetSignalsForExec();
  if (dup2(stdio_fd, 0) < 0 || dup2(stdio_fd, 1) < 0 || dup2(stdio_fd, 2) < 0) stubFail(sync_fd, "dup2 stdio");
  // Whatever spaced had open without O_CLOEXEC stays behind.
  if (syscall(SYS_close_range, 3, ~0U, CLOSE_RANGE_CLOEXEC) < 0) stubFail(sync_fd, "close_range");
  if (fcntl(sync_fd, F_SETFD, 0) < 0 || fcntl(listen_fd, F_SETFD, 0) < 0) stubFail(sync_fd, "fcntl");
  char* const envp[] = {nullptr};
  syscall(SYS_execveat, agent_fd, "", argv, envp, AT_EMPTY_PATH);
  stubFail(sync_fd, "execveat space-agent");
  _exit(127);
}

Status detach(const std::string& path) {
  // EINVAL: not a mount point (any more); ENOENT: gone. Both are the state we want.
  for (int i = 0; i < 16; ++i) {
    if (umount2(path.c_str(), MNT_DETACH | UMOUNT_NOFOLLOW) < 0) {
      if (errno == EINVAL || errno == ENOENT) return ok();
      return sysError(errno, "umount2({}, MNT_DETACH)", path);
    }
  }
  return ok();
}

}  // namespace

Result<AgentChild> spawnAgentChild(int agent_binary_fd, int child_sync_fd, int listen_fd, int stdio_fd) {
  // Everything the child needs is prepared here: the stub must not allocate.
  std::string sync_arg = std::to_string(child_sync_fd);
  std::string listen_arg = std::to_string(listen_fd);
  char name[] = "space-agent";
  char flag[] = "--jail-init";
  char* const argv[] = {name, flag, sync_arg.data(), listen_arg.data(), nullptr};
  uint64_t flags = CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_PIDFD;
  ASSIGN_OR_RETURN(sys::Clone3Result child, sys::clone3Fork(flags));
  if (child.pid == 0) preExecStub(agent_binary_fd, child_sync_fd, listen_fd, stdio_fd, argv);
  return AgentChild{child.pid, std::move(child.pidfd)};
}

Status buildRootfs(pid_t userns_pid, const std::string& template_rootfs, const std::string& dir) {
  std::string ns_path = fmt::format("/proc/{}/ns/user", userns_pid);
  UniqueFd userns(open(ns_path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!userns) return sysError(errno, "open {}", ns_path);
  ASSIGN_OR_RETURN(UniqueFd tree, sys::openTreeClone(template_rootfs, /*recursive=*/true));
  // Read-only and idmapped: the template is shared by every sandbox and must never change (J19); through
  // the idmap its root-owned files belong to this sandbox's root. nosuid/nodev: no setuid binary or device
  // node of the template works inside.
  TRY(sys::mountSetattr(tree.get(), MOUNT_ATTR_IDMAP | MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
                        userns.get())
          .map_error([&](Error e) { return e.context("idmap template " + template_rootfs); }));
  TRY(sys::moveMountTo(tree.get(), dir + "/lower"));
  // The layers are named through descriptors: overlayfs shows its options in every mountinfo inside, and
  // /proc/self/fd/N says nothing of where SPACE keeps its state on the host (J27).
  UniqueFd lower(open((dir + "/lower").c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  UniqueFd upper(open((dir + "/disk/upper").c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  UniqueFd work(open((dir + "/disk/work").c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!lower || !upper || !work) return sysError(errno, "open the layers of {}", dir);
  std::string options = fmt::format("lowerdir=/proc/self/fd/{},upperdir=/proc/self/fd/{},workdir=/proc/self/fd/{}",
                                    lower.get(), upper.get(), work.get());
  std::string target = dir + "/rootfs";
  // noatime: a read inside must not write the layer (rolling history after exec compares its write
  // counter; JailRuntime::writeGeneration).
  if (mount("overlay", target.c_str(), "overlay", MS_NOSUID | MS_NODEV | MS_NOATIME, options.c_str()) < 0)
    return sysError(errno, "mount overlay at {} (layers of {})", target, dir);
  return ok();
}

void unmountHostCopies(const std::string& dir) {
  (void)detach(dir + "/rootfs");
  (void)detach(dir + "/lower");
  (void)detach(dir + "/disk");
}

Result<uint64_t> processStartTime(pid_t pid) {
  std::ifstream in(fmt::format("/proc/{}/stat", pid));
  std::string stat;
  if (!std::getline(in, stat)) return sysError(ENOENT, "read /proc/{}/stat", pid);
  // comm (field 2) may contain spaces and parentheses: parse after the last ')'.
  auto close = stat.rfind(')');
  if (close == std::string::npos) return sysError(EINVAL, "parse /proc/{}/stat", pid);
  std::istringstream rest(stat.substr(close + 2));
  std::string field;
  // rest starts at field 3 (state); start time is field 22.
  for (int i = 3; i < 22; ++i) rest >> field;
  uint64_t start = 0;
  rest >> start;
  if (!rest) return sysError(EINVAL, "parse start time in /proc/{}/stat", pid);
  return start;
}

}  // namespace space::jail
