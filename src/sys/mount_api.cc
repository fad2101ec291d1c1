#include "sys/mount_api.h"

#include <fcntl.h>
#include <linux/mount.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace space::sys {

Result<UniqueFd> openTreeClone(const std::string& path, bool recursive) {
  unsigned flags = OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC;
  if (recursive) flags |= AT_RECURSIVE;
  long fd = syscall(SYS_open_tree, AT_FDCWD, path.c_str(), flags);
  if (fd < 0) return sysError(errno, "open_tree({}, OPEN_TREE_CLONE)", path);
  return UniqueFd(static_cast<int>(fd));
}

Status mountSetattr(int tree_fd, uint64_t attr_set, int userns_fd) {
  mount_attr attr{};
  attr.attr_set = attr_set;
  if (attr_set & MOUNT_ATTR_IDMAP) attr.userns_fd = static_cast<uint64_t>(userns_fd);
  // "" + AT_EMPTY_PATH: operate on the tree the fd refers to.
  if (syscall(SYS_mount_setattr, tree_fd, "", AT_EMPTY_PATH | AT_RECURSIVE, &attr, sizeof attr) < 0)
    return sysError(errno, "mount_setattr(attr_set={:#x})", attr_set);
  return ok();
}

Status moveMountTo(int tree_fd, const std::string& target) {
  if (syscall(SYS_move_mount, tree_fd, "", AT_FDCWD, target.c_str(), MOVE_MOUNT_F_EMPTY_PATH) < 0)
    return sysError(errno, "move_mount to {}", target);
  return ok();
}

Status pivotRoot(const std::string& new_root, const std::string& put_old) {
  if (syscall(SYS_pivot_root, new_root.c_str(), put_old.c_str()) < 0)
    return sysError(errno, "pivot_root({}, {})", new_root, put_old);
  return ok();
}

}  // namespace space::sys
