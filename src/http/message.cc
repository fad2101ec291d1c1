#include "http/message.h"

namespace space::http {

std::optional<std::string> Request::queryValue(std::string_view key) const {
  for (const auto& [k, v] : query) {
    if (k == key) return v;
  }
  return std::nullopt;
}

std::vector<std::string> Request::queryValues(std::string_view key) const {
  std::vector<std::string> out;
  for (const auto& [k, v] : query) {
    if (k == key) out.push_back(v);
  }
  return out;
}

std::optional<std::string> Request::header(std::string_view lower_name) const {
  auto it = headers.find(std::string(lower_name));
  if (it == headers.end()) return std::nullopt;
  return it->second;
}

Result<std::string> readAll(BodyReader& body, size_t limit) {
  if (auto len = body.contentLength(); len && *len > limit) {
    return makeError(ErrorKind::kResourceExhausted, "request body of {} bytes exceeds the limit of {} bytes", *len,
                     limit);
  }
  std::string out;
  char buf[16384];
  for (;;) {
    ASSIGN_OR_RETURN(size_t n, body.read(buf, sizeof buf));
    if (n == 0) return out;
    if (out.size() + n > limit) {
      return makeError(ErrorKind::kResourceExhausted, "request body exceeds the limit of {} bytes", limit);
    }
    out.append(buf, n);
  }
}

}  // namespace space::http
