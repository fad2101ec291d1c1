#include "agent/protocol/message.h"

namespace space::protocol {
namespace {

// nlohmann's parser is iterative, but destroying and printing values recurses: refuse deep nesting
// before any value is built. Brackets inside strings do not count.
bool nestingWithin(std::string_view s, int max_depth) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (char c : s) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"')
      in_string = true;
    else if (c == '[' || c == '{') {
      if (++depth > max_depth) return false;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return true;
}

}  // namespace

Result<nlohmann::json> parseControl(std::string_view payload) {
  if (!nestingWithin(payload, kMaxJsonDepth))
    return makeError(ErrorKind::kInvalidArgument, "control message nested deeper than {}", kMaxJsonDepth);
  nlohmann::json msg = nlohmann::json::parse(payload.begin(), payload.end(), nullptr, /*allow_exceptions=*/false);
  if (msg.is_discarded()) return makeError(ErrorKind::kInvalidArgument, "control message is not valid JSON");
  if (!msg.is_object()) return makeError(ErrorKind::kInvalidArgument, "control message is not a JSON object");
  return msg;
}

nlohmann::json errorEvent(const Error& error) {
  nlohmann::json ev = {{"event", "error"}, {"kind", errorKindName(error.kind)}, {"message", error.message}};
  if (error.sys_errno != 0) ev["errno"] = error.sys_errno;
  if (!error.reason.empty()) ev["reason"] = error.reason;
  return ev;
}

std::optional<ErrorKind> errorKindFromName(std::string_view name) {
  for (ErrorKind k :
       {ErrorKind::kInvalidArgument, ErrorKind::kNotFound, ErrorKind::kConflict, ErrorKind::kUnauthenticated,
        ErrorKind::kResourceExhausted, ErrorKind::kUnsupported, ErrorKind::kUnavailable, ErrorKind::kInternal}) {
    if (name == errorKindName(k)) return k;
  }
  return std::nullopt;
}

Error errorFromEvent(const nlohmann::json& event) {
  Error e;
  e.kind = errorKindFromName(optString(event, "kind")).value_or(ErrorKind::kInternal);
  e.sys_errno = static_cast<int>(optInt(event, "errno", 0));
  e.message = optString(event, "message", "agent error without message");
  e.reason = optString(event, "reason");
  return e;
}

Result<std::string> getString(const nlohmann::json& msg, const char* key) {
  auto it = msg.find(key);
  if (it == msg.end() || !it->is_string())
    return makeError(ErrorKind::kInvalidArgument, "field \"{}\" must be a string", key);
  return it->get<std::string>();
}

Result<int64_t> getInt(const nlohmann::json& msg, const char* key) {
  auto it = msg.find(key);
  if (it == msg.end() || !it->is_number_integer())
    return makeError(ErrorKind::kInvalidArgument, "field \"{}\" must be an integer", key);
  return it->get<int64_t>();
}

std::string optString(const nlohmann::json& msg, const char* key, std::string fallback) {
  if (!msg.is_object()) return fallback;
  auto it = msg.find(key);
  return it != msg.end() && it->is_string() ? it->get<std::string>() : fallback;
}

int64_t optInt(const nlohmann::json& msg, const char* key, int64_t fallback) {
  if (!msg.is_object()) return fallback;
  auto it = msg.find(key);
  return it != msg.end() && it->is_number_integer() ? it->get<int64_t>() : fallback;
}

bool optBool(const nlohmann::json& msg, const char* key, bool fallback) {
  if (!msg.is_object()) return fallback;
  auto it = msg.find(key);
  return it != msg.end() && it->is_boolean() ? it->get<bool>() : fallback;
}

}  // namespace space::protocol
