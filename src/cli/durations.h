// Durations as people type them on the command line: "1500ms", "0.5s", "30m", "1h30m", "2d", or a bare
// number of seconds. Errors name the flag the user typed, never the API field it becomes.
#pragma once

#include <chrono>
#include <cstdint>
#include <string_view>

#include "common/result.h"

namespace space::cli {

// Go's time.ParseDuration units (ms, s, m, h; also us and ns) plus d; terms add up ("1m30s").
Result<std::chrono::milliseconds> parseDuration(std::string_view flag, std::string_view text);
// For fields the API keeps in seconds with a fraction (exec timeout_s): at most `max`.
Result<double> durationSeconds(std::string_view flag, std::string_view text, std::chrono::seconds max);
// For fields the API keeps in whole seconds (ttl_s, idle_pause_s): "1500ms" is refused, not rounded.
Result<int64_t> wholeSeconds(std::string_view flag, std::string_view text, std::chrono::seconds max);

}  // namespace space::cli
