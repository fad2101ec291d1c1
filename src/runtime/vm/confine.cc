#include "runtime/vm/confine.h"

#include <fcntl.h>
#include <linux/close_range.h>
#include <linux/sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <cstring>
#include <set>

#include "sys/path.h"
#include "sys/process.h"

extern char** environ;

namespace space::vm {
namespace {

using sys::parentOf;
using sys::realPath;

struct StubFailure {
  int step;
  int err;
};

// The pre-exec stub's steps run over plain C strings prepared by spaced: after clone3 in a
// multi-threaded process only async-signal-safe code may run (no allocation, no locks).
struct CStep {
  MountStep::Kind kind;
  const char* a;
  const char* b;
  dev_t rdev;
};

[[noreturn]] void fail(int report_fd, int step) {
  StubFailure f{step, errno};
  (void)!write(report_fd, &f, sizeof f);
  _exit(127);
}

Status runHostSide(const VmmJail& jail, pid_t pid) { return jail.before_exec ? jail.before_exec(pid) : ok(); }

}  // namespace

Result<std::vector<MountStep>> planVmmRoot(const VmmJail& jail) {
  std::vector<MountStep> steps;
  std::set<std::string> made;  // directories already made under the root
  const std::string& root = jail.root_dir;
  auto mkdirs = [&](const std::string& dir) {
    std::vector<std::string> chain;
    for (std::string d = dir; d != "/" && !made.count(d); d = parentOf(d)) chain.push_back(d);
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
      steps.push_back({MountStep::kMkdir, root + *it, ""});
      made.insert(*it);
    }
  };
  auto bind = [&](const std::string& host_path, bool read_only) -> Status {
    ASSIGN_OR_RETURN(std::string real, realPath(host_path));
    struct stat st;
    if (stat(real.c_str(), &st) < 0) return sysError(errno, "stat {}", real);
    if (S_ISDIR(st.st_mode)) {
      mkdirs(real);
    } else {
      mkdirs(parentOf(real));
      steps.push_back({MountStep::kTouch, root + real, ""});
    }
    steps.push_back({read_only ? MountStep::kBindReadOnly : MountStep::kBind, real, root + real});
    return ok();
  };
  // Debian's merged /usr: the loader and libraries are found through these links.
  TRY(bind("/usr", true));
  for (const char* link : {"bin", "sbin", "lib", "lib64"}) {
    std::string target = std::string("usr/") + link;
    if (access(("/usr/" + std::string(link)).c_str(), F_OK) == 0)
      steps.push_back({MountStep::kSymlink, target, root + "/" + link});
  }
  for (const auto& p : jail.read_only) TRY(bind(p, true));
  for (const auto& p : jail.writable) TRY(bind(p, false));
  mkdirs("/dev");
  // The root tmpfs is nodev; the VMM's device nodes live on a tmpfs of their own, read-only once filled.
  steps.push_back({MountStep::kDevTmpfs, root + "/dev", ""});
  for (const auto& d : jail.devices) {
    steps.push_back({MountStep::kTouch, root + d, ""});
    steps.push_back({MountStep::kBindReadOnly, d, root + d});
  }
  if (jail.kvm) {
    struct stat st;
    if (stat("/dev/kvm", &st) < 0) return sysError(errno, "stat /dev/kvm");
    if (!S_ISCHR(st.st_mode)) return makeError(ErrorKind::kUnsupported, "/dev/kvm is not a character device");
    steps.push_back({MountStep::kCharDevice, root + "/dev/kvm", "", st.st_rdev});
  }
  steps.push_back({MountStep::kRemountReadOnly, root + "/dev", ""});
  mkdirs("/proc");
  return steps;
}

Result<QemuProcess> launchConfinedQemu(const QemuSpec& spec, const VmmJail& jail) {
  if (jail.uid == 0 || jail.gid == 0) return makeError(ErrorKind::kInvalidArgument, "the VMM may not run as root");
  ASSIGN_OR_RETURN(std::vector<MountStep> plan, planVmmRoot(jail));
  VmPaths paths = VmPaths::in(spec.dir);
  unlink(paths.qmp.c_str());
  unlink(paths.agent.c_str());
  if (chown(spec.dir.c_str(), jail.uid, jail.gid) < 0) return sysError(errno, "chown {}", spec.dir);

  std::vector<std::string> argv = buildQemuArgv(spec);
  argv.insert(argv.end(), {"-sandbox", kQemuSandboxArg});
  ASSIGN_OR_RETURN(std::string qemu_path, findQemuBinary(argv[0]));
  std::vector<char*> cargv;
  for (auto& s : argv) cargv.push_back(s.data());
  cargv.push_back(nullptr);
  std::vector<CStep> csteps;
  for (auto& s : plan) csteps.push_back({s.kind, s.a.c_str(), s.b.c_str(), s.rdev});
  const char* root = jail.root_dir.c_str();

  UniqueFd devnull(open("/dev/null", O_RDONLY | O_CLOEXEC));
  UniqueFd log(open(paths.log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640));
  if (!devnull || !log) return sysError(errno, "open {}", paths.log);
  int go_pipe[2], report_pipe[2];
  if (pipe2(go_pipe, O_CLOEXEC) < 0) return sysError(errno, "pipe");
  UniqueFd go_read(go_pipe[0]), go_write(go_pipe[1]);
  if (pipe2(report_pipe, O_CLOEXEC) < 0) return sysError(errno, "pipe");
  UniqueFd report_read(report_pipe[0]), report_write(report_pipe[1]);
  // The inherited descriptors are first moved above the numbers they get in the VMM, so that placing
  // one never overwrites the other.
  UniqueFd memory_high, tap_high;
  if (jail.memory_fd >= 0) {
    memory_high = UniqueFd(fcntl(jail.memory_fd, F_DUPFD_CLOEXEC, 16));
    if (!memory_high) return sysError(errno, "dup memory descriptor");
  }
  if (jail.tap_fd >= 0) {
    tap_high = UniqueFd(fcntl(jail.tap_fd, F_DUPFD_CLOEXEC, 16));
    if (!tap_high) return sysError(errno, "dup tap descriptor");
  }
  int memory_fd = memory_high ? memory_high.get() : -1;
  int tap_fd = tap_high ? tap_high.get() : -1;
  uid_t uid = jail.uid;
  gid_t gid = jail.gid;

  ASSIGN_OR_RETURN(sys::Clone3Result child,
                   sys::clone3Fork(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_PIDFD));
  if (child.pid == 0) {
    int rfd = report_write.get();
    int step = -1;
    // This copy of spaced must see spaced's death while it waits for the go byte: its own copy of the
    // pipe's write end goes (else the read below never ends), and it dies with the launching thread
    // until the exec. Left waiting, it would hold every descriptor spaced had — its API socket too.
    close(go_write.get());
    (void)syscall(SYS_prctl, PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    if (syscall(SYS_setsid) < 0) fail(rfd, step);
    // Nothing mounted below propagates back to the host.
    if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) < 0) fail(rfd, step);
    if (mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m") < 0) fail(rfd, step);
    for (step = 0; step < static_cast<int>(csteps.size()); ++step) {
      const CStep& s = csteps[static_cast<size_t>(step)];
      switch (s.kind) {
        case MountStep::kMkdir:
          if (mkdir(s.a, 0755) < 0 && errno != EEXIST) fail(rfd, step);
          break;
        case MountStep::kTouch: {
          int fd = open(s.a, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
          if (fd < 0) fail(rfd, step);
          close(fd);
          break;
        }
        case MountStep::kSymlink:
          if (symlink(s.a, s.b) < 0) fail(rfd, step);
          break;
        case MountStep::kDevTmpfs:
          if (mount("tmpfs", s.a, "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755,size=64k,nr_inodes=16") < 0) fail(rfd, step);
          break;
        case MountStep::kCharDevice:
          // Made by root here, so the node's permission is the VMM's alone: neither the host node's group
          // nor its mode reaches the VMM, and no other host device does.
          if (mknod(s.a, S_IFCHR | 0600, s.rdev) < 0 || chown(s.a, uid, gid) < 0) fail(rfd, step);
          break;
        case MountStep::kRemountReadOnly:
          if (mount(nullptr, s.a, nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NOEXEC, nullptr) < 0)
            fail(rfd, step);
          break;
        case MountStep::kBind:
        case MountStep::kBindReadOnly: {
          if (mount(s.a, s.b, nullptr, MS_BIND | MS_REC, nullptr) < 0) fail(rfd, step);
          unsigned long flags = MS_BIND | MS_REMOUNT | MS_NOSUID;
          if (s.kind == MountStep::kBindReadOnly) flags |= MS_RDONLY;
          // Device nodes keep working only without nodev.
          if (std::strncmp(s.a, "/dev/", 5) != 0) flags |= MS_NODEV;
          if (mount(nullptr, s.b, nullptr, flags, nullptr) < 0) fail(rfd, step);
          break;
        }
      }
    }
    step = -2;
    if (chdir(root) < 0) fail(rfd, step);
    if (syscall(SYS_pivot_root, ".", ".") < 0) fail(rfd, step);
    if (umount2(".", MNT_DETACH) < 0) fail(rfd, step);
    if (chdir("/") < 0) fail(rfd, step);
    // A proc of the VMM's own pid namespace: /proc/self/fd for the memory descriptor, and nothing else.
    if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "hidepid=2") < 0) fail(rfd, step);
    if (mount(nullptr, "/", nullptr, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, nullptr) < 0 &&
        mount(nullptr, "/", nullptr, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, nullptr) < 0)
      fail(rfd, step);
    step = -3;
    char go = 0;
    ssize_t n;
    do n = read(go_read.get(), &go, 1);
    while (n < 0 && errno == EINTR);
    if (n != 1) _exit(126);  // spaced gave up on us
    if (syscall(SYS_setgroups, 0, nullptr) < 0 || syscall(SYS_setresgid, gid, gid, gid) < 0 ||
        syscall(SYS_setresuid, uid, uid, uid) < 0)
      fail(rfd, step);
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) fail(rfd, step);
    sys::resetSignalsForExec();
    step = -4;
    if (dup2(devnull.get(), 0) < 0 || dup2(log.get(), 1) < 0 || dup2(log.get(), 2) < 0) fail(rfd, step);
    // Both sources are >= 16, so dup2 never targets its own source (which would keep close-on-exec).
    if (memory_fd >= 0 && dup2(memory_fd, kMemoryFd) < 0) fail(rfd, step);
    if (tap_fd >= 0 && dup2(tap_fd, kTapFd) < 0) fail(rfd, step);
    // The report pipe stays open (close-on-exec) so that exec success shows as EOF on its other end.
    for (int fd = kMemoryFd; fd < 1024; ++fd) {
      if (fd == rfd || (fd == kMemoryFd && memory_fd >= 0) || (fd == kTapFd && tap_fd >= 0)) continue;
      (void)fcntl(fd, F_SETFD, FD_CLOEXEC);
    }
    if (syscall(SYS_close_range, 1024, ~0U, CLOSE_RANGE_CLOEXEC) < 0) fail(rfd, step);
    char* const envp[] = {nullptr};
    // The VMM outlives spaced (reattach after a restart): no parent-death signal past this point.
    (void)syscall(SYS_prctl, PR_SET_PDEATHSIG, 0, 0, 0, 0);
    execve(qemu_path.c_str(), cargv.data(), envp);
    step = -5;
    fail(rfd, step);
  }

  QemuProcess proc;
  proc.pid = child.pid;
  proc.pidfd = std::move(child.pidfd);
  report_write.reset();
  go_read.reset();
  auto abandon = [&](Error e) -> Result<QemuProcess> {
    (void)sys::pidfdSendSignal(proc.pidfd.get(), SIGKILL);
    while (waitpid(proc.pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    return tl::unexpected(e.context("confine VMM"));
  };
  if (auto st = runHostSide(jail, proc.pid); !st) return abandon(st.error());
  char go = 1;
  if (write(go_write.get(), &go, 1) != 1) {
    // The stub failed before reading: its report says why.
  }
  go_write.reset();
  StubFailure f{};
  ssize_t n;
  do n = read(report_read.get(), &f, sizeof f);
  while (n < 0 && errno == EINTR);
  if (n == static_cast<ssize_t>(sizeof f)) {
    std::string what = f.step >= 0 && static_cast<size_t>(f.step) < plan.size()
                           ? fmt::format("step {} ({} {})", f.step, plan[static_cast<size_t>(f.step)].a,
                                         plan[static_cast<size_t>(f.step)].b)
                       : f.step == -1 ? "namespace set-up"
                       : f.step == -2 ? "pivot_root"
                       : f.step == -3 ? "dropping to the VMM uid"
                       : f.step == -4 ? "descriptors"
                                      : "execve " + qemu_path;
    while (waitpid(proc.pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    return makeError(ErrorKind::kInternal, "confine VMM: {}: {}", what, std::strerror(f.err));
  }
  return proc;
}

}  // namespace space::vm
