// Boots a real microVM (TCG here, KVM where usable) from the artifacts of scripts/vm/build-guest and
// checks, from the host, that commands run under the guest's own kernel.
#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "runtime/host/cgroup.h"
#include "runtime/vm/vm_runtime.h"

namespace space::vm {
namespace {

// Per process: two suites on one host (a hidden-KVM run beside a normal one) must not share VM cgroups.
std::string cgroupParent() { return "space-test-vm-" + std::to_string(getpid()); }

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

std::string sha256File(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr);
  std::vector<char> buf(1 << 20);
  while (in.read(buf.data(), static_cast<std::streamsize>(buf.size())) || in.gcount() > 0)
    EVP_DigestUpdate(ctx, buf.data(), static_cast<size_t>(in.gcount()));
  unsigned char md[32];
  unsigned len = 0;
  EVP_DigestFinal_ex(ctx, md, &len);
  EVP_MD_CTX_free(ctx);
  std::string hex;
  for (unsigned i = 0; i < len; ++i) hex += fmt::format("{:02x}", md[i]);
  return hex;
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
    if (!onPath("qemu-img")) GTEST_SKIP() << "qemu-img not installed (package qemu-utils)";
    if (geteuid() != 0) GTEST_SKIP() << "the VMM is confined by root (namespaces, cgroups, uid change)";
    state_ = std::filesystem::temp_directory_path() / ("space-vm-test-" + std::to_string(getpid()));
    std::filesystem::create_directories(state_);
    VmConfig config;
    config.state_dir = state_;
    config.kernel = dir + "/vmlinuz";
    config.initrd = dir + "/initramfs.cpio";
    config.cgroup_parent = cgroupParent();
    auto rt = VmRuntime::create(config);
    ASSERT_TRUE(rt) << rt.error().message;
    runtime_ = std::move(*rt);
  }
  void TearDown() override {
    if (!state_.empty()) std::filesystem::remove_all(state_);
    runtime_.reset();
    if (auto cgroups = host::makeCgroupBackend(cgroupParent())) (void)(*cgroups)->removeParent();
  }

  // A tiny root filesystem: static busybox and its applets.
  std::string makeRootfs() {
    std::string root = (state_ / "rootfs").string();
    std::string cmd = "scripts/make-busybox-rootfs " + root + " >/dev/null";
    std::string full = "cd " + std::string(SPACE_SOURCE_DIR) + " && " + cmd;
    EXPECT_EQ(std::system(full.c_str()), 0);
    std::ofstream(root + "/etc/marker") << "from-the-template\n";
    return root;
  }

  std::filesystem::path state_;
  std::unique_ptr<VmRuntime> runtime_;
};

TEST_F(VmBootTest, ColdBootRunsTheGuestKernelInAConfinedVmm) {
  runtime::SandboxSpec spec;
  spec.id = "sb-vmtest";
  spec.uid_base = 0x3F000000;
  spec.limits.memory_bytes = 256ull << 20;
  auto t0 = Clock::now();
  auto inst = runtime_->bootCold(spec);
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

  // V2, checked from the host: the VMM is an unprivileged uid with no_new_privs and seccomp, in its own
  // mount and pid namespaces, in a cgroup of its own.
  pid_t pid = inst->pid;
  EXPECT_EQ(procField(pid, "status", "Uid"), "1056964608\t1056964608\t1056964608\t1056964608");
  EXPECT_EQ(procField(pid, "status", "NoNewPrivs"), "1");
  EXPECT_EQ(procField(pid, "status", "Seccomp"), "2");
  EXPECT_EQ(procField(pid, "status", "CapEff"), "0000000000000000");
  for (const char* ns : {"mnt", "pid", "net"}) {
    auto mine = std::filesystem::read_symlink(std::string("/proc/self/ns/") + ns);
    auto its = std::filesystem::read_symlink("/proc/" + std::to_string(pid) + "/ns/" + ns);
    EXPECT_NE(mine, its) << ns;
  }
  std::ifstream cg("/proc/" + std::to_string(pid) + "/cgroup");
  std::string cgroups((std::istreambuf_iterator<char>(cg)), std::istreambuf_iterator<char>());
  EXPECT_NE(cgroups.find(cgroupParent() + "/sb-vmtest"), std::string::npos) << cgroups;
  // Its root holds /usr, the guest's kernel and initramfs, its own directory, a few devices: no host
  // home, no /etc, no state of other sandboxes.
  std::string root = "/proc/" + std::to_string(pid) + "/root";
  EXPECT_TRUE(std::filesystem::exists(root + "/usr/bin"));
  EXPECT_FALSE(std::filesystem::exists(root + "/etc/passwd"));
  EXPECT_FALSE(std::filesystem::exists(root + "/root"));
  EXPECT_FALSE(std::filesystem::exists(root + "/dev/sda"));

  // Pause and resume go through QMP (stop/cont); the agent answers again afterwards.
  ASSERT_TRUE(runtime_->pause(*inst));
  ASSERT_TRUE(runtime_->resume(*inst));
  EXPECT_EQ(runToString(*inst->agent, {"echo", "after-resume"}), "after-resume\n");

  // A daemon restart: the host side goes away and reattaches from the persisted state alone.
  inst->agent.reset();
  auto again = runtime_->reattach(inst->persisted);
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_EQ(runToString(*again->agent, {"echo", "reattached"}), "reattached\n");
  inst->agent = again->agent;

  auto usage = runtime_->usage(inst->persisted);
  ASSERT_TRUE(usage) << usage.error().message;
  EXPECT_GT(usage->memory_bytes, 0u);

  ASSERT_TRUE(runtime_->destroy(inst->persisted));
  EXPECT_FALSE(isQemuOf(pid, inst->persisted.state["dir"]));
  EXPECT_FALSE(std::filesystem::exists("/sys/fs/cgroup/memory/" + cgroupParent() + "/sb-vmtest"));
  EXPECT_TRUE(runtime_->destroy(inst->persisted)) << "destroy must be idempotent";
}

TEST_F(VmBootTest, RestoredVmsRunTheTemplatesDiskDivergeAndLeaveTheTemplateUnchanged) {
  runtime::SandboxSpec spec;
  spec.template_rootfs = makeRootfs();
  spec.template_id = "tpl-test";
  spec.limits.memory_bytes = 256ull << 20;
  spec.limits.disk_bytes = 64ull << 20;
  auto t0 = Clock::now();
  auto tpl = runtime_->ensureTemplate(spec);
  ASSERT_TRUE(tpl) << tpl.error().message;
  std::printf("template warm (image + boot + save): %lld ms\n",
              static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count()));
  std::map<std::string, std::string> before;
  for (const auto& f : {tpl->memory, tpl->state, tpl->disk, tpl->base_image}) before[f] = sha256File(f);

  std::vector<runtime::Instance> vms;
  for (int i = 0; i < 2; ++i) {
    runtime::SandboxSpec r = spec;
    r.id = "sb-restored-" + std::to_string(i);
    r.uid_base = 0x3F010000 + static_cast<uint32_t>(i) * 65536;
    auto r0 = Clock::now();
    auto inst = runtime_->prepare(r);
    ASSERT_TRUE(inst) << inst.error().message;
    auto r1 = Clock::now();
    ASSERT_TRUE(runtime_->activate(*inst));
    std::string out = runToString(*inst->agent, {"uname", "-r"});
    auto r2 = Clock::now();
    std::printf("prepare %lld ms, activate to first output %lld ms\n",
                static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(r1 - r0).count()),
                static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(r2 - r1).count()));
    utsname host{};
    uname(&host);
    EXPECT_FALSE(out.empty());
    EXPECT_NE(out, std::string(host.release) + "\n");
    // The root filesystem is the template's, from virtio-blk.
    EXPECT_EQ(runToString(*inst->agent, {"cat", "/etc/marker"}), "from-the-template\n");
    agent::Identity id;
    id.hostname = r.id;
    id.rng_seed_hex = i == 0 ? std::string(64, 'a') : std::string(64, 'b');
    id.machine_id = fmt::format("{:032x}", i + 1);
    ASSERT_TRUE(inst->agent->setIdentity(id));
    vms.push_back(std::move(*inst));
  }
  // V4: own RNG state, hostname and machine id.
  std::string r0 = runToString(*vms[0].agent, {"sh", "-c", "head -c 16 /dev/urandom | od -An -tx1"});
  std::string r1 = runToString(*vms[1].agent, {"sh", "-c", "head -c 16 /dev/urandom | od -An -tx1"});
  EXPECT_FALSE(r0.empty());
  EXPECT_NE(r0, r1);
  EXPECT_EQ(runToString(*vms[0].agent, {"hostname"}), "sb-restored-0\n");
  EXPECT_EQ(runToString(*vms[1].agent, {"hostname"}), "sb-restored-1\n");
  EXPECT_NE(runToString(*vms[0].agent, {"cat", "/etc/machine-id"}),
            runToString(*vms[1].agent, {"cat", "/etc/machine-id"}));

  // V3: one guest writes most of its memory and its disk; the template and the other VM see nothing.
  EXPECT_EQ(
      runToString(*vms[0].agent,
                  {"sh", "-c", "echo changed > /etc/marker && head -c 100000000 /dev/zero > /dev/shm/fill && echo ok"}),
      "ok\n");
  EXPECT_EQ(runToString(*vms[1].agent, {"cat", "/etc/marker"}), "from-the-template\n");
  EXPECT_EQ(runToString(*vms[0].agent, {"cat", "/etc/marker"}), "changed\n");
  for (auto& vm : vms) ASSERT_TRUE(runtime_->destroy(vm.persisted));
  for (const auto& [f, sum] : before) EXPECT_EQ(sha256File(f), sum) << f;
}

}  // namespace
}  // namespace space::vm
