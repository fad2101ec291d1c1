// Boots a real microVM (TCG here, KVM where usable) from the artifacts of scripts/vm/build-guest and
// checks, from the host, that commands run under the guest's own kernel.
#include <gtest/gtest.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "runtime/vm/vm_runtime.h"

namespace space::vm {
namespace {

using Clock = std::chrono::steady_clock;

std::string guestDir() {
  const char* env = std::getenv("SPACE_VM_DIR");
  return env ? env : "/var/cache/space/vm";
}

bool onPath(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::string p = path ? path : "";
  size_t start = 0;
  while (start <= p.size()) {
    size_t end = p.find(':', start);
    if (end == std::string::npos) end = p.size();
    if (access((p.substr(start, end - start) + "/" + name).c_str(), X_OK) == 0) return true;
    start = end + 1;
  }
  return false;
}

std::string runToString(agent::AgentClient& agent, std::vector<std::string> argv) {
  agent::ExecRequest req;
  req.argv = std::move(argv);
  auto stream = agent.exec(req);
  if (!stream) return "exec failed: " + stream.error().message;
  std::string out;
  for (;;) {
    auto ev = (*stream)->next(std::chrono::seconds(60));
    if (!ev) return out + " [" + ev.error().message + "]";
    if (ev->kind == agent::ExecEvent::Kind::kStdout) out += ev->data;
    if (ev->kind == agent::ExecEvent::Kind::kExit) return out;
  }
}

class VmBootTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string dir = guestDir();
    if (access((dir + "/vmlinuz").c_str(), R_OK) != 0 || access((dir + "/initramfs.cpio").c_str(), R_OK) != 0)
      GTEST_SKIP() << "no guest artifacts in " << dir << " (run scripts/vm/build-guest, or set SPACE_VM_DIR)";
    if (!onPath("qemu-system-x86_64")) GTEST_SKIP() << "qemu-system-x86_64 not installed (package qemu-system-x86)";
    state_ = std::filesystem::temp_directory_path() / ("space-vm-test-" + std::to_string(getpid()));
    VmConfig config;
    config.state_dir = state_;
    config.kernel = dir + "/vmlinuz";
    config.initrd = dir + "/initramfs.cpio";
    auto rt = VmRuntime::create(config);
    ASSERT_TRUE(rt) << rt.error().message;
    runtime_ = std::move(*rt);
  }
  void TearDown() override {
    if (!state_.empty()) std::filesystem::remove_all(state_);
  }

  std::filesystem::path state_;
  std::unique_ptr<VmRuntime> runtime_;
};

TEST_F(VmBootTest, GuestRunsItsOwnKernelAndPausesAndResumes) {
  runtime::SandboxSpec spec;
  spec.id = "sb-vmtest";
  spec.limits.memory_bytes = 256ull << 20;
  auto t0 = Clock::now();
  auto inst = runtime_->start(spec);
  ASSERT_TRUE(inst) << inst.error().message;
  std::string guest = runToString(*inst->agent, {"uname", "-r"});
  auto boot_ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
  std::printf("vm cold boot to first output: %lld ms (%s)\n", static_cast<long long>(boot_ms),
              runtime_->accel() == Accel::kKvm ? "kvm" : "tcg");

  utsname host{};
  uname(&host);
  while (!guest.empty() && guest.back() == '\n') guest.pop_back();
  EXPECT_FALSE(guest.empty());
  EXPECT_NE(guest, host.release) << "the command ran under the host's kernel";
  std::printf("guest kernel %s, host kernel %s\n", guest.c_str(), host.release);

  // Pause and resume go through QMP (stop/cont); the agent answers again afterwards.
  auto p0 = Clock::now();
  ASSERT_TRUE(runtime_->pause(*inst));
  auto p1 = Clock::now();
  ASSERT_TRUE(runtime_->resume(*inst));
  auto p2 = Clock::now();
  std::printf("pause %lld us, resume %lld us\n",
              static_cast<long long>(std::chrono::duration_cast<std::chrono::microseconds>(p1 - p0).count()),
              static_cast<long long>(std::chrono::duration_cast<std::chrono::microseconds>(p2 - p1).count()));
  EXPECT_EQ(runToString(*inst->agent, {"echo", "after-resume"}), "after-resume\n");

  // The guest has no host files: the host's hostname file is not what it sees.
  EXPECT_EQ(runToString(*inst->agent, {"hostname"}), "space\n");

  // A daemon restart: the host side goes away and reattaches from the persisted state alone. The
  // agent sees its port hang up, waits, and serves the new session on the same device.
  inst->agent.reset();
  auto again = runtime_->reattach(inst->persisted);
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_EQ(runToString(*again->agent, {"echo", "reattached"}), "reattached\n");
  inst->agent = again->agent;

  auto usage = runtime_->usage(inst->persisted);
  ASSERT_TRUE(usage) << usage.error().message;
  EXPECT_GT(usage->memory_bytes, 0u);

  pid_t pid = inst->pid;
  ASSERT_TRUE(runtime_->destroy(inst->persisted));
  EXPECT_FALSE(isQemuOf(pid, inst->persisted.state["dir"]));
  EXPECT_TRUE(runtime_->destroy(inst->persisted)) << "destroy must be idempotent";
}

TEST_F(VmBootTest, RestoresFromTemplateWithoutChangingIt) {
  runtime::SandboxSpec spec;
  spec.id = "sb-tpl";
  spec.limits.memory_bytes = 256ull << 20;
  std::string tpl = (state_ / "template").string();
  auto t0 = Clock::now();
  auto ref = runtime_->warmTemplate(spec, tpl);
  ASSERT_TRUE(ref) << ref.error().message;
  std::printf("template warm (boot + save): %lld ms\n",
              static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count()));
  auto mem_before = std::filesystem::last_write_time(tpl + "/memory");

  for (int i = 0; i < 2; ++i) {
    runtime::SandboxSpec r = spec;
    r.id = "sb-restored-" + std::to_string(i);
    auto r0 = Clock::now();
    auto inst = runtime_->restore(*ref, r);
    ASSERT_TRUE(inst) << inst.error().message;
    std::string out = runToString(*inst->agent, {"uname", "-r"});
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - r0).count();
    std::printf("restore to first output: %lld ms\n", static_cast<long long>(ms));
    utsname host{};
    uname(&host);
    EXPECT_FALSE(out.empty());
    EXPECT_NE(out, std::string(host.release) + "\n");
    // Writes inside a restored guest land in its private copy, never in the template's memory file.
    EXPECT_EQ(runToString(*inst->agent, {"sh", "-c", "head -c 33554432 /dev/zero > /tmp/fill && echo ok"}), "ok\n");
    ASSERT_TRUE(runtime_->destroy(inst->persisted));
  }
  EXPECT_EQ(std::filesystem::last_write_time(tpl + "/memory"), mem_before);
}

}  // namespace
}  // namespace space::vm
