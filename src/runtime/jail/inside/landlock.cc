// Landlock: a second, LSM-level wall behind seccomp and the missing CAP_MKNOD. The ruleset handles the
// device-creation rights and grants them nowhere, so no process in the sandbox can make a device node
// anywhere (J10), whatever capabilities or user namespaces it might gain.
#include "sys/landlock.h"

#include <linux/landlock.h>

#include "runtime/jail/inside/steps.h"

namespace space::jail {

Result<std::string> applyLandlock() {
  auto abi = sys::landlockAbiVersion();
  if (!abi) return "Landlock unavailable (" + abi.error().message + "); relying on seccomp and capabilities";
  // Only rights every ABI (v1+) knows; handling nothing else keeps ordinary file access untouched. Renames
  // across directories stay allowed: with no rule granting anything, source and destination carry the same
  // (empty) set of rights, which is what the kernel's REFER check compares (ABI v2+).
  uint64_t handled = LANDLOCK_ACCESS_FS_MAKE_CHAR | LANDLOCK_ACCESS_FS_MAKE_BLOCK;
  ASSIGN_OR_RETURN(UniqueFd ruleset, sys::landlockCreateRuleset(handled));
  TRY(sys::landlockRestrictSelf(ruleset.get()));
  return std::string();
}

}  // namespace space::jail
