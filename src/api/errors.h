// How errors reach API clients: {"error":{"code":"<errorKindName>","message":"...","reason"?:"...",
// "resource"?:"sandbox"}} with the HTTP status of the error's kind; "reason" only where the error has one
// (Error::reason), "resource" names what was not found, when known.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "common/result.h"
#include "http/message.h"

namespace space::api {

int httpStatus(const Error& error);

// A kNotFound from an agent operation is about what the request named inside the sandbox (a file, a
// process): tag it so, unless it already says what it is.
template <class T>
Result<T> about(const char* resource, Result<T> r) {
  if (!r && r.error().kind == ErrorKind::kNotFound && r.error().resource.empty()) r.error().resource = resource;
  return r;
}
nlohmann::json errorJson(std::string_view code, std::string_view message, std::string_view reason = {});
Status sendJson(http::ResponseWriter& resp, int status, const nlohmann::json& body);
Status sendError(http::ResponseWriter& resp, const Error& error);
Status sendError(http::ResponseWriter& resp, int status, std::string_view code, std::string_view message,
                 std::string_view reason = {});

}  // namespace space::api
