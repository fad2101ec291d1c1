// Golden test of policies/seccomp/default.json: compiles the policy, installs it in a forked child and pins
// the verdict for each syscall listed below (J4-J8, J14, J15, J22). A change of the policy that flips any of
// these must change this file too, in the same review.
#include "runtime/jail/inside/seccomp.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <functional>
#include <sstream>

namespace space::jail {
namespace {

std::string policyText() {
  std::ifstream in(std::string(SPACE_SOURCE_DIR) + "/policies/seccomp/default.json");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

enum class Verdict { kDenied, kNoSys, kAllowed };

struct Case {
  const char* name;
  Verdict expected;
  std::function<long()> call;  // the raw syscall; the result is -1 + errno or >= 0
};

long rawClone(unsigned long flags) {
  long rc = syscall(SYS_clone, flags, 0, 0, 0, 0);
  if (rc == 0) _exit(0);  // a child slipped through: leave at once
  if (rc > 0) waitpid(static_cast<pid_t>(rc), nullptr, 0);
  return rc;
}

std::vector<Case> cases() {
  const long kNull = 0;
  return {
      {"getpid", Verdict::kAllowed, [] { return syscall(SYS_getpid); }},
      {"socket(AF_INET)", Verdict::kAllowed, [] { return syscall(SYS_socket, AF_INET, SOCK_STREAM, 0); }},
      {"socket(AF_UNIX)", Verdict::kAllowed, [] { return syscall(SYS_socket, AF_UNIX, SOCK_STREAM, 0); }},
      {"socket(AF_NETLINK)", Verdict::kAllowed, [] { return syscall(SYS_socket, AF_NETLINK, SOCK_RAW, 0); }},
      {"ioctl(TCGETS)", Verdict::kAllowed, [] { return syscall(SYS_ioctl, 0, TCGETS, 0); }},
      {"clone(fork)", Verdict::kAllowed, [] { return rawClone(SIGCHLD); }},
      {"personality(query)", Verdict::kAllowed, [] { return syscall(SYS_personality, 0xffffffffUL); }},
      {"clone3", Verdict::kNoSys, [=] { return syscall(SYS_clone3, kNull, 0); }},
      {"clone(CLONE_NEWUSER)", Verdict::kDenied, [] { return rawClone(CLONE_NEWUSER | SIGCHLD); }},
      {"clone(CLONE_NEWNS)", Verdict::kDenied, [] { return rawClone(CLONE_NEWNS | SIGCHLD); }},
      {"clone(CLONE_NEWNET)", Verdict::kDenied, [] { return rawClone(CLONE_NEWNET | SIGCHLD); }},
      {"unshare(CLONE_NEWUSER)", Verdict::kDenied, [] { return syscall(SYS_unshare, CLONE_NEWUSER); }},
      {"setns", Verdict::kDenied, [] { return syscall(SYS_setns, -1, 0); }},
      {"mount", Verdict::kDenied, [=] { return syscall(SYS_mount, kNull, kNull, kNull, 0, kNull); }},
      {"umount2", Verdict::kDenied, [] { return syscall(SYS_umount2, "/nonexistent", 0); }},
      {"pivot_root", Verdict::kDenied, [=] { return syscall(SYS_pivot_root, kNull, kNull); }},
      {"fsopen", Verdict::kDenied, [=] { return syscall(SYS_fsopen, kNull, 0); }},
      {"fsmount", Verdict::kDenied, [] { return syscall(SYS_fsmount, -1, 0, 0); }},
      {"open_tree", Verdict::kDenied, [=] { return syscall(SYS_open_tree, -1, kNull, 0); }},
      {"move_mount", Verdict::kDenied, [=] { return syscall(SYS_move_mount, -1, kNull, -1, kNull, 0); }},
      {"open_by_handle_at", Verdict::kDenied, [=] { return syscall(SYS_open_by_handle_at, -1, kNull, 0); }},
      {"name_to_handle_at", Verdict::kDenied,
       [=] { return syscall(SYS_name_to_handle_at, -1, kNull, kNull, kNull, 0); }},
      {"init_module", Verdict::kDenied, [=] { return syscall(SYS_init_module, kNull, 0, kNull); }},
      {"finit_module", Verdict::kDenied, [=] { return syscall(SYS_finit_module, -1, kNull, 0); }},
      {"delete_module", Verdict::kDenied, [=] { return syscall(SYS_delete_module, kNull, 0); }},
      {"kexec_load", Verdict::kDenied, [=] { return syscall(SYS_kexec_load, 0, 0, kNull, 0); }},
      {"reboot", Verdict::kDenied, [] { return syscall(SYS_reboot, 0, 0, 0, 0); }},
      {"swapon", Verdict::kDenied, [=] { return syscall(SYS_swapon, kNull, 0); }},
      {"acct", Verdict::kDenied, [] { return syscall(SYS_acct, "/nonexistent/acct"); }},
      {"bpf", Verdict::kDenied, [=] { return syscall(SYS_bpf, -1, kNull, 0); }},
      {"perf_event_open", Verdict::kDenied, [=] { return syscall(SYS_perf_event_open, kNull, 0, -1, -1, 0); }},
      {"userfaultfd", Verdict::kDenied, [] { return syscall(SYS_userfaultfd, 0); }},
      {"io_uring_setup", Verdict::kDenied, [=] { return syscall(SYS_io_uring_setup, 0, kNull); }},
      {"keyctl", Verdict::kDenied, [] { return syscall(SYS_keyctl, -1, 0, 0, 0, 0); }},
      {"add_key", Verdict::kDenied, [=] { return syscall(SYS_add_key, kNull, kNull, kNull, 0, 0); }},
      {"request_key", Verdict::kDenied, [=] { return syscall(SYS_request_key, kNull, kNull, kNull, 0); }},
      {"clock_settime", Verdict::kDenied, [=] { return syscall(SYS_clock_settime, 0, kNull); }},
      {"settimeofday", Verdict::kDenied, [=] { return syscall(SYS_settimeofday, kNull, kNull); }},
      {"adjtimex", Verdict::kDenied, [=] { return syscall(SYS_adjtimex, kNull); }},
      {"clock_adjtime", Verdict::kDenied, [=] { return syscall(SYS_clock_adjtime, 0, kNull); }},
      {"ioctl(TIOCSTI)", Verdict::kDenied, [] { return syscall(SYS_ioctl, 0, TIOCSTI, "x"); }},
      {"ioctl(TIOCSTI|1<<32)", Verdict::kDenied, [] { return syscall(SYS_ioctl, 0, (1UL << 32) | TIOCSTI, "x"); }},
      {"ioctl(TIOCLINUX)", Verdict::kDenied, [] { return syscall(SYS_ioctl, 0, TIOCLINUX, "x"); }},
      {"socket(AF_PACKET)", Verdict::kDenied, [] { return syscall(SYS_socket, AF_PACKET, SOCK_RAW, 0); }},
      {"socket(AF_VSOCK)", Verdict::kDenied, [] { return syscall(SYS_socket, AF_VSOCK, SOCK_STREAM, 0); }},
  };
}

TEST(SeccompPolicy, CompilesWithReasons) {
  auto prog = compileSeccompPolicy(policyText());
  ASSERT_TRUE(prog) << prog.error().message;
  EXPECT_EQ(prog->filters.size(), 2u) << "allow-list plus the argument-deny overlay (TIOCSTI)";
  for (const auto& name : prog->unknown_syscalls) ADD_FAILURE() << "unknown syscall in policy: " << name;
}

TEST(SeccompPolicy, RejectsRuleWithoutReason) {
  auto prog =
      compileSeccompPolicy(R"({"default_action":"errno:EPERM","rules":[{"syscalls":["read"],"action":"allow"}]})");
  EXPECT_FALSE(prog);
}

TEST(SeccompPolicy, GoldenDecisions) {
  auto prog = compileSeccompPolicy(policyText());
  ASSERT_TRUE(prog) << prog.error().message;
  auto all = cases();
  int pipefd[2];
  ASSERT_EQ(pipe(pipefd), 0);
  // stdin of the probes is /dev/null so terminal ioctls never reach a real terminal.
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(pipefd[0]);
    int devnull = open("/dev/null", O_RDWR);
    dup2(devnull, 0);
    if (!applySeccompProgram(*prog)) _exit(3);
    for (const Case& c : all) {
      long rc = c.call();
      int result = rc < 0 ? errno : 0;
      if (rc > 2 && std::string(c.name).rfind("socket", 0) == 0) close(static_cast<int>(rc));
      (void)!write(pipefd[1], &result, sizeof result);
    }
    _exit(0);
  }
  close(pipefd[1]);
  for (const Case& c : all) {
    int result = -1;
    ASSERT_EQ(read(pipefd[0], &result, sizeof result), static_cast<ssize_t>(sizeof result))
        << "child died at " << c.name;
    switch (c.expected) {
      case Verdict::kDenied:
        EXPECT_EQ(result, EPERM) << c.name << " should be denied, got errno " << result;
        break;
      case Verdict::kNoSys:
        EXPECT_EQ(result, ENOSYS) << c.name << " should be ENOSYS, got errno " << result;
        break;
      case Verdict::kAllowed:
        EXPECT_TRUE(result != EPERM && result != ENOSYS) << c.name << " should be allowed, got errno " << result;
        break;
    }
  }
  close(pipefd[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
}

}  // namespace
}  // namespace space::jail
