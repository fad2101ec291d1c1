// Request-target and endpoint parsing: untrusted input, so every function answers instead of asserting.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/result.h"

namespace space::http {

// "%2Fa+b" -> "/a b" (plus only in queries). kInvalidArgument on bad escapes or NUL.
Result<std::string> percentDecode(std::string_view in, bool plus_is_space);
std::string percentEncode(std::string_view in);

struct Target {
  std::string path;
  std::vector<std::pair<std::string, std::string>> query;
};
Result<Target> parseTarget(std::string_view target);

// Where the CLI finds spaced: unix:///run/space/spaced.sock or http://host:port.
struct Endpoint {
  bool is_unix = true;
  std::string path;  // unix
  std::string host;  // tcp
  std::string port;
  std::string text;  // as given, for messages
};
Result<Endpoint> parseEndpoint(std::string_view spec);

}  // namespace space::http
