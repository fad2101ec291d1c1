// Landlock: a second, LSM-level wall behind seccomp and the missing CAP_MKNOD. The ruleset handles the
// device-creation rights and grants them nowhere, so no process in the sandbox can make a device node
// anywhere (J10), whatever capabilities or user namespaces it might gain.
// Cross-directory renames stay allowed (REFER granted beneath "/").
#include "sys/landlock.h"

#include <fcntl.h>
#include <linux/landlock.h>

#include "runtime/jail/inside/steps.h"

namespace space::jail {

Result<std::string> applyLandlock() {
  auto abi = sys::landlockAbiVersion();
  if (!abi) return "Landlock unavailable (" + abi.error().message + "); relying on seccomp and capabilities";
  // Every ruleset implicitly restricts moving files between directories (REFER). ABI v1 cannot grant it
  // back, and a sandbox where rename(2) across directories fails breaks package managers and git: skip.
  if (*abi < 2) return "Landlock ABI v1 would forbid cross-directory renames; relying on seccomp and capabilities";
  // Handle device creation (granted nowhere) and REFER (granted beneath "/", so renames and links keep
  // working: source and destination then carry the same rights, which is what the kernel compares).
  uint64_t handled = LANDLOCK_ACCESS_FS_MAKE_CHAR | LANDLOCK_ACCESS_FS_MAKE_BLOCK | LANDLOCK_ACCESS_FS_REFER;
  ASSIGN_OR_RETURN(UniqueFd ruleset, sys::landlockCreateRuleset(handled));
  UniqueFd root(open("/", O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!root) return sysError(errno, "open / for the Landlock rule");
  TRY(sys::landlockAllowBeneath(ruleset.get(), root.get(), LANDLOCK_ACCESS_FS_REFER));
  TRY(sys::landlockRestrictSelf(ruleset.get()));
  return std::string();
}

}  // namespace space::jail
