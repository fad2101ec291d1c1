// Path resolution beneath the agent's root. Every path the host names is resolved by the kernel with
// openat2(RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS) from a directory fd of the root: "..", absolute
// symlinks and symlink chains planted by sandbox code all stay inside the root, and /proc magic links
// cannot jump out (SECURITY.md J20). Final components are then used with *at() calls that do not follow
// symlinks, so a link swapped in after the check is not followed either.
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "common/unique_fd.h"

namespace space::agent {

// Lexical normalisation: "", ".", repeated slashes dropped, ".." pops (never above the root).
std::vector<std::string> pathComponents(std::string_view path);
std::string joinComponents(const std::vector<std::string>& parts, size_t count);

// openat2 beneath root_fd. flags gain O_CLOEXEC.
Result<UniqueFd> openInRoot(int root_fd, std::string_view path, int flags, mode_t mode = 0);

// The directory holding path's last component, and that component ("" when path is the root itself).
struct ParentRef {
  UniqueFd dir;
  std::string name;
};
Result<ParentRef> openParent(int root_fd, std::string_view path);

// Reads a small regular file beneath the root (e.g. etc/passwd); at most max bytes.
Result<std::string> readSmallFile(int root_fd, std::string_view path, size_t max);

}  // namespace space::agent
