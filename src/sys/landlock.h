// Landlock syscalls (no glibc wrappers). Landlock is stackable, unprivileged LSM sandboxing: a ruleset
// restricts the calling thread and all its future children, and can never be lifted.
#pragma once

#include <cstdint>

#include "common/result.h"
#include "common/unique_fd.h"

namespace space::sys {

// The Landlock ABI version the running kernel offers; an error (EOPNOTSUPP / ENOSYS) when Landlock is
// disabled or absent.
Result<int> landlockAbiVersion();

// landlock_create_ruleset(2) for the given handled filesystem access bits (LANDLOCK_ACCESS_FS_*). Accesses
// handled but granted by no rule are denied everywhere.
Result<UniqueFd> landlockCreateRuleset(uint64_t handled_access_fs);

// landlock_add_rule(2) with LANDLOCK_RULE_PATH_BENEATH: grants `allowed_access` beneath the directory
// open as `dir_fd` (O_PATH is enough).
Status landlockAllowBeneath(int ruleset_fd, int dir_fd, uint64_t allowed_access);

// landlock_restrict_self(2): needs no_new_privs or CAP_SYS_ADMIN in the caller's user namespace.
Status landlockRestrictSelf(int ruleset_fd);

}  // namespace space::sys
