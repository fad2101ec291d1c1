#include "sys/landlock.h"

#include <linux/landlock.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace space::sys {

Result<int> landlockAbiVersion() {
  long abi = syscall(SYS_landlock_create_ruleset, nullptr, 0, LANDLOCK_CREATE_RULESET_VERSION);
  if (abi < 0) return sysError(errno, "landlock_create_ruleset(VERSION)");
  return static_cast<int>(abi);
}

Result<UniqueFd> landlockCreateRuleset(uint64_t handled_access_fs) {
  landlock_ruleset_attr attr{};
  attr.handled_access_fs = handled_access_fs;
  // Size of the v1 struct: newer fields (handled_access_net, scoped) stay unset, which every ABI accepts.
  long fd = syscall(SYS_landlock_create_ruleset, &attr, sizeof attr, 0);
  if (fd < 0) return sysError(errno, "landlock_create_ruleset(fs={:#x})", handled_access_fs);
  return UniqueFd(static_cast<int>(fd));
}

Status landlockAllowBeneath(int ruleset_fd, int dir_fd, uint64_t allowed_access) {
  landlock_path_beneath_attr attr{};
  attr.allowed_access = allowed_access;
  attr.parent_fd = dir_fd;
  if (syscall(SYS_landlock_add_rule, ruleset_fd, LANDLOCK_RULE_PATH_BENEATH, &attr, 0) < 0)
    return sysError(errno, "landlock_add_rule(path_beneath, access={:#x})", allowed_access);
  return ok();
}

Status landlockRestrictSelf(int ruleset_fd) {
  if (syscall(SYS_landlock_restrict_self, ruleset_fd, 0) < 0) return sysError(errno, "landlock_restrict_self");
  return ok();
}

}  // namespace space::sys
