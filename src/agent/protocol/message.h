// Control messages of the agent protocol: JSON objects carried by kHello and kControl frames. Both ends
// parse what the other sent as untrusted input (the agent is inside the sandbox, the host may be buggy),
// so parsing is bounded (payload size by the decoder, nesting depth here) and never throws.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "common/result.h"

namespace space::protocol {

inline constexpr size_t kDataChunk = 256u << 10;  // largest data payload either side sends
inline constexpr int kMaxJsonDepth = 32;          // deeper nesting is refused before parsing

// A JSON object from a control or hello payload; kInvalidArgument for anything else.
Result<nlohmann::json> parseControl(std::string_view payload);

// {"event":"error","kind":"not_found","errno":2,"message":"..."}
nlohmann::json errorEvent(const Error& error);
// The Error an error event describes; unknown kinds become kInternal.
Error errorFromEvent(const nlohmann::json& event);
std::optional<ErrorKind> errorKindFromName(std::string_view name);

// Typed field access that reports a missing or mistyped field as kInvalidArgument instead of throwing.
Result<std::string> getString(const nlohmann::json& msg, const char* key);
Result<int64_t> getInt(const nlohmann::json& msg, const char* key);
std::string optString(const nlohmann::json& msg, const char* key, std::string fallback = {});
int64_t optInt(const nlohmann::json& msg, const char* key, int64_t fallback);
bool optBool(const nlohmann::json& msg, const char* key, bool fallback);

}  // namespace space::protocol
