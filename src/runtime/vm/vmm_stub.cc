// Async-signal-safe: every step here runs in the child of clone3 (sys::clone3Fork), between the clone and
// QEMU's execve. spaced is multi-threaded, and the child is a copy of it with only the calling thread:
// another thread may have held the allocator's or a logger's lock at the clone, and that lock stays held
// forever in the child. So the steps call only raw syscalls and async-signal-safe libc functions; they do
// not allocate (no std::string, no fmt, no exceptions), take no locks, and read only what spaced
// prepared before the clone (VmmStubArgs). A failure is reported as numbers (step, errno, mount entry)
// with one write(2); spaced turns them into words. vmmStubStepNames() is for spaced and tests and is
// the one function here that allocates.
//
// Ordering constraints:
//  - the parent-death signal first: until the go byte this copy of spaced must die with it;
//  - the mount namespace is made private before anything is mounted (nothing propagates to the host);
//  - every bind of the plan before pivot_root, which drops the host's tree their sources are in;
//  - the go byte (spaced has put the VMM into its cgroup) before the uid drop: afterwards nothing of
//    spaced may touch it as root;
//  - the uid drop after every mount (they need CAP_SYS_ADMIN), no_new_privs after it;
//  - descriptors last before execve, the parent-death signal cleared just before it (the VMM outlives
//    spaced: reattach after a restart).
#include "runtime/vm/vmm_stub.h"

#include <fcntl.h>
#include <linux/close_range.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "sys/process.h"

namespace space::vm {
namespace {

// A step returns false with errno set. `mount` is where the mount plan records the entry it is at.
using StubStep = bool (*)(const VmmStubArgs& args, int& mount);

struct NamedStubStep {
  const char* name;
  StubStep run;
};

// This copy of spaced must see spaced's death while it waits for the go byte: its own copy of the pipe's
// write end goes (else the read never ends), and it dies with the launching thread until the exec. Left
// waiting, it would hold every descriptor spaced had — its API socket too.
bool dieWithSpaced(const VmmStubArgs& a, int&) {
  close(a.go_write_fd);
  return syscall(SYS_prctl, PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) == 0;
}

bool newSession(const VmmStubArgs&, int&) { return syscall(SYS_setsid) >= 0; }

// Nothing mounted below propagates back to the host.
bool privateMounts(const VmmStubArgs&, int&) { return mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0; }

bool rootTmpfs(const VmmStubArgs& a, int&) {
  return mount("tmpfs", a.root, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m") == 0;
}

bool runMount(const VmmStubMount& s, uid_t uid, gid_t gid) {
  switch (s.kind) {
    case MountStep::kMkdir:
      return mkdir(s.a, 0755) == 0 || errno == EEXIST;
    case MountStep::kTouch: {
      int fd = open(s.a, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
      if (fd < 0) return false;
      close(fd);
      return true;
    }
    case MountStep::kSymlink:
      return symlink(s.a, s.b) == 0;
    case MountStep::kDevTmpfs:
      return mount("tmpfs", s.a, "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755,size=64k,nr_inodes=16") == 0;
    case MountStep::kCharDevice:
      // Made by root here, so the node's permission is the VMM's alone: neither the host node's group
      // nor its mode reaches the VMM, and no other host device does.
      return mknod(s.a, S_IFCHR | 0600, s.rdev) == 0 && chown(s.a, uid, gid) == 0;
    case MountStep::kRemountReadOnly:
      return mount(nullptr, s.a, nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NOEXEC, nullptr) == 0;
    case MountStep::kBind:
    case MountStep::kBindReadOnly: {
      if (mount(s.a, s.b, nullptr, MS_BIND | MS_REC, nullptr) < 0) return false;
      unsigned long flags = MS_BIND | MS_REMOUNT | MS_NOSUID;
      if (s.kind == MountStep::kBindReadOnly) flags |= MS_RDONLY;
      // Device nodes keep working only without nodev.
      if (std::strncmp(s.a, "/dev/", 5) != 0) flags |= MS_NODEV;
      return mount(nullptr, s.b, nullptr, flags, nullptr) == 0;
    }
  }
  errno = EINVAL;
  return false;
}

bool mountPlan(const VmmStubArgs& a, int& mount) {
  for (mount = 0; mount < a.mount_count; ++mount)
    if (!runMount(a.mounts[mount], a.uid, a.gid)) return false;
  mount = -1;
  return true;
}

bool pivotRoot(const VmmStubArgs& a, int&) {
  return chdir(a.root) == 0 && syscall(SYS_pivot_root, ".", ".") == 0 && umount2(".", MNT_DETACH) == 0 &&
         chdir("/") == 0;
}

// A proc of the VMM's own pid namespace: /proc/self/fd for the memory descriptor, and nothing else.
bool mountProc(const VmmStubArgs&, int&) {
  return mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "hidepid=2") == 0;
}

bool readOnlyRoot(const VmmStubArgs&, int&) {
  return mount(nullptr, "/", nullptr, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, nullptr) == 0 ||
         mount(nullptr, "/", nullptr, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, nullptr) == 0;
}

bool waitForGo(const VmmStubArgs& a, int&) {
  char go = 0;
  ssize_t n;
  do n = read(a.go_read_fd, &go, 1);
  while (n < 0 && errno == EINTR);
  if (n != 1) _exit(126);  // spaced gave up on us (and reads no report)
  return true;
}

// Raw syscalls: glibc's set*id wrappers broadcast to all threads, and its bookkeeping is a copy of
// spaced's multi-threaded state here.
bool dropToVmmUid(const VmmStubArgs& a, int&) {
  return syscall(SYS_setgroups, 0, nullptr) == 0 && syscall(SYS_setresgid, a.gid, a.gid, a.gid) == 0 &&
         syscall(SYS_setresuid, a.uid, a.uid, a.uid) == 0;
}

bool noNewPrivs(const VmmStubArgs&, int&) { return prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0; }

bool resetSignals(const VmmStubArgs&, int&) {
  sys::resetSignalsForExec();
  return true;
}

bool stdio(const VmmStubArgs& a, int&) {
  return dup2(a.devnull_fd, 0) >= 0 && dup2(a.log_fd, 1) >= 0 && dup2(a.log_fd, 2) >= 0;
}

// Both sources are >= 16, so dup2 never targets its own source (which would keep close-on-exec).
bool inheritedDescriptors(const VmmStubArgs& a, int&) {
  if (a.memory_fd >= 0 && dup2(a.memory_fd, kMemoryFd) < 0) return false;
  return a.tap_fd < 0 || dup2(a.tap_fd, kTapFd) >= 0;
}

// The report pipe stays open (close-on-exec) so that exec success shows as EOF on its other end.
bool closeOnExecTheRest(const VmmStubArgs& a, int&) {
  for (int fd = kMemoryFd; fd < 1024; ++fd) {
    if (fd == a.report_fd || (fd == kMemoryFd && a.memory_fd >= 0) || (fd == kTapFd && a.tap_fd >= 0)) continue;
    (void)fcntl(fd, F_SETFD, FD_CLOEXEC);
  }
  return syscall(SYS_close_range, 1024, ~0U, CLOSE_RANGE_CLOEXEC) == 0;
}

// The VMM outlives spaced (reattach after a restart): no parent-death signal past this point.
bool outliveSpaced(const VmmStubArgs&, int&) { return syscall(SYS_prctl, PR_SET_PDEATHSIG, 0, 0, 0, 0) == 0; }

bool execQemu(const VmmStubArgs& a, int&) {
  char* const envp[] = {nullptr};
  execve(a.qemu_path, a.argv, envp);
  return false;  // execve returns only when it failed
}

// One step a line: the table reads as a checklist.
// clang-format off
constexpr NamedStubStep kSteps[] = {
    {"die with spaced", dieWithSpaced},
    {"new session", newSession},
    {"private mounts", privateMounts},
    {"root tmpfs", rootTmpfs},
    {"mount plan", mountPlan},
    {"pivot root", pivotRoot},
    {"mount proc", mountProc},
    {"read-only root", readOnlyRoot},
    {"wait for go", waitForGo},
    {"drop to vmm uid", dropToVmmUid},
    {"no new privs", noNewPrivs},
    {"reset signals", resetSignals},
    {"stdio", stdio},
    {"inherited descriptors", inheritedDescriptors},
    {"close-on-exec the rest", closeOnExecTheRest},
    {"outlive spaced", outliveSpaced},
    {"execve", execQemu},  // last
};
// clang-format on
constexpr int kStepCount = static_cast<int>(sizeof kSteps / sizeof kSteps[0]);

[[noreturn]] void reportFailure(int report_fd, int step, int mount) {
  VmmStubFailure f{step, errno, mount};
  (void)!write(report_fd, &f, sizeof f);
  _exit(127);
}

}  // namespace

void runVmmStub(const VmmStubArgs& args) {
  int mount = -1;
  for (int step = 0; step < kStepCount; ++step)
    if (!kSteps[step].run(args, mount)) reportFailure(args.report_fd, step, mount);
  _exit(127);  // not reached: the last step execs or fails
}

std::vector<std::string_view> vmmStubStepNames() {
  std::vector<std::string_view> names;
  for (const NamedStubStep& step : kSteps) names.emplace_back(step.name);
  return names;
}

const char* vmmStubStepName(int index) { return index >= 0 && index < kStepCount ? kSteps[index].name : nullptr; }

}  // namespace space::vm
