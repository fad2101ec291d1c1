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
  KvmVerdict failed{.state = KvmState::kFailed, .reason = "guest did not answer in 20 s under KVM",
                    .checked_at = "2026-12-01T08:00:00Z", .probe_ms = 20010};
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

// Checked from the host: a confined QEMU started under -accel kvm holds /dev/kvm open read-write, its
// /dev/kvm is its own node (its uid, 0600, the host's device number), and the host's node is one that uid
// could not have opened. This holds on a host whose KVM then fails to run the guest too.
TEST(ConfinedVmm, OpensItsOwnKvmNodeReadWrite) {
  if (geteuid() != 0) GTEST_SKIP() << "the VMM is confined by root";
  if (auto v = kvmPreflight(); v) GTEST_SKIP() << "KVM cannot be opened here: " << v->reason;
  std::string dir = guestDir();
  if (access((dir + "/vmlinuz").c_str(), R_OK) != 0 || access((dir + "/initramfs.cpio").c_str(), R_OK) != 0)
    GTEST_SKIP() << "no guest artifacts in " << dir << " (scripts/vm/build-guest)";
  if (access("/usr/bin/qemu-system-x86_64", X_OK) != 0) GTEST_SKIP() << "qemu-system-x86_64 not installed";
  TempDir d;
  fs::create_directories(d.path / "root");
  fs::create_directories(d.path / "vm");
  chmod(d.path.c_str(), 0755);
  QemuSpec spec;
  spec.accel = Accel::kKvm;
  spec.kernel = fs::canonical(dir + "/vmlinuz").string();
  spec.initrd = fs::canonical(dir + "/initramfs.cpio").string();
  spec.dir = (d.path / "vm").string();
  spec.memory_mib = 128;
  VmmJail jail;
  jail.uid = jail.gid = 0x3F100000;
  jail.root_dir = (d.path / "root").string();
  jail.read_only = {spec.kernel, spec.initrd};
  jail.writable = {spec.dir};
  jail.devices = {"/dev/null", "/dev/urandom"};
  jail.kvm = true;
  auto proc = launchConfinedQemu(spec, jail);
  ASSERT_TRUE(proc) << proc.error().message;
  std::string proc_dir = "/proc/" + std::to_string(proc->pid);
  bool found = false;
  int flags = -1;
  for (int i = 0; i < 200 && !found; ++i) {
    std::error_code ec;
    for (const auto& fd : fs::directory_iterator(proc_dir + "/fd", ec)) {
      std::error_code lec;
      if (fs::read_symlink(fd.path(), lec) != "/dev/kvm") continue;
      found = true;
      std::ifstream info(proc_dir + "/fdinfo/" + fd.path().filename().string());
      std::string key;
      while (info >> key) {
        if (key == "flags:") {
          info >> std::oct >> flags;
          break;
        }
      }
      break;
    }
    if (!found) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  struct stat node{}, host{};
  int node_rc = stat((proc_dir + "/root/dev/kvm").c_str(), &node);
  ASSERT_EQ(stat("/dev/kvm", &host), 0);
  std::string log;
  {
    std::ifstream in(spec.dir + "/qemu.log");
    std::stringstream ss;
    ss << in.rdbuf();
    log = ss.str();
  }
  kill(proc->pid, SIGKILL);
  waitpid(proc->pid, nullptr, 0);
  ASSERT_TRUE(found) << "the confined VMM never held /dev/kvm open; its log: " << log;
  EXPECT_EQ(flags & O_ACCMODE, O_RDWR) << "flags " << std::oct << flags;
  ASSERT_EQ(node_rc, 0);
  EXPECT_TRUE(S_ISCHR(node.st_mode));
  EXPECT_EQ(node.st_rdev, host.st_rdev);
  EXPECT_EQ(node.st_uid, jail.uid);
  EXPECT_EQ(node.st_mode & 07777, 0600u);
  // The host's node: not the VMM's, and not open to others (root:kvm 0660 or root:root 0600), so only the
  // VMM's own node can have let it in.
  EXPECT_NE(host.st_uid, jail.uid);
  EXPECT_EQ(host.st_mode & 0006, 0u);
  EXPECT_EQ(log.find("Permission denied"), std::string::npos) << log;
}

}  // namespace
}  // namespace space::vm
