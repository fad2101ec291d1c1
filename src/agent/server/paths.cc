#include "agent/server/paths.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace space::agent {
namespace {

// openat2(2): the kernel takes struct open_how by pointer plus its size (for extension). With
// RESOLVE_IN_ROOT, dirfd acts as "/" for the whole walk; EAGAIN means a concurrent rename raced the
// walk and the call may be retried.
int sysOpenat2(int dirfd, const char* path, uint64_t flags, uint64_t mode, uint64_t resolve) {
  open_how how{};
  how.flags = flags;
  how.mode = mode;
  how.resolve = resolve;
  return static_cast<int>(syscall(SYS_openat2, dirfd, path, &how, sizeof how));
}

}  // namespace

std::vector<std::string> pathComponents(std::string_view path) {
  std::vector<std::string> parts;
  size_t i = 0;
  while (i <= path.size()) {
    size_t j = path.find('/', i);
    if (j == std::string_view::npos) j = path.size();
    std::string_view part = path.substr(i, j - i);
    if (part == "..") {
      if (!parts.empty()) parts.pop_back();
    } else if (!part.empty() && part != ".") {
      parts.emplace_back(part);
    }
    i = j + 1;
  }
  return parts;
}

std::string joinComponents(const std::vector<std::string>& parts, size_t count) {
  std::string out = "/";
  for (size_t i = 0; i < count && i < parts.size(); ++i) {
    if (i > 0) out += '/';
    out += parts[i];
  }
  return out;
}

Result<UniqueFd> openInRoot(int root_fd, std::string_view path, int flags, mode_t mode) {
  if (path.find('\0') != std::string_view::npos) return makeError(ErrorKind::kInvalidArgument, "path contains NUL");
  std::string p = joinComponents(pathComponents(path), SIZE_MAX);
  for (int attempt = 0;; ++attempt) {
    int fd = sysOpenat2(root_fd, p.c_str(), static_cast<uint64_t>(flags | O_CLOEXEC), mode,
                        RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS);
    if (fd >= 0) return UniqueFd(fd);
    if (errno == EAGAIN && attempt < 16) continue;
    return clientSysError(errno, "open {}", p);
  }
}

Result<ParentRef> openParent(int root_fd, std::string_view path) {
  if (path.find('\0') != std::string_view::npos) return makeError(ErrorKind::kInvalidArgument, "path contains NUL");
  auto parts = pathComponents(path);
  ParentRef ref;
  if (!parts.empty()) {
    ref.name = parts.back();
    parts.pop_back();
  }
  ASSIGN_OR_RETURN(ref.dir, openInRoot(root_fd, joinComponents(parts, parts.size()), O_PATH | O_DIRECTORY));
  return ref;
}

Result<std::string> readSmallFile(int root_fd, std::string_view path, size_t max) {
  ASSIGN_OR_RETURN(UniqueFd fd, openInRoot(root_fd, path, O_RDONLY | O_NONBLOCK | O_NOCTTY));
  struct stat st {};
  if (fstat(fd.get(), &st) < 0) return clientSysError(errno, "fstat {}", path);
  if (!S_ISREG(st.st_mode)) return makeError(ErrorKind::kInvalidArgument, "{} is not a regular file", path);
  std::string out;
  char buf[16384];
  for (;;) {
    ssize_t n = read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return clientSysError(errno, "read {}", path);
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
    if (out.size() > max) return makeError(ErrorKind::kResourceExhausted, "{} larger than {} bytes", path, max);
  }
  return out;
}

}  // namespace space::agent
