#include "core/manager_factory.h"

#include <sys/stat.h>

#include <spdlog/spdlog.h>

#include "core/manager_impl.h"
#include "runtime/jail/jail_runtime.h"

namespace space::core {

Result<std::unique_ptr<SandboxManager>> makeSandboxManager(const DaemonConfig& config) {
  if (mkdir(config.state_dir.c_str(), 0711) < 0 && errno != EEXIST)
    return sysError(errno, "create state directory {}", config.state_dir);
  // Each sandbox's init resolves its root under <state_dir>/sandboxes as its own unprivileged uid before
  // pivot_root: the state directory must be traversable (x) by others, never readable.
  struct stat st;
  if (stat(config.state_dir.c_str(), &st) < 0) return sysError(errno, "stat {}", config.state_dir);
  if ((st.st_mode & 0011) != 0011 && chmod(config.state_dir.c_str(), (st.st_mode & 07777) | 0011) < 0)
    return sysError(errno, "make state directory {} traversable", config.state_dir);
  ASSIGN_OR_RETURN(auto store, store::Store::open(config.state_dir));

  jail::JailConfig jail_config;
  jail_config.state_dir = config.state_dir;
  jail_config.agent_binary = config.agent_binary;
  jail_config.seccomp_policy = config.seccomp_policy;
  jail_config.cgroup_parent = config.cgroup_parent;
  ASSIGN_OR_RETURN(auto jail, jail::JailRuntime::create(jail_config));

  // The vm tier: present when the guest artifacts and QEMU are; a node without them runs jails only and
  // says why to every vm request.
  std::unique_ptr<vm::VmRuntime> vm;
  std::string vm_unavailable;
  {
    vm::VmConfig vm_config;
    vm_config.state_dir = config.state_dir;
    vm_config.kernel = config.vm_kernel;
    vm_config.initrd = config.vm_initrd;
    vm_config.allow_tcg = config.vm_allow_tcg;
    vm_config.cgroup_parent = config.cgroup_parent;
    auto made = vm::VmRuntime::create(vm_config);
    if (made) {
      vm = std::move(*made);
    } else {
      vm_unavailable = made.error().message;
      spdlog::info("vm tier unavailable: {}", vm_unavailable);
    }
  }

  auto templates = std::make_unique<store::TemplateBuilder>(config.state_dir, *store);
  if (auto st = templates->removeInterruptedBuilds(); !st) return tl::unexpected(st.error());
  auto manager = std::make_unique<Manager>(config, std::move(store), std::move(jail), std::move(vm),
                                            std::move(vm_unavailable), std::move(templates));
  TRY(manager->startBackground());
  return std::unique_ptr<SandboxManager>(std::move(manager));
}

}  // namespace space::core
