// A real sandbox: start, exec, check containment from inside and from the host, destroy, and check that
// nothing is left. Skips (with the reason) where the host cannot run it: not root, no agent binary, no
// busybox for the template.
#include "runtime/jail/jail_runtime.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace space::jail {
namespace {

namespace fs = std::filesystem;

const std::string kStateDir = "/var/tmp/space-jail-test";
const std::string kTemplate = "/var/tmp/space-jail-test-template";

std::string agentBinary() {
  if (const char* env = std::getenv("SPACE_AGENT_BINARY")) return env;
  for (const char* rel : {"/build-jail/bin/space-agent", "/build/bin/space-agent"}) {
    std::string p = std::string(SPACE_SOURCE_DIR) + rel;
    if (access(p.c_str(), X_OK) == 0) return p;
  }
  return "";
}

struct ExecResult {
  int exit_code = -1;
  std::string out;
};

ExecResult run(agent::AgentClient& agent, std::vector<std::string> argv) {
  agent::ExecRequest req;
  req.argv = std::move(argv);
  req.timeout_s = 20;
  ExecResult r;
  auto stream = agent.exec(req);
  if (!stream) {
    r.out = "exec failed: " + stream.error().message;
    return r;
  }
  for (;;) {
    auto ev = (*stream)->next(std::chrono::seconds(30));
    if (!ev) {
      r.out += "[next: " + ev.error().message + "]";
      return r;
    }
    if (ev->kind == agent::ExecEvent::Kind::kExit) {
      r.exit_code = ev->exit.exit_code;
      return r;
    }
    r.out += ev->data;
  }
}

std::string hostStatusField(int pid, const std::string& field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind(field + ":", 0) == 0) return line;
  return "";
}

class JailRuntimeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root (namespaces, cgroups, loop mount)";
    agent_ = agentBinary();
    if (agent_.empty()) GTEST_SKIP() << "space-agent not built (set SPACE_AGENT_BINARY or build build-jail/)";
    if (!fs::exists(kTemplate + "/bin/busybox")) {
      std::string cmd = std::string(SPACE_SOURCE_DIR) + "/scripts/make-busybox-rootfs " + kTemplate + " >/dev/null";
      if (std::system(cmd.c_str()) != 0) GTEST_SKIP() << "cannot build a busybox template: " << cmd;
    }
    JailConfig config;
    config.state_dir = kStateDir;
    config.agent_binary = agent_;
    config.seccomp_policy = std::string(SPACE_SOURCE_DIR) + "/policies/seccomp/default.json";
    config.volume_bytes = 4ull << 30;
    if (const char* log = std::getenv("SPACE_AGENT_LOG")) config.agent_log_path = log;
    auto rt = JailRuntime::create(config);
    ASSERT_TRUE(rt) << rt.error().message;
    runtime_ = std::move(*rt);
  }

  void TearDown() override {
    runtime_.reset();
    if (geteuid() == 0) (void)closeLayerVolume(kStateDir);
  }

  runtime::SandboxSpec spec(const std::string& suffix) {
    runtime::SandboxSpec s;
    s.id = "jt-" + std::to_string(getpid()) + "-" + suffix;
    s.template_rootfs = kTemplate;
    s.dir = runtime_->sandboxesDir() + "/" + s.id;
    s.hostname = "jail-test";
    s.uid_base = 1500000000u + static_cast<uint32_t>(getpid() % 1000) * 262144u + (suffix == "b" ? 65536u : 0u) +
                 (suffix == "c" ? 131072u : 0u);
    s.uid_count = 65536;
    s.limits.disk_bytes = 16ull << 20;
    s.limits.disk_inodes = 2000;
    s.env["SPACE_TEST"] = "1";
    return s;
  }

  std::string agent_;
  std::unique_ptr<JailRuntime> runtime_;
};

TEST_F(JailRuntimeTest, StartExecDestroyLeavesNothing) {
  auto s = spec("a");
  auto t0 = std::chrono::steady_clock::now();
  auto inst = runtime_->start(s);
  auto ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(inst) << inst.error().message;
  std::printf("start() took %.1f ms\n", ms);
  auto& agent = *inst->agent;

  ExecResult id = run(agent, {"id", "-u"});
  EXPECT_EQ(id.exit_code, 0) << id.out;
  EXPECT_EQ(id.out, "0\n");

  // J1 from inside.
  ExecResult status = run(agent, {"cat", "/proc/self/status"});
  EXPECT_NE(status.out.find("Seccomp:\t2"), std::string::npos) << status.out;
  EXPECT_NE(status.out.find("NoNewPrivs:\t1"), std::string::npos) << status.out;
  for (const char* set : {"CapEff:\t", "CapBnd:\t"}) {
    auto at = status.out.find(set);
    ASSERT_NE(at, std::string::npos) << status.out;
    uint64_t caps = std::strtoull(status.out.c_str() + at + std::strlen(set), nullptr, 16);
    // SYS_ADMIN 21, SYS_MODULE 16, SYS_PTRACE 19, SYS_RAWIO 17, DAC_READ_SEARCH 2, NET_ADMIN 12, BPF 39,
    // PERFMON 38, SYS_BOOT 22, SYS_TIME 25, MKNOD 27, NET_RAW 13.
    for (int bit : {21, 16, 19, 17, 2, 12, 39, 38, 22, 25, 27, 13})
      EXPECT_EQ(caps & (1ull << bit), 0u) << set << " holds capability " << bit;
  }
  // J10: /dev holds only the allowed nodes.
  ExecResult dev = run(agent, {"ls", "/dev"});
  EXPECT_EQ(dev.out, "fd\nfull\nnull\nptmx\npts\nrandom\nshm\nstderr\nstdin\nstdout\ntty\nurandom\nzero\n");
  // J11: kallsyms masked (empty).
  ExecResult kallsyms = run(agent, {"sh", "-c", "wc -c < /proc/kallsyms"});
  EXPECT_EQ(kallsyms.out, "0\n");
  // J3: host kernel knobs are read-only.
  ExecResult core = run(agent, {"sh", "-c", "echo x > /proc/sys/kernel/core_pattern"});
  EXPECT_NE(core.exit_code, 0);
  // J9: only sandbox pids, pid 1 is the agent.
  ExecResult comm = run(agent, {"cat", "/proc/1/comm"});
  EXPECT_EQ(comm.out, "space-agent\n");
  // J19: the template is read-only underneath; writes land in the upper layer.
  ExecResult write = run(agent, {"sh", "-c", "echo hi > /etc/sandbox-file && cat /etc/sandbox-file"});
  EXPECT_EQ(write.out, "hi\n");
  EXPECT_FALSE(fs::exists(kTemplate + "/etc/sandbox-file"));
  // J10: no mknod.
  ExecResult mknod = run(agent, {"mknod", "/tmp/sda", "b", "8", "0"});
  EXPECT_NE(mknod.exit_code, 0);
  // J18: past the 16 MiB quota the write fails inside.
  ExecResult dd = run(agent, {"dd", "if=/dev/zero", "of=/tmp/big", "bs=1M", "count=40"});
  EXPECT_NE(dd.exit_code, 0) << dd.out;
  // J4: mount is denied.
  ExecResult mnt = run(agent, {"mount", "-t", "tmpfs", "x", "/mnt"});
  EXPECT_NE(mnt.exit_code, 0);

  // J2 from the host: the agent's real uid is the sandbox's base uid.
  std::string uid = hostStatusField(inst->pid, "Uid");
  EXPECT_EQ(uid, fmt::format("Uid:\t{0}\t{0}\t{0}\t{0}", s.uid_base));
  // No mount of the running sandbox is visible on the host.
  auto during = findLeftovers(kStateDir, "space", s.uid_base, s.uid_base + s.uid_count);
  ASSERT_TRUE(during);
  EXPECT_TRUE(during->mounts.empty()) << during->describe();

  auto usage = runtime_->usage(inst->persisted);
  ASSERT_TRUE(usage) << usage.error().message;
  EXPECT_GT(usage->memory_bytes, 0u);
  EXPECT_GE(usage->pids, 1u);

  auto persisted = inst->persisted;
  inst->agent.reset();
  auto st = runtime_->destroy(persisted);
  ASSERT_TRUE(st) << st.error().message;
  EXPECT_TRUE(runtime_->destroy(persisted)) << "destroy must be idempotent";
  auto after = findLeftovers(kStateDir, "space", s.uid_base, s.uid_base + s.uid_count);
  ASSERT_TRUE(after);
  for (const auto& c : after->cgroups) EXPECT_EQ(c.find(s.id), std::string::npos) << c;
  EXPECT_TRUE(after->pids.empty()) << after->describe();
  EXPECT_TRUE(after->mounts.empty()) << after->describe();
  EXPECT_FALSE(fs::exists(s.dir));
}

TEST_F(JailRuntimeTest, BadTemplateFailsWithStepAndUnwinds) {
  auto s = spec("b");
  s.template_rootfs = "/nonexistent-template";
  auto inst = runtime_->start(s);
  ASSERT_FALSE(inst);
  EXPECT_NE(inst.error().message.find("/nonexistent-template"), std::string::npos) << inst.error().message;
  EXPECT_NE(inst.error().message.find("launch step 'rootfs': "), std::string::npos) << inst.error().message;
  auto after = findLeftovers(kStateDir, "space", s.uid_base, s.uid_base + s.uid_count);
  ASSERT_TRUE(after);
  EXPECT_TRUE(after->pids.empty()) << after->describe();
  EXPECT_TRUE(after->mounts.empty()) << after->describe();
  EXPECT_FALSE(fs::exists(s.dir));
}

// The first launch step refuses a directory that exists, names itself, and leaves the directory alone.
TEST_F(JailRuntimeTest, ExistingDirFailsTheClaimStepAndIsKept) {
  auto s = spec("c");
  fs::create_directories(s.dir);
  std::ofstream(s.dir + "/keep") << "not the sandbox's";
  auto inst = runtime_->start(s);
  ASSERT_FALSE(inst);
  EXPECT_EQ(inst.error().kind, ErrorKind::kConflict) << inst.error().message;
  EXPECT_NE(inst.error().message.find("launch step 'claim dir': sandbox dir " + s.dir + " exists already"),
            std::string::npos)
      << inst.error().message;
  EXPECT_TRUE(fs::exists(s.dir + "/keep"));
  auto after = findLeftovers(kStateDir, "space", s.uid_base, s.uid_base + s.uid_count);
  ASSERT_TRUE(after);
  for (const auto& c : after->cgroups) EXPECT_EQ(c.find(s.id), std::string::npos) << c;
  fs::remove_all(s.dir);
}

// Snapshot, rollback in place and fork (restore into a new sandbox) on real sandboxes.
TEST_F(JailRuntimeTest, SnapshotRollbackAndForkKeepFiles) {
  auto s = spec("a");
  auto inst = runtime_->start(s);
  ASSERT_TRUE(inst) << inst.error().message;
  ASSERT_EQ(run(*inst->agent, {"sh", "-c", "echo one > /etc/v && mkdir /etc/x"}).exit_code, 0);
  auto snap = runtime_->snapshot(*inst, runtime::SnapshotKind::kFilesystem);
  ASSERT_TRUE(snap) << snap.error().message;
  EXPECT_EQ(snap->kind, "filesystem");
  EXPECT_TRUE(fs::exists(snap->path + "/disk.img"));
  EXPECT_TRUE(fs::exists(snap->path + "/snapshot.json"));
  EXPECT_FALSE(fs::exists(snap->path + ".tmp"));
  // The sandbox runs on after the snapshot.
  EXPECT_EQ(run(*inst->agent, {"sh", "-c", "echo two > /etc/v; rm -rf /etc/x /bin/ls; cat /etc/v"}).out, "two\n");
  // A full snapshot (processes) is not what a jail can give.
  EXPECT_FALSE(runtime_->snapshot(*inst, runtime::SnapshotKind::kFull));

  int old_pid = inst->pid;
  auto rolled = runtime_->rollback(*inst, *snap);
  ASSERT_TRUE(rolled) << rolled.error().message;
  EXPECT_NE(rolled->pid, old_pid);
  EXPECT_EQ(run(*rolled->agent, {"cat", "/etc/v"}).out, "one\n");
  EXPECT_EQ(run(*rolled->agent, {"sh", "-c", "test -d /etc/x && ls / >/dev/null && echo ok"}).out, "ok\n");
  EXPECT_EQ(run(*rolled->agent, {"hostname"}).out, "jail-test\n");

  auto c = spec("c");
  auto child = runtime_->restore(*snap, c);
  ASSERT_TRUE(child) << child.error().message;
  EXPECT_EQ(run(*child->agent, {"cat", "/etc/v"}).out, "one\n");
  ASSERT_EQ(run(*child->agent, {"sh", "-c", "echo child > /etc/v"}).exit_code, 0);
  EXPECT_EQ(run(*rolled->agent, {"cat", "/etc/v"}).out, "one\n");

  auto p1 = rolled->persisted, p2 = child->persisted;
  rolled->agent.reset();
  child->agent.reset();
  ASSERT_TRUE(runtime_->destroy(p1));
  ASSERT_TRUE(runtime_->destroy(p2));
  ASSERT_TRUE(runtime_->deleteSnapshot(*snap));
  EXPECT_FALSE(fs::exists(snap->path));
  for (const auto& p : {p1, p2}) EXPECT_FALSE(fs::exists(p.state["image"].get<std::string>()));
}

}  // namespace
}  // namespace space::jail
