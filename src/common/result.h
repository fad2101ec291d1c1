// Result<T>: the return type of every fallible function. An Error carries a kind (what the caller can
// do about it), the errno where a syscall failed, and a message with the arguments of the failing call.
#pragma once

#include <fmt/format.h>

#include <cerrno>
#include <string>
#include <tl/expected.hpp>
#include <utility>

namespace space {

enum class ErrorKind {
  kInvalidArgument,    // the caller sent something malformed or out of range (HTTP 400)
  kNotFound,           // 404
  kConflict,           // wrong state for the operation (409)
  kUnauthenticated,    // 401
  kResourceExhausted,  // quota, pool, disk (429 / 507)
  kUnsupported,        // the runtime cannot do this (501)
  kUnavailable,        // transient: agent gone, daemon busy (503)
  kInternal,           // a broken invariant or an unexpected syscall failure (500)
};

const char* errorKindName(ErrorKind kind);

struct Error {
  ErrorKind kind = ErrorKind::kInternal;
  int sys_errno = 0;  // 0 when the error did not come from a syscall
  std::string message;
  // For kNotFound: what was not found ("sandbox", "snapshot", "template", "file", "process", "key",
  // "secret"), so that clients can say what to do about it; empty when unknown.
  std::string resource;
  // A stable detail clients may branch on where the kind alone is ambiguous, e.g. "executable_not_found"
  // (a 404 that is not about the sandbox); empty for most errors.
  std::string reason;

  // Prepends context: "start sandbox sb-1: mount overlay at /x: Permission denied".
  Error& context(std::string_view what) {
    message = fmt::format("{}: {}", what, message);
    return *this;
  }
};

template <class T>
using Result = tl::expected<T, Error>;
using Status = Result<void>;

inline tl::unexpected<Error> makeError(ErrorKind kind, std::string message) {
  return tl::unexpected<Error>(Error{kind, 0, std::move(message)});
}

template <class... Args>
tl::unexpected<Error> makeError(ErrorKind kind, fmt::format_string<Args...> f, Args&&... args) {
  return makeError(kind, fmt::format(f, std::forward<Args>(args)...));
}

// kNotFound naming the kind of object that is missing.
template <class... Args>
tl::unexpected<Error> notFoundError(std::string resource, fmt::format_string<Args...> f, Args&&... args) {
  return tl::unexpected<Error>(
      Error{ErrorKind::kNotFound, 0, fmt::format(f, std::forward<Args>(args)...), std::move(resource)});
}

// An error from a syscall: the message names the call and its arguments, then strerror(errno). Inside
// SPACE a failing syscall is SPACE's own problem (500), whatever its errno: a host-side ENOENT must not
// reach a client as "not found". Only a full disk or descriptor table says what it is (507/429).
std::string describeErrno(int err);
ErrorKind sysErrorKind(int err);
ErrorKind clientSysErrorKind(int err);
template <class... Args>
tl::unexpected<Error> sysError(int err, fmt::format_string<Args...> f, Args&&... args) {
  return tl::unexpected<Error>(Error{
      sysErrorKind(err), err, fmt::format("{}: {}", fmt::format(f, std::forward<Args>(args)...), describeErrno(err))});
}
// For a syscall on a value the client gave (a path in its sandbox, a file of its own, the directory it
// asked a template be built from): the errno is the client's to fix, so ENOENT is 404, EEXIST or EISDIR
// 400, and so on.
template <class... Args>
tl::unexpected<Error> clientSysError(int err, fmt::format_string<Args...> f, Args&&... args) {
  return tl::unexpected<Error>(
      Error{clientSysErrorKind(err), err,
            fmt::format("{}: {}", fmt::format(f, std::forward<Args>(args)...), describeErrno(err))});
}

inline Status ok() { return {}; }

}  // namespace space

// TRY(expr): evaluate a Result; on error return it from the enclosing function.
#define SPACE_CONCAT_INNER(a, b) a##b
#define SPACE_CONCAT(a, b) SPACE_CONCAT_INNER(a, b)
#define TRY(expr)                                                                    \
  do {                                                                               \
    auto SPACE_CONCAT(try_result_, __LINE__) = (expr);                               \
    if (!SPACE_CONCAT(try_result_, __LINE__)) {                                      \
      return tl::unexpected(std::move(SPACE_CONCAT(try_result_, __LINE__)).error()); \
    }                                                                                \
  } while (0)

// ASSIGN_OR_RETURN(auto x, expr): like TRY, and binds the value.
#define ASSIGN_OR_RETURN(lhs, expr)                                                   \
  auto SPACE_CONCAT(assign_result_, __LINE__) = (expr);                               \
  if (!SPACE_CONCAT(assign_result_, __LINE__)) {                                      \
    return tl::unexpected(std::move(SPACE_CONCAT(assign_result_, __LINE__)).error()); \
  }                                                                                   \
  lhs = std::move(*SPACE_CONCAT(assign_result_, __LINE__))
