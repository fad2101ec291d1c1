#include "core/manager_factory.h"

#include <sys/stat.h>

#include "core/manager_impl.h"
#include "runtime/jail/jail_runtime.h"

namespace space::core {

Result<std::unique_ptr<SandboxManager>> makeSandboxManager(const DaemonConfig& config) {
  if (mkdir(config.state_dir.c_str(), 0711) < 0 && errno != EEXIST)
    return sysError(errno, "create state directory {}", config.state_dir);
  ASSIGN_OR_RETURN(auto store, store::Store::open(config.state_dir));

  jail::JailConfig jail_config;
  jail_config.state_dir = config.state_dir;
  jail_config.agent_binary = config.agent_binary;
  jail_config.seccomp_policy = config.seccomp_policy;
  ASSIGN_OR_RETURN(auto jail, jail::JailRuntime::create(jail_config));

  auto templates = std::make_unique<store::TemplateBuilder>(config.state_dir, *store);
  if (auto st = templates->removeInterruptedBuilds(); !st) return tl::unexpected(st.error());
  auto manager = std::make_unique<Manager>(config, std::move(store), std::move(jail), std::move(templates));
  TRY(manager->startBackground());
  return std::unique_ptr<SandboxManager>(std::move(manager));
}

}  // namespace space::core
