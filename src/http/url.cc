#include "http/url.h"

namespace space::http {
namespace {

int hexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

Result<std::string> percentDecode(std::string_view in, bool plus_is_space) {
  std::string out;
  out.reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    char c = in[i];
    if (c == '%') {
      if (i + 2 >= in.size()) {
        return makeError(ErrorKind::kInvalidArgument, "truncated percent escape in '{}'", in);
      }
      int hi = hexValue(in[i + 1]), lo = hexValue(in[i + 2]);
      if (hi < 0 || lo < 0) return makeError(ErrorKind::kInvalidArgument, "bad percent escape in '{}'", in);
      c = static_cast<char>(hi * 16 + lo);
      i += 2;
    } else if (c == '+' && plus_is_space) {
      c = ' ';
    }
    // A NUL would truncate the string at the first C API that sees it (paths inside the sandbox).
    if (c == '\0') return makeError(ErrorKind::kInvalidArgument, "NUL byte in request target");
    out.push_back(c);
  }
  return out;
}

std::string percentEncode(std::string_view in) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : in) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
        c == '.' || c == '~' || c == '/') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

Result<Target> parseTarget(std::string_view target) {
  if (target.empty() || target[0] != '/') {
    return makeError(ErrorKind::kInvalidArgument, "request target must be an absolute path");
  }
  Target t;
  size_t q = target.find('?');
  ASSIGN_OR_RETURN(t.path, percentDecode(target.substr(0, q), false));
  if (q == std::string_view::npos) return t;
  std::string_view rest = target.substr(q + 1);
  size_t hash = rest.find('#');
  if (hash != std::string_view::npos) rest = rest.substr(0, hash);
  while (!rest.empty()) {
    size_t amp = rest.find('&');
    std::string_view pair = rest.substr(0, amp);
    rest = amp == std::string_view::npos ? std::string_view{} : rest.substr(amp + 1);
    if (pair.empty()) continue;
    size_t eq = pair.find('=');
    ASSIGN_OR_RETURN(std::string key, percentDecode(pair.substr(0, eq), true));
    std::string value;
    if (eq != std::string_view::npos) {
      ASSIGN_OR_RETURN(value, percentDecode(pair.substr(eq + 1), true));
    }
    if (t.query.size() >= 64) return makeError(ErrorKind::kInvalidArgument, "too many query parameters");
    t.query.emplace_back(std::move(key), std::move(value));
  }
  return t;
}

Result<Endpoint> parseEndpoint(std::string_view spec) {
  Endpoint e;
  e.text = std::string(spec);
  if (spec.starts_with("unix://")) {
    e.is_unix = true;
    e.path = std::string(spec.substr(7));
    if (e.path.empty() || e.path[0] != '/') {
      return makeError(ErrorKind::kInvalidArgument,
                       "'{}': a unix endpoint needs an absolute path, e.g. unix:///run/space/spaced.sock", spec);
    }
    return e;
  }
  if (spec.starts_with("http://")) {
    std::string_view hp = spec.substr(7);
    while (!hp.empty() && hp.back() == '/') hp.remove_suffix(1);
    size_t colon = hp.rfind(':');
    if (colon == std::string_view::npos || colon == 0 || colon + 1 == hp.size()) {
      return makeError(ErrorKind::kInvalidArgument, "'{}': expected http://HOST:PORT", spec);
    }
    e.is_unix = false;
    e.host = std::string(hp.substr(0, colon));
    if (e.host.size() > 2 && e.host.front() == '[' && e.host.back() == ']')
      e.host = e.host.substr(1, e.host.size() - 2);
    e.port = std::string(hp.substr(colon + 1));
    return e;
  }
  return makeError(ErrorKind::kInvalidArgument, "'{}': expected unix:///PATH or http://HOST:PORT", spec);
}

}  // namespace space::http
