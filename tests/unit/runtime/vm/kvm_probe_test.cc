// The KVM checks that need no VM, the verdict cache, and — from the host — the /dev/kvm a confined VMM
// gets: its own node, which it opens read-write whatever the host node's owner and mode.
#include "runtime/vm/kvm_probe.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "runtime/vm/confine.h"

namespace space::vm {
namespace {

namespace fs = std::filesystem;

struct TempDir {
  fs::path path;
  TempDir() {
    char tmpl[] = "/tmp/space-kvm-test-XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path); }
};

TEST(KvmPreflight, AMissingNodeIsAbsent) {
  auto v = kvmPreflight("/nonexistent/kvm");
  ASSERT_TRUE(v);
  EXPECT_EQ(v->state, KvmState::kAbsent);
  EXPECT_EQ(v->reason, "/nonexistent/kvm absent");
  EXPECT_FALSE(v->usable());
}

TEST(KvmPreflight, ARegularFileIsNoKvm) {
  TempDir d;
  std::ofstream(d.path / "kvm") << "x";
  auto v = kvmPreflight((d.path / "kvm").string());
  ASSERT_TRUE(v);
  EXPECT_EQ(v->state, KvmState::kFailed);
  EXPECT_NE(v->reason.find("not a character device"), std::string::npos) << v->reason;
}

TEST(KvmPreflight, ACharacterDeviceThatIsNotKvmFailsTheApiCheck) {
  auto v = kvmPreflight("/dev/null");
  ASSERT_TRUE(v);
  EXPECT_EQ(v->state, KvmState::kFailed);
  EXPECT_NE(v->reason.find("KVM_GET_API_VERSION"), std::string::npos) << v->reason;
}

TEST(KvmProbeCache, KeepsOnlyProbeOutcomesAndMarksThemCached) {
  TempDir d;
  KvmProbeCache cache((d.path / "cache").string());
  EXPECT_FALSE(cache.read("k1"));
  KvmVerdict failed{.state = KvmState::kFailed,
                    .reason = "guest did not answer in 20 s under KVM",
                    .checked_at = "2026-12-01T08:00:00Z",
                    .probe_ms = 20010};
  ASSERT_TRUE(cache.write("k1", failed));
  auto back = cache.read("k1");
  ASSERT_TRUE(back);
  EXPECT_EQ(back->state, KvmState::kFailed);
  EXPECT_EQ(back->reason, failed.reason);
  EXPECT_EQ(back->probe_ms, 20010);
  EXPECT_TRUE(back->cached);
  EXPECT_FALSE(cache.read("k2")) << "another key is another verdict";
  // A torn file is no verdict: the next daemon probes again.
  std::ofstream(d.path / "cache" / "k3.json") << "{\"state\": \"pro";
  EXPECT_FALSE(cache.read("k3"));
  // A state that is not a probe outcome is never taken from the cache.
  std::ofstream(d.path / "cache" / "k4.json") << R"({"state": "probing"})";
  EXPECT_FALSE(cache.read("k4"));
  auto lock = cache.lock("k1");
  EXPECT_TRUE(lock) << lock.error().message;
}

TEST(KvmProbeKey, ChangesWithTheGuest) {
  TempDir d;
  std::string kernel = (d.path / "vmlinuz").string(), initrd = (d.path / "initrd").string();
  std::ofstream(kernel) << "kernel";
  std::ofstream(initrd) << "initrd";
  std::string a = kvmProbeKey("qemu-system-x86_64", kernel, initrd);
  EXPECT_EQ(a, kvmProbeKey("qemu-system-x86_64", kernel, initrd));
  std::ofstream(initrd) << "a rebuilt initramfs";
  EXPECT_NE(a, kvmProbeKey("qemu-system-x86_64", kernel, initrd));
}

TEST(VmmRoot, KvmIsANodeOfTheVmmsOwnOnAReadOnlyDev) {
  struct stat host;
  if (stat("/dev/kvm", &host) < 0) GTEST_SKIP() << "no /dev/kvm on this host";
  VmmJail jail;
  jail.uid = jail.gid = 12345;
  jail.root_dir = "/R";
  jail.devices = {"/dev/null"};
  jail.kvm = true;
  auto plan = planVmmRoot(jail);
  ASSERT_TRUE(plan) << plan.error().message;
  int dev_tmpfs = -1, node = -1, readonly = -1;
  for (size_t i = 0; i < plan->size(); ++i) {
    const MountStep& s = (*plan)[i];
    if (s.kind == MountStep::kDevTmpfs && s.a == "/R/dev") dev_tmpfs = static_cast<int>(i);
    if (s.kind == MountStep::kCharDevice && s.a == "/R/dev/kvm") {
      node = static_cast<int>(i);
      EXPECT_EQ(s.rdev, host.st_rdev);
    }
    if (s.kind == MountStep::kRemountReadOnly && s.a == "/R/dev") readonly = static_cast<int>(i);
    EXPECT_FALSE((s.kind == MountStep::kBind || s.kind == MountStep::kBindReadOnly) && s.a == "/dev/kvm")
        << "the host's node is never bound in";
  }
  EXPECT_GE(dev_tmpfs, 0);
  EXPECT_GT(node, dev_tmpfs);
  EXPECT_GT(readonly, node);
}

std::string guestDir() {
  const char* env = std::getenv("SPACE_VM_DIR");
  return env ? env : "/var/cache/space/vm";
}

std::string readFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class ConfinedVmm : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "the VMM is confined by root";
    if (auto v = kvmPreflight(); v) GTEST_SKIP() << "KVM cannot be opened here: " << v->reason;
    std::string dir = guestDir();
    if (access((dir + "/vmlinuz").c_str(), R_OK) != 0 || access((dir + "/initramfs.cpio").c_str(), R_OK) != 0)
      GTEST_SKIP() << "no guest artifacts in " << dir << " (scripts/vm/build-guest)";
    if (access("/usr/bin/qemu-system-x86_64", X_OK) != 0) GTEST_SKIP() << "qemu-system-x86_64 not installed";
    fs::create_directories(d_.path / "root");
    fs::create_directories(d_.path / "vm");
    chmod(d_.path.c_str(), 0755);
    spec_.accel = Accel::kKvm;
    spec_.kernel = fs::canonical(dir + "/vmlinuz").string();
    spec_.initrd = fs::canonical(dir + "/initramfs.cpio").string();
    spec_.dir = (d_.path / "vm").string();
    spec_.memory_mib = 128;
    jail_.uid = jail_.gid = 0x3F100000;
    jail_.root_dir = (d_.path / "root").string();
    jail_.read_only = {spec_.kernel, spec_.initrd};
    jail_.writable = {spec_.dir};
    jail_.devices = {"/dev/null", "/dev/urandom"};
    jail_.kvm = true;
  }
  TempDir d_;
  QemuSpec spec_;
  VmmJail jail_;
};

// Checked from the host: a process confined exactly as a VMM under KVM (its uid, no groups, its root and
// /dev) holds /dev/kvm open read-write; that node is its own (its uid, 0600, the host's device number);
// and the host's node is one that uid could not have opened. A stand-in that opens the node and waits
// takes QEMU's place, because on a host whose KVM cannot run the guest QEMU may abort right after its open
// (then the open could only be raced, not observed). This holds on such hosts too.
TEST_F(ConfinedVmm, OpensItsOwnKvmNodeReadWrite) {
  std::string holder = spec_.dir + "/holder";
  {
    std::ofstream out(holder);
    out << "#!/bin/sh\n"
           "exec 3<>/dev/kvm || { echo 'open /dev/kvm failed'; exit 1; }\n"
           "echo opened\n"
           "exec sleep 60\n";
  }
  chmod(holder.c_str(), 0755);
  QemuSpec stand_in = spec_;
  stand_in.qemu = holder;
  auto proc = launchConfinedQemu(stand_in, jail_);
  ASSERT_TRUE(proc) << proc.error().message;
  std::string proc_dir = "/proc/" + std::to_string(proc->pid);
  std::string log;
  int flags = -1;
  for (int i = 0; i < 400 && flags < 0; ++i) {
    log = readFile(spec_.dir + "/qemu.log");
    if (log.find("failed") != std::string::npos) break;
    std::error_code ec;
    for (const auto& fd : fs::directory_iterator(proc_dir + "/fd", ec)) {
      std::error_code lec;
      if (fs::read_symlink(fd.path(), lec) != "/dev/kvm") continue;
      std::ifstream info(proc_dir + "/fdinfo/" + fd.path().filename().string());
      std::string key;
      while (info >> key)
        if (key == "flags:") {
          info >> std::oct >> flags;
          break;
        }
    }
    if (flags < 0) std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  struct stat node {
  }, host{};
  int node_rc = stat((proc_dir + "/root/dev/kvm").c_str(), &node);
  std::string uid_line;
  {
    std::ifstream st(proc_dir + "/status");
    std::string line;
    while (std::getline(st, line))
      if (line.rfind("Uid:", 0) == 0 || line.rfind("Groups:", 0) == 0) uid_line += line + "; ";
  }
  kill(proc->pid, SIGKILL);
  waitpid(proc->pid, nullptr, 0);
  ASSERT_GE(flags, 0) << "the confined process never held /dev/kvm open; its log: " << log;
  EXPECT_EQ(flags & O_ACCMODE, O_RDWR) << "flags " << std::oct << flags;
  EXPECT_NE(uid_line.find(std::to_string(jail_.uid)), std::string::npos) << uid_line;
  ASSERT_EQ(node_rc, 0);
  ASSERT_EQ(stat("/dev/kvm", &host), 0);
  EXPECT_TRUE(S_ISCHR(node.st_mode));
  EXPECT_EQ(node.st_rdev, host.st_rdev);
  EXPECT_EQ(node.st_uid, jail_.uid);
  EXPECT_EQ(node.st_mode & 07777, 0600u);
  // The host's node: not the VMM's, and not open to others (root:kvm 0660 or root:root 0600), so only the
  // VMM's own node can have let it in.
  EXPECT_NE(host.st_uid, jail_.uid);
  EXPECT_EQ(host.st_mode & 0006, 0u);
}

// The real QEMU, confined the same way, gets past opening KVM: whatever it says after (a host whose KVM
// cannot run the guest aborts here), it is never "Permission denied" on /dev/kvm.
TEST_F(ConfinedVmm, RealQemuIsNotRefusedKvm) {
  auto proc = launchConfinedQemu(spec_, jail_);
  ASSERT_TRUE(proc) << proc.error().message;
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  kill(proc->pid, SIGKILL);
  waitpid(proc->pid, nullptr, 0);
  std::string log = readFile(spec_.dir + "/qemu.log");
  EXPECT_EQ(log.find("Could not access KVM kernel module"), std::string::npos) << log;
  EXPECT_EQ(log.find("Permission denied"), std::string::npos) << log;
}

}  // namespace
}  // namespace space::vm
