// How errors reach API clients: {"error":{"code":"<errorKindName>","message":"...","reason"?:"..."}} with
// the HTTP status of the error's kind; "reason" only where the error has one (Error::reason).
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/result.h"
#include "http/message.h"

namespace space::api {

int httpStatus(const Error& error);
nlohmann::json errorJson(std::string_view code, std::string_view message, std::string_view reason = {});
Status sendJson(http::ResponseWriter& resp, int status, const nlohmann::json& body);
Status sendError(http::ResponseWriter& resp, const Error& error);
Status sendError(http::ResponseWriter& resp, int status, std::string_view code, std::string_view message,
                 std::string_view reason = {});

}  // namespace space::api
