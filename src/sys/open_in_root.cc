#include "sys/open_in_root.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace space::sys {

Result<UniqueFd> openInRoot(int root_fd, const std::string& path, int flags) {
  // The kernel takes struct open_how by pointer plus its size (for later extension). EAGAIN means a
  // rename raced the walk; the walk is then simply retried.
  open_how how{};
  how.flags = static_cast<uint64_t>(flags) | O_CLOEXEC;
  how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;
  for (int attempt = 0;; ++attempt) {
    long fd = ::syscall(SYS_openat2, root_fd, path.c_str(), &how, sizeof how);
    if (fd >= 0) return UniqueFd(static_cast<int>(fd));
    if (errno != EAGAIN || attempt >= 8) return sysError(errno, "open {} inside its tree", path);
  }
}

}  // namespace space::sys
