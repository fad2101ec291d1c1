// The new mount API (open_tree, move_mount, mount_setattr) and pivot_root: none have glibc wrappers on
// Debian 12. Each returns the kernel's errno in the Error.
#pragma once

#include <sys/types.h>

#include <string>

#include "common/result.h"
#include "common/unique_fd.h"

namespace space::sys {

// open_tree(2) with OPEN_TREE_CLONE: a detached copy of the mount at `path` (recursive if asked). The
// copy is invisible until move_mount attaches it, and vanishes when the fd closes unattached.
Result<UniqueFd> openTreeClone(const std::string& path, bool recursive);

// mount_setattr(2) on a detached tree: `attr_set` is MOUNT_ATTR_* bits; when it holds MOUNT_ATTR_IDMAP,
// `userns_fd` names the user namespace whose mapping is applied (the kernel requires the tree to be
// detached, not yet idmapped, and the namespace to have a mapping already written).
Status mountSetattr(int tree_fd, uint64_t attr_set, int userns_fd);

// move_mount(2): attaches the detached tree `tree_fd` at `target`.
Status moveMountTo(int tree_fd, const std::string& target);

// pivot_root(2): `new_root` must be a mount point in the caller's mount namespace, not shared with its
// parent mount (make "/" private first). pivot_root(".", ".") stacks the old root on top of the new one.
Status pivotRoot(const std::string& new_root, const std::string& put_old);

}  // namespace space::sys
