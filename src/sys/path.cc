#include "sys/path.h"

#include <climits>
#include <cstdlib>

namespace space::sys {

std::string parentOf(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == 0 || slash == std::string::npos ? "/" : path.substr(0, slash);
}

Result<std::string> realPath(const std::string& path) {
  char buf[PATH_MAX];
  if (!::realpath(path.c_str(), buf)) return sysError(errno, "resolve {}", path);
  return std::string(buf);
}

}  // namespace space::sys
