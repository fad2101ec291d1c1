// VmRuntime's VMM launch seen through a test double in VmConfig::launch_vmm: what the VMM is to be
// confined to (its uid, files, devices, cgroup), and that a failed launch takes its cgroup back. No QEMU
// or guest is needed (the kernel and initramfs are placeholders the double never boots); the cgroups are
// real, so it runs as root.
#include "runtime/vm/vm_runtime.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

namespace space::vm {
namespace {

namespace fs = std::filesystem;

// Whether a group directory named id exists under the parent, on any hierarchy.
bool hasGroup(host::CgroupBackend& cgroups, const std::string& id) {
  auto groups = cgroups.listGroups();
  return std::any_of(groups.begin(), groups.end(), [&](const std::string& g) { return fs::path(g).filename() == id; });
}

TEST(VmRuntimeLaunch, HandsTheVmmItsConfinementAndTakesTheCgroupBackWhenTheLaunchFails) {
  if (geteuid() != 0) GTEST_SKIP() << "the VMM's cgroup is made by root";
  char tmpl[] = "/tmp/space-vm-launch-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  fs::path state = tmpl;
  std::ofstream(state / "vmlinuz") << "not a kernel";
  std::ofstream(state / "initramfs.cpio") << "not an initramfs";
  const std::string parent = "space-test-vmlaunch-" + std::to_string(getpid());
  auto cgroups = host::makeCgroupBackend(parent);
  ASSERT_TRUE(cgroups) << cgroups.error().message;

  VmConfig config;
  config.state_dir = (state / "state").string();
  config.kernel = (state / "vmlinuz").string();
  config.initrd = (state / "initramfs.cpio").string();
  config.accel = AccelMode::kTcg;
  config.cgroup_parent = parent;
  runtime::SandboxSpec spec;
  spec.id = "sb-launch";
  spec.uid_base = 0x3F300000;
  int calls = 0;
  QemuSpec seen_spec;
  VmmJail seen_jail;
  bool group_during_launch = false;
  config.launch_vmm = [&](const QemuSpec& q, const VmmJail& j) -> Result<QemuProcess> {
    ++calls;
    seen_spec = q;
    seen_jail = j;
    group_during_launch = hasGroup(**cgroups, spec.id);
    return makeError(ErrorKind::kInternal, "the double refuses to start a VMM");
  };
  auto rt = VmRuntime::create(config);
  ASSERT_TRUE(rt) << rt.error().message;

  auto inst = (*rt)->bootCold(spec);
  ASSERT_FALSE(inst);
  EXPECT_NE(inst.error().message.find("the double refuses to start a VMM"), std::string::npos) << inst.error().message;
  ASSERT_EQ(calls, 1);
  // The confinement the VMM was to get: the sandbox's uid, only its kernel, initramfs and directory, two
  // devices, no KVM under TCG, and its cgroup made before the launch.
  EXPECT_EQ(seen_jail.uid, spec.uid_base);
  EXPECT_EQ(seen_jail.gid, spec.uid_base);
  EXPECT_EQ(seen_jail.read_only,
            (std::vector<std::string>{fs::canonical(config.kernel).string(), fs::canonical(config.initrd).string()}));
  EXPECT_EQ(seen_jail.writable, (std::vector<std::string>{config.state_dir + "/vms/" + spec.id}));
  EXPECT_EQ(seen_jail.devices, (std::vector<std::string>{"/dev/null", "/dev/urandom"}));
  EXPECT_FALSE(seen_jail.kvm);
  EXPECT_EQ(seen_jail.root_dir, config.state_dir + "/vm/root");
  EXPECT_TRUE(static_cast<bool>(seen_jail.before_exec)) << "nothing would put the VMM into its cgroup";
  EXPECT_EQ(seen_spec.dir, config.state_dir + "/vms/" + spec.id);
  EXPECT_TRUE(group_during_launch) << "the VMM's cgroup did not exist when it was launched";
  EXPECT_FALSE(hasGroup(**cgroups, spec.id)) << "a failed launch left its cgroup";

  rt->reset();
  (*cgroups)->removeParent();
  fs::remove_all(state);
}

}  // namespace
}  // namespace space::vm
