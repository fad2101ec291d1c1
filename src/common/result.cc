#include "common/result.h"

#include <cstring>

namespace space {

const char* errorKindName(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kInvalidArgument:
      return "invalid_argument";
    case ErrorKind::kNotFound:
      return "not_found";
    case ErrorKind::kConflict:
      return "conflict";
    case ErrorKind::kUnauthenticated:
      return "unauthenticated";
    case ErrorKind::kResourceExhausted:
      return "resource_exhausted";
    case ErrorKind::kUnsupported:
      return "unsupported";
    case ErrorKind::kUnavailable:
      return "unavailable";
    case ErrorKind::kInternal:
      return "internal";
  }
  return "internal";
}

std::string describeErrno(int err) {
  char buf[128];
  // GNU strerror_r returns a pointer that may or may not be buf.
  const char* s = strerror_r(err, buf, sizeof buf);
  return s;
}

}  // namespace space

namespace space {

ErrorKind sysErrorKind(int err) {
  if (err == ENOSPC || err == EDQUOT || err == EMFILE || err == ENFILE) return ErrorKind::kResourceExhausted;
  return ErrorKind::kInternal;
}

ErrorKind clientSysErrorKind(int err) {
  if (err == ENOENT) return ErrorKind::kNotFound;
  if (err == EINVAL || err == ENAMETOOLONG || err == ELOOP || err == EXDEV || err == ENOTDIR || err == EISDIR ||
      err == EEXIST || err == ENOTEMPTY)
    return ErrorKind::kInvalidArgument;
  return sysErrorKind(err);
}

}  // namespace space
