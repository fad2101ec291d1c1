// The gateway's confinement (SECURITY.md E18): the golden test of policies/seccomp/egress.json (the rules
// as committed below, and the verdicts of an installed filter), the order of the named steps, and a real
// confinement in a child process, checked from outside through its /proc files.
#include "egress/confine.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/sched.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "runtime/jail/inside/seccomp.h"

namespace space::egress {
namespace {

std::string policyText() {
  std::ifstream in(std::string(SPACE_SOURCE_DIR) + "/policies/seccomp/egress.json");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Every rule of the policy, one line each: "action syscall [args]". A change to egress.json changes this
// list in the same review.
const std::vector<std::string> kGoldenRules = {
    "allow accept",
    "allow accept4",
    "allow bind",
    "allow brk",
    "allow clock_getres",
    "allow clock_gettime",
    "allow clock_nanosleep",
    "allow clone [0 masked_eq 2114125824 65536]",
    "allow close",
    "allow connect",
    "allow epoll_create1",
    "allow epoll_ctl",
    "allow epoll_pwait",
    "allow epoll_wait",
    "allow eventfd2",
    "allow exit",
    "allow exit_group",
    "allow fcntl",
    "allow fstat",
    "allow ftruncate",
    "allow futex",
    "allow getegid",
    "allow geteuid",
    "allow getgid",
    "allow getpeername",
    "allow getpid",
    "allow getrandom",
    "allow getresgid",
    "allow getresuid",
    "allow getsockname",
    "allow getsockopt",
    "allow gettid",
    "allow gettimeofday",
    "allow getuid",
    "allow ioctl [1 eq 21531]",
    "allow ioctl [1 eq 21537]",
    "allow ioctl [1 eq 35088]",
    "allow ioctl [1 eq 35123]",
    "allow listen",
    "allow lseek",
    "allow madvise",
    "allow mmap",
    "allow mprotect",
    "allow mremap",
    "allow munmap",
    "allow nanosleep",
    "allow newfstatat",
    "allow openat",
    "allow pipe",
    "allow pipe2",
    "allow poll",
    "allow ppoll",
    "allow pread64",
    "allow read",
    "allow readv",
    "allow recvfrom",
    "allow recvmmsg",
    "allow recvmsg",
    "allow rename",
    "allow renameat",
    "allow renameat2",
    "allow restart_syscall",
    "allow rseq",
    "allow rt_sigaction",
    "allow rt_sigprocmask",
    "allow rt_sigreturn",
    "allow sched_getaffinity",
    "allow sched_yield",
    "allow sendmmsg",
    "allow sendmsg",
    "allow sendto",
    "allow set_robust_list",
    "allow setsockopt",
    "allow shutdown",
    "allow sigaltstack",
    "allow socket [0 eq 1]",
    "allow socket [0 eq 10]",
    "allow socket [0 eq 16]",
    "allow socket [0 eq 2]",
    "allow statx",
    "allow tgkill",
    "allow time",
    "allow timerfd_create",
    "allow timerfd_gettime",
    "allow timerfd_settime",
    "allow uname",
    "allow write",
    "allow writev",
    "errno:ENOSYS clone3",
};

std::vector<std::string> ruleLines(const nlohmann::json& policy) {
  std::vector<std::string> out;
  for (const auto& r : policy["rules"]) {
    std::string args;
    for (const auto& a : r.value("args", nlohmann::json::array())) {
      args += " [" + std::to_string(a["index"].get<int>()) + " " + a["op"].get<std::string>();
      if (a.contains("mask")) args += " " + std::to_string(a["mask"].get<uint64_t>());
      args += " " + std::to_string(a["value"].get<uint64_t>()) + "]";
    }
    for (const auto& s : r["syscalls"])
      out.push_back(r["action"].get<std::string>() + " " + s.get<std::string>() + args);
  }
  std::sort(out.begin(), out.end());
  return out;
}

TEST(EgressSeccompPolicy, RulesAreTheReviewedList) {
  auto policy = nlohmann::json::parse(policyText());
  EXPECT_EQ(policy["default_action"], "kill_process");
  for (const auto& r : policy["rules"]) EXPECT_FALSE(r.value("reason", "").empty()) << r.dump();
  auto lines = ruleLines(policy);
  EXPECT_EQ(std::set<std::string>(lines.begin(), lines.end()),
            std::set<std::string>(kGoldenRules.begin(), kGoldenRules.end()));
  EXPECT_EQ(lines.size(), kGoldenRules.size()) << "a syscall listed twice";
}

TEST(EgressSeccompPolicy, CompilesWithEveryNameKnown) {
  auto prog = jail::compileSeccompPolicy(policyText());
  ASSERT_TRUE(prog) << prog.error().message;
  for (const auto& name : prog->unknown_syscalls) ADD_FAILURE() << "unknown syscall in policy: " << name;
}

// Runs `call` in a child under the filter; returns the child's wait status.
int underFilter(const jail::SeccompProgram& prog, const std::function<long()>& call) {
  pid_t pid = fork();
  if (pid == 0) {
    if (!jail::applySeccompProgram(prog)) _exit(100);
    long rc = call();
    _exit(rc < 0 ? 101 : 0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

bool killedBySeccomp(int status) { return WIFSIGNALED(status) && WTERMSIG(status) == SIGSYS; }

TEST(EgressSeccompPolicy, GoldenDecisions) {
  auto prog = jail::compileSeccompPolicy(policyText());
  ASSERT_TRUE(prog) << prog.error().message;
  const long kNull = 0;
  struct Case {
    const char* name;
    std::function<long()> call;
  };
  // What a confined gateway does: allowed (the child exits 0).
  std::vector<Case> allowed = {
      {"getpid", [] { return syscall(SYS_getpid); }},
      {"socket(AF_INET)", [] { return syscall(SYS_socket, AF_INET, SOCK_STREAM, 0); }},
      {"socket(AF_INET6)", [] { return syscall(SYS_socket, AF_INET6, SOCK_DGRAM, 0); }},
      {"a thread",
       [] {
         std::thread t([] {});
         t.join();
         return 0L;
       }},
      {"ioctl(FIONBIO)",
       [] {
         int s = socket(AF_INET, SOCK_DGRAM, 0);
         int one = 1;
         return long(ioctl(s, FIONBIO, &one));
       }},
  };
  for (const auto& c : allowed) {
    int st = underFilter(*prog, c.call);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << c.name << ": status " << st;
  }
  // What it never does: the process is killed.
  std::vector<Case> killed = {
      {"execve", [=] { return syscall(SYS_execve, "/bin/true", kNull, kNull); }},
      {"fork (clone without CLONE_THREAD)", [] { return syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0); }},
      {"clone(CLONE_THREAD|CLONE_NEWNET)",
       [] { return syscall(SYS_clone, CLONE_THREAD | CLONE_SIGHAND | CLONE_VM | CLONE_NEWNET, 0, 0, 0, 0); }},
      {"mount", [=] { return syscall(SYS_mount, kNull, kNull, kNull, 0, kNull); }},
      {"unshare", [] { return syscall(SYS_unshare, CLONE_NEWUSER); }},
      {"setns", [] { return syscall(SYS_setns, -1, 0); }},
      {"ptrace", [] { return syscall(SYS_ptrace, 0, 0, 0, 0); }},
      {"setuid", [] { return syscall(SYS_setuid, 0); }},
      {"prctl", [] { return syscall(SYS_prctl, PR_GET_SECCOMP, 0, 0, 0, 0); }},
      {"chmod", [] { return syscall(SYS_chmod, "/nonexistent", 0777); }},
      {"socket(AF_PACKET)", [] { return syscall(SYS_socket, AF_PACKET, SOCK_RAW, 0); }},
      {"ioctl(TIOCSTI)", [] { return syscall(SYS_ioctl, 0, TIOCSTI, "x"); }},
      {"bpf", [=] { return syscall(SYS_bpf, 0, kNull, 0); }},
      {"io_uring_setup", [=] { return syscall(SYS_io_uring_setup, 1, kNull); }},
  };
  for (const auto& c : killed) EXPECT_TRUE(killedBySeccomp(underFilter(*prog, c.call))) << c.name;
  int st = underFilter(*prog, [=] { return syscall(SYS_clone3, kNull, 0) < 0 && errno == ENOSYS ? 0 : -1; });
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "clone3 answers ENOSYS (glibc then uses clone)";
}

TEST(EgressConfinement, StepsAreNamedAndSeccompComesLast) {
  Confinement c;
  c.uid = c.gid = 4242;
  c.root_dir = "/nonexistent/root";
  c.writable = {"/nonexistent/audit"};
  std::vector<std::string> names;
  for (const auto& s : confinementSteps(c)) names.push_back(s.name);
  ASSERT_FALSE(names.empty());
  EXPECT_EQ(names.back(), "apply the seccomp allow-list");
  auto at = [&](const std::string& prefix) {
    auto it = std::find_if(names.begin(), names.end(), [&](const std::string& n) { return n.rfind(prefix, 0) == 0; });
    EXPECT_NE(it, names.end()) << prefix;
    return it - names.begin();
  };
  EXPECT_LT(at("compile the seccomp policy"), at("enter a mount namespace"));  // a bad policy changes nothing
  EXPECT_LT(at("hand /nonexistent/audit"), at("pivot into its root"));
  EXPECT_LT(at("pivot into its root"), at("drop the capability bounding"));
  EXPECT_LT(at("drop the capability bounding"), at("drop to uid 4242"));
  EXPECT_LT(at("drop to uid 4242"), at("clear every capability set"));
  EXPECT_LT(at("set no_new_privs"), at("apply the seccomp allow-list"));
}

TEST(EgressConfinement, AFailedStepIsNamed) {
  Confinement c;
  c.uid = c.gid = 4242;
  c.root_dir = "/nonexistent/root";
  c.seccomp_policy = "not json";
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  pid_t pid = fork();  // a child: single-threaded, as the gateway is when it confines itself
  if (pid == 0) {
    auto st = confineGateway(c);
    std::string m = st ? "confined?!" : st.error().message;
    (void)!write(p[1], m.data(), m.size());
    _exit(0);
  }
  close(p[1]);
  char buf[512] = {};
  (void)!read(p[0], buf, sizeof buf - 1);
  close(p[0]);
  waitpid(pid, nullptr, 0);
  EXPECT_EQ(std::string(buf).rfind("confine: compile the seccomp policy: ", 0), 0u) << buf;
}

std::string procField(pid_t pid, const std::string& file, const std::string& key) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/" + file);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(key + ":", 0) == 0) {
      std::string v = line.substr(key.size() + 1);
      v.erase(0, v.find_first_not_of(" \t"));
      return v;
    }
  return "";
}

// A real confinement, in a child: seen from the parent (the host) through /proc, as E18 asks.
TEST(EgressConfinement, ConfinedChildSeenFromTheHost) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (mount namespace, uid change)";
  namespace fs = std::filesystem;
  fs::path dir = fs::path(::testing::TempDir()) / ("egress-confine-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "audit");
  {
    std::ofstream(dir / "audit" / "audit.jsonl") << "{}\n";  // left by a gateway that ran as root
  }
  fs::create_symlink("/etc/passwd", dir / "audit" / "planted");
  constexpr uid_t kUid = 0x0fff0001;
  Confinement c;
  c.uid = c.gid = kUid;
  c.root_dir = (dir / "root").string();
  c.writable = {(dir / "audit").string()};
  c.seccomp_policy = policyText();
  int ready[2], done[2];
  ASSERT_EQ(pipe(ready), 0);
  ASSERT_EQ(pipe(done), 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(ready[0]);
    close(done[1]);
    auto st = confineGateway(c);
    if (!st) {
      std::string m = st.error().message;
      (void)!write(ready[1], m.data(), m.size());
      _exit(1);
    }
    // Writes as its uid in the audit directory, and cannot see the host's files.
    std::string audit = c.writable[0] + "/new.jsonl";
    int fd = open(audit.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    bool hidden = open("/etc/passwd", O_RDONLY | O_CLOEXEC) < 0;
    const char* msg = fd >= 0 && hidden ? "ok" : "fs";
    (void)!write(ready[1], msg, 2);
    char b;
    (void)!read(done[0], &b, 1);
    _exit(0);
  }
  close(ready[1]);
  close(done[0]);
  char buf[512] = {};
  ssize_t n = read(ready[0], buf, sizeof buf - 1);
  std::string said(buf, n > 0 ? size_t(n) : 0);
  EXPECT_EQ(said, "ok");
  std::string uid = std::to_string(kUid);
  EXPECT_EQ(procField(pid, "status", "Uid"), uid + "\t" + uid + "\t" + uid + "\t" + uid);
  EXPECT_EQ(procField(pid, "status", "Gid"), uid + "\t" + uid + "\t" + uid + "\t" + uid);
  EXPECT_EQ(procField(pid, "status", "CapEff"), "0000000000000000");
  EXPECT_EQ(procField(pid, "status", "CapPrm"), "0000000000000000");
  EXPECT_EQ(procField(pid, "status", "CapBnd"), "0000000000000000");
  EXPECT_EQ(procField(pid, "status", "NoNewPrivs"), "1");
  EXPECT_EQ(procField(pid, "status", "Seccomp"), "2");
  std::ifstream mi("/proc/" + std::to_string(pid) + "/mountinfo");
  std::set<std::string> points;
  for (std::string line; std::getline(mi, line);) {
    std::istringstream f(line);
    std::string id, parent, dev, root, point;
    f >> id >> parent >> dev >> root >> point;
    points.insert(point);
  }
  EXPECT_EQ(points, (std::set<std::string>{"/", c.writable[0], "/dev/null", "/dev/urandom"}));
  (void)!write(done[1], "x", 1);
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  struct stat st;
  ASSERT_EQ(stat((dir / "audit").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, kUid);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  ASSERT_EQ(stat((dir / "audit" / "audit.jsonl").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, kUid) << "the root-owned audit file is handed over";
  ASSERT_EQ(stat((dir / "audit" / "new.jsonl").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, kUid);
  ASSERT_EQ(stat("/etc/passwd", &st), 0);
  EXPECT_EQ(st.st_uid, 0u) << "a planted symlink is not followed";
  fs::remove_all(dir);
}

}  // namespace
}  // namespace space::egress
