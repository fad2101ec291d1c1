#include "cli/durations.h"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <string>

namespace space::cli {
namespace {

// Milliseconds per unit; 0 for a unit SPACE does not know.
double unitMillis(std::string_view unit) {
  if (unit == "ns") return 1e-6;
  if (unit == "us" || unit == "µs") return 1e-3;
  if (unit == "ms") return 1;
  if (unit == "s" || unit.empty()) return 1000;
  if (unit == "m") return 60e3;
  if (unit == "h") return 3600e3;
  if (unit == "d") return 86400e3;
  return 0;
}

Error badDuration(std::string_view flag, std::string_view text) {
  return Error{ErrorKind::kInvalidArgument, 0,
               fmt::format("{} '{}': use a number with ms, s, m, h or d, e.g. 1500ms, 0.5s, 30m, 1h30m", flag, text)};
}

}  // namespace

Result<std::chrono::milliseconds> parseDuration(std::string_view flag, std::string_view text) {
  std::string s(text);
  if (s.empty()) return tl::unexpected(badDuration(flag, text));
  double total_ms = 0;
  size_t pos = 0;
  while (pos < s.size()) {
    // A term is a non-negative decimal number and its unit; only a lone number may go without one.
    if (!std::isdigit(static_cast<unsigned char>(s[pos])) && s[pos] != '.')
      return tl::unexpected(badDuration(flag, text));
    char* end = nullptr;
    double v = std::strtod(s.c_str() + pos, &end);
    size_t number_end = static_cast<size_t>(end - s.c_str());
    if (number_end == pos || !std::isfinite(v)) return tl::unexpected(badDuration(flag, text));
    size_t unit_end = number_end;
    while (unit_end < s.size() && !std::isdigit(static_cast<unsigned char>(s[unit_end])) && s[unit_end] != '.')
      ++unit_end;
    std::string_view unit(s.data() + number_end, unit_end - number_end);
    double per = unitMillis(unit);
    if (per == 0 || (unit.empty() && (pos != 0 || unit_end != s.size())))
      return tl::unexpected(badDuration(flag, text));
    total_ms += v * per;
    pos = unit_end;
  }
  if (total_ms > 1e15) return tl::unexpected(badDuration(flag, text));
  return std::chrono::milliseconds(std::llround(total_ms));
}

Result<double> durationSeconds(std::string_view flag, std::string_view text, std::chrono::seconds max) {
  ASSIGN_OR_RETURN(auto d, parseDuration(flag, text));
  if (d > max)
    return makeError(ErrorKind::kInvalidArgument, "{} '{}' is longer than the most allowed, {}s", flag, text,
                     max.count());
  return static_cast<double>(d.count()) / 1000.0;
}

Result<int64_t> wholeSeconds(std::string_view flag, std::string_view text, std::chrono::seconds max) {
  ASSIGN_OR_RETURN(auto d, parseDuration(flag, text));
  if (d.count() % 1000 != 0) {
    return makeError(ErrorKind::kInvalidArgument,
                     "{} '{}': give whole seconds (e.g. 2s, 30m); it is counted in seconds", flag, text);
  }
  if (d > max)
    return makeError(ErrorKind::kInvalidArgument, "{} '{}' is longer than the most allowed, {}s", flag, text,
                     max.count());
  return static_cast<int64_t>(d.count() / 1000);
}

}  // namespace space::cli
