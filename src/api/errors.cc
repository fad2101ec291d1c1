#include "api/errors.h"

#include <cerrno>

namespace space::api {

int httpStatus(const Error& error) {
  switch (error.kind) {
    case ErrorKind::kInvalidArgument:
      return 400;
    case ErrorKind::kNotFound:
      return 404;
    case ErrorKind::kConflict:
      return 409;
    case ErrorKind::kUnauthenticated:
      return 401;
    case ErrorKind::kResourceExhausted:
      // Out of storage is not something the caller fixes by waiting; everything else (quota, pool) is.
      return error.sys_errno == ENOSPC || error.sys_errno == EDQUOT ? 507 : 429;
    case ErrorKind::kUnsupported:
      return 501;
    case ErrorKind::kUnavailable:
      return 503;
    case ErrorKind::kInternal:
      return 500;
  }
  return 500;
}

nlohmann::json errorJson(std::string_view code, std::string_view message, std::string_view reason) {
  nlohmann::json j = {{"error", {{"code", code}, {"message", message}}}};
  if (!reason.empty()) j["error"]["reason"] = reason;
  return j;
}

Status sendJson(http::ResponseWriter& resp, int status, const nlohmann::json& body) {
  // Replace, not throw, on invalid UTF-8 that came from inside a sandbox (file names, labels).
  return resp.send(status, "application/json",
                   body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
}

Status sendError(http::ResponseWriter& resp, const Error& error) {
  nlohmann::json body = errorJson(errorKindName(error.kind), error.message, error.reason);
  // What was not found, so a client can point at the right listing ("sandbox", "file", ...).
  if (!error.resource.empty()) body["error"]["resource"] = error.resource;
  return sendJson(resp, httpStatus(error), body);
}

Status sendError(http::ResponseWriter& resp, int status, std::string_view code, std::string_view message,
                 std::string_view reason) {
  return sendJson(resp, status, errorJson(code, message, reason));
}

}  // namespace space::api
