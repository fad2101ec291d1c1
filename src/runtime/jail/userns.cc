#include "runtime/jail/userns.h"

#include <fcntl.h>
#include <unistd.h>

#include <limits>

#include "common/unique_fd.h"

namespace space::jail {

namespace {
Status writeProcFile(const std::string& path, const std::string& content) {
  UniqueFd fd(open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd) return sysError(errno, "open {}", path);
  // The kernel accepts a map only in one write() call and only once per namespace.
  ssize_t n = write(fd.get(), content.data(), content.size());
  if (n < 0) return sysError(errno, "write '{}' to {}", content.substr(0, content.size() - 1), path);
  if (static_cast<size_t>(n) != content.size()) return sysError(EIO, "short write to {}", path);
  return ok();
}
}  // namespace

std::string idMapLine(uint32_t base, uint32_t count) { return fmt::format("0 {} {}\n", base, count); }

Status validateIdRange(uint32_t base, uint32_t count) {
  if (count == 0) return makeError(ErrorKind::kInvalidArgument, "uid range: count is 0");
  if (base == 0) return makeError(ErrorKind::kInvalidArgument, "uid range: base 0 would map host root");
  if (static_cast<uint64_t>(base) + count > std::numeric_limits<uint32_t>::max())
    return makeError(ErrorKind::kInvalidArgument, "uid range {}+{} overflows", base, count);
  return ok();
}

Status writeIdMaps(pid_t pid, uint32_t base, uint32_t count) {
  TRY(validateIdRange(base, count));
  std::string line = idMapLine(base, count);
  TRY(writeProcFile(fmt::format("/proc/{}/uid_map", pid), line));
  TRY(writeProcFile(fmt::format("/proc/{}/gid_map", pid), line));
  return ok();
}

}  // namespace space::jail
