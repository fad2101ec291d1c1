// How errors reach API clients: {"error":{"code":"<errorKindName>","message":"..."}} with the HTTP status
// of the error's kind.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/result.h"
#include "http/message.h"

namespace space::api {

int httpStatus(const Error& error);
nlohmann::json errorJson(std::string_view code, std::string_view message);
Status sendJson(http::ResponseWriter& resp, int status, const nlohmann::json& body);
Status sendError(http::ResponseWriter& resp, const Error& error);
Status sendError(http::ResponseWriter& resp, int status, std::string_view code, std::string_view message);

}  // namespace space::api
