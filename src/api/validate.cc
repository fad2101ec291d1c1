#include "api/validate.h"

#include <charconv>
#include <cstring>

namespace space::api {

Status checkName(std::string_view what, std::string_view value) {
  if (value.empty() || value.size() > 64) {
    return makeError(ErrorKind::kInvalidArgument, "{} must be 1 to 64 characters long", what);
  }
  if (value[0] == '.' || value[0] == '-') {
    return makeError(ErrorKind::kInvalidArgument, "{} must not start with '.' or '-'", what);
  }
  for (char c : value) {
    bool okc =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.';
    if (!okc) return makeError(ErrorKind::kInvalidArgument, "{} may hold only letters, digits, '.', '_' and '-'", what);
  }
  return ok();
}

Status checkSandboxPath(std::string_view what, std::string_view path) {
  if (path.empty()) return makeError(ErrorKind::kInvalidArgument, "{} is missing (e.g. ?path=/root/file.txt)", what);
  if (path[0] != '/')
    return makeError(ErrorKind::kInvalidArgument, "{} must be an absolute path inside the sandbox", what);
  if (path.size() > 4096) return makeError(ErrorKind::kInvalidArgument, "{} is longer than 4096 bytes", what);
  if (path.find('\0') != std::string_view::npos)
    return makeError(ErrorKind::kInvalidArgument, "{} contains a NUL byte", what);
  return ok();
}

Result<int> parseSignal(std::string_view text) {
  static const struct {
    const char* name;
    int number;
  } kSignals[] = {{"HUP", 1},   {"INT", 2},   {"QUIT", 3},  {"KILL", 9},  {"USR1", 10},  {"USR2", 12}, {"TERM", 15},
                  {"CONT", 18}, {"STOP", 19}, {"TSTP", 20}, {"ALRM", 14}, {"WINCH", 28}, {"PIPE", 13}, {"URG", 23}};
  std::string_view name = text;
  if (name.size() > 3 && (name.substr(0, 3) == "SIG" || name.substr(0, 3) == "sig")) name.remove_prefix(3);
  for (const auto& s : kSignals) {
    if (name.size() == std::strlen(s.name) && strncasecmp(name.data(), s.name, name.size()) == 0) return s.number;
  }
  int n = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec == std::errc() && p == text.data() + text.size() && n >= 1 && n <= 64) return n;
  return makeError(ErrorKind::kInvalidArgument, "unknown signal '{}' (use a name like TERM or KILL, or 1-64)",
                   text.substr(0, 32));
}

Result<uint32_t> parseMode(std::string_view text) {
  uint32_t mode = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), mode, 8);
  if (text.empty() || ec != std::errc() || p != text.data() + text.size() || mode > 07777) {
    return makeError(ErrorKind::kInvalidArgument, "mode '{}' must be octal permission bits such as 0644",
                     text.substr(0, 32));
  }
  return mode;
}

Result<bool> parseFlag(std::string_view what, std::string_view text) {
  if (text == "1" || text == "true" || text == "yes") return true;
  if (text.empty() || text == "0" || text == "false" || text == "no") return false;
  return makeError(ErrorKind::kInvalidArgument, "{} must be 0 or 1", what);
}

Result<int64_t> parseQueryInt(std::string_view what, std::string_view text, int64_t min, int64_t max) {
  int64_t v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || p != text.data() + text.size() || v < min || v > max) {
    return makeError(ErrorKind::kInvalidArgument, "{} must be an integer from {} to {}", what, min, max);
  }
  return v;
}

}  // namespace space::api
