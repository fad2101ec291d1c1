// The confined VMM's pre-exec stub: its table of steps, pinned; and real stubs (clone3 into new
// namespaces, as root) whose step fails, with the step's name in launchConfinedQemu's error. No QEMU, KVM
// or guest is needed: each launch fails before or at the exec.
#include "runtime/vm/vmm_stub.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace space::vm {
namespace {

namespace fs = std::filesystem;

TEST(VmmStub, StepTableIsPinned) {
  std::vector<std::string_view> want = {"die with spaced",
                                        "new session",
                                        "private mounts",
                                        "root tmpfs",
                                        "mount plan",
                                        "pivot root",
                                        "mount proc",
                                        "read-only root",
                                        "wait for go",
                                        "drop to vmm uid",
                                        "no new privs",
                                        "reset signals",
                                        "stdio",
                                        "inherited descriptors",
                                        "close-on-exec the rest",
                                        "outlive spaced",
                                        "execve"};
  EXPECT_EQ(vmmStubStepNames(), want);
  EXPECT_STREQ(vmmStubStepName(0), "die with spaced");
  EXPECT_STREQ(vmmStubStepName(static_cast<int>(want.size()) - 1), "execve");
  EXPECT_EQ(vmmStubStepName(-1), nullptr);
  EXPECT_EQ(vmmStubStepName(static_cast<int>(want.size())), nullptr);
}

std::string hostMountinfo() {
  std::ifstream in("/proc/self/mountinfo");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class VmmStubStepFails : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "the VMM stub runs as root (clone3 into new namespaces, mounts)";
    char tmpl[] = "/tmp/space-vmm-stub-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    chmod(dir_.c_str(), 0755);
    fs::create_directories(dir_ / "root");
    fs::create_directories(dir_ / "vm");
    // An executable the host can run but the VMM's root does not hold (only /usr and vm/ are bound in).
    fs::create_directories(dir_ / "outside");
    qemu_ = (dir_ / "outside" / "qemu").string();
    std::ofstream(qemu_) << "#!/bin/sh\nexit 0\n";
    chmod(qemu_.c_str(), 0755);
    spec_.qemu = qemu_;
    spec_.dir = (dir_ / "vm").string();
    jail_.uid = jail_.gid = 0x3F200000;
    jail_.root_dir = (dir_ / "root").string();
    jail_.writable = {spec_.dir};
    jail_.devices = {"/dev/null"};
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  fs::path dir_;
  std::string qemu_;
  QemuSpec spec_;
  VmmJail jail_;
};

TEST_F(VmmStubStepFails, AMissingRootFailsTheRootTmpfsStep) {
  jail_.root_dir = (dir_ / "no-such-root").string();
  auto proc = launchConfinedQemu(spec_, jail_);
  ASSERT_FALSE(proc);
  EXPECT_NE(proc.error().message.find("vmm stub step 'root tmpfs': No such file or directory"), std::string::npos)
      << proc.error().message;
  EXPECT_EQ(proc.error().sys_errno, ENOENT);
}

// Device nodes are bound by their host path (no realpath in the plan): a missing one fails in the stub,
// at its mount plan entry.
TEST_F(VmmStubStepFails, AMissingDeviceFailsItsMountPlanEntry) {
  jail_.devices = {"/dev/null", "/dev/space-no-such-device"};
  auto proc = launchConfinedQemu(spec_, jail_);
  ASSERT_FALSE(proc);
  const std::string& m = proc.error().message;
  EXPECT_NE(m.find("vmm stub step 'mount plan' (entry "), std::string::npos) << m;
  EXPECT_NE(m.find(": /dev/space-no-such-device " + jail_.root_dir + "/dev/space-no-such-device): No such file"),
            std::string::npos)
      << m;
  EXPECT_EQ(hostMountinfo().find(jail_.root_dir), std::string::npos) << "a stub mount reached the host";
}

// Every step up to the exec ran (root built, uid dropped, descriptors placed); QEMU's path is not in the
// VMM's root, so the exec is the step that fails, and nothing of the VMM's mounts is on the host.
TEST_F(VmmStubStepFails, AQemuOutsideTheVmmRootFailsTheExecStep) {
  auto proc = launchConfinedQemu(spec_, jail_);
  ASSERT_FALSE(proc);
  EXPECT_NE(proc.error().message.find("vmm stub step 'execve' (" + qemu_ + "): No such file or directory"),
            std::string::npos)
      << proc.error().message;
  EXPECT_EQ(hostMountinfo().find(jail_.root_dir), std::string::npos) << "a stub mount reached the host";
  // The same binary, bound into the root, gets past the exec.
  jail_.read_only = {(dir_ / "outside").string()};
  auto ran = launchConfinedQemu(spec_, jail_);
  ASSERT_TRUE(ran) << ran.error().message;
  waitpid(ran->pid, nullptr, 0);
}

}  // namespace
}  // namespace space::vm
