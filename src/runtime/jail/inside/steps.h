// The containment steps jailInit runs, in order (contain.cc holds the ordered table). Each is one concern,
// returns the failing syscall with its arguments, and may assume every earlier step has run.
#pragma once

#include <functional>
#include <string>

#include "common/result.h"
#include "runtime/jail/inside/handshake.h"

namespace space::jail {

// mounts.cc
Status enterMountCgroupTimeNamespaces();
Status makeMountsPrivate();
Status bindRootfs(const JailInitConfig& config);
Status mountProc(const JailInitConfig& config);
Status buildDev(const JailInitConfig& config);
Status maskProc(const JailInitConfig& config);
// A boot id of the sandbox's own over /proc/sys/kernel/random/boot_id (called by maskProc).
Status giveOwnBootId(const JailInitConfig& config);
Status pivotIntoRoot(const JailInitConfig& config);

// host_identity.cc
Status setHostname(const JailInitConfig& config);
Status bringUpLoopback();
Status setResourceLimits(const JailInitConfig& config);

// landlock.cc: returns a non-empty reason when Landlock is unavailable and the step was skipped.
Result<std::string> applyLandlock();

// caps.cc
Status dropCapabilities();

}  // namespace space::jail
