// Launching a jail's init (space-agent --jail-init) and building its root from the host side.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "common/result.h"
#include "common/unique_fd.h"

namespace space::jail {

struct AgentChild {
  pid_t pid = 0;
  UniqueFd pidfd;
};

// clone3 into new user, pid, net, ipc and uts namespaces. The child runs only a pre-exec stub of raw,
// async-signal-safe syscalls (spaced is multi-threaded): it blocks on `child_sync_fd` until the host sends
// the go byte, then drops inherited supplementary groups, becomes uid/gid 0 of its namespace (host
// uid_base: J2), resets signal state, marks every fd but the two it needs close-on-exec, and execveat()s
// the agent binary (opened O_PATH beforehand) with an empty environment: nothing of spaced's environment
// or fd table crosses into the sandbox (J13).
Result<AgentChild> spawnAgentChild(int agent_binary_fd, int child_sync_fd, int listen_fd, int stdio_fd);

// Host-side root build, between the id maps and the go byte: an idmapped, read-only, recursive clone of the
// template at <dir>/lower (files owned by host root appear owned by the sandbox's root), and an overlay
// (lower + <dir>/disk/upper + <dir>/disk/work, on the sandbox's layer disk) at <dir>/rootfs. `userns_pid` names the
// child whose user namespace supplies the id mapping.
Status buildRootfs(pid_t userns_pid, const std::string& template_rootfs, const std::string& dir);

// Lazily unmounts <dir>/rootfs, <dir>/lower and <dir>/disk in the host's namespace (repeatedly, in case of stacking).
// Once the sandbox has pivoted, its own copies keep the overlay alive; no mount of a running sandbox stays
// visible on the host.
void unmountHostCopies(const std::string& dir);

// Field 22 of /proc/<pid>/stat (start time in clock ticks since boot): with the pid, identifies a process
// across pid reuse.
Result<uint64_t> processStartTime(pid_t pid);

}  // namespace space::jail
