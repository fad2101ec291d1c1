// openat2(2) with RESOLVE_IN_ROOT: a path looked up inside a tree as if the tree were "/", so that
// absolute symlinks and ".." in it stay inside the tree (a template's /bin/sh -> /bin/busybox names the
// tree's busybox, never the host's).
#pragma once

#include <string>

#include "common/result.h"
#include "common/unique_fd.h"

namespace space::sys {

// Opens path (absolute or relative, both resolved from root_fd) with flags; magic links (/proc/*/fd) are
// refused, since they would lead out of the tree.
Result<UniqueFd> openInRoot(int root_fd, const std::string& path, int flags);

}  // namespace space::sys
