// Checks on identifiers and values that arrive in URLs and bodies, with messages that say what to fix.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/result.h"

namespace space::api {

// Sandbox, process and key ids, template names: [A-Za-z0-9._-], 1..64 characters, not starting with '.'.
Status checkName(std::string_view what, std::string_view value);
// An absolute path inside the sandbox (the agent resolves it within the sandbox root).
Status checkSandboxPath(std::string_view what, std::string_view path);
// "TERM", "SIGTERM", "15" -> 15.
Result<int> parseSignal(std::string_view text);
// "0644" -> 0644 (octal, permission bits only).
Result<uint32_t> parseMode(std::string_view text);
// "1", "true", "yes" -> true; "0", "false", "no", "" -> false.
Result<bool> parseFlag(std::string_view what, std::string_view text);
// A query integer within [min, max].
Result<int64_t> parseQueryInt(std::string_view what, std::string_view text, int64_t min, int64_t max);

}  // namespace space::api
