// User namespace id maps: the sandbox's root (0) and its whole range map onto a private, unprivileged host
// range [uid_base, uid_base + count). Never host root (J2).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "common/result.h"

namespace space::jail {

// "0 <base> <count>\n": one line, as /proc/<pid>/{uid,gid}_map expects (written in a single write()).
std::string idMapLine(uint32_t base, uint32_t count);

// Checks that a range is usable: non-empty, no overflow, and never containing host uid 0.
Status validateIdRange(uint32_t base, uint32_t count);

// Writes uid_map and gid_map of `pid` (a child that just entered a new user namespace). setgroups is left
// at "allow" on purpose: the child must drop the supplementary groups it inherited from spaced (host gid 0)
// with setgroups(0, NULL), and the agent needs setgroups to run commands as other users. The maps only
// cover the sandbox's own gids, so setgroups cannot reach any host group.
Status writeIdMaps(pid_t pid, uint32_t base, uint32_t count);

}  // namespace space::jail
