#include "egress/names.h"

#include <idn2.h>

#include <cstdlib>

namespace space::egress {

namespace {

bool isLdh(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'; }

Status checkLdh(std::string_view name) {
  if (name.empty()) return makeError(ErrorKind::kInvalidArgument, "empty name");
  if (name.size() > 253) return makeError(ErrorKind::kInvalidArgument, "name longer than 253 bytes");
  size_t start = 0;
  while (start <= name.size()) {
    size_t dot = name.find('.', start);
    if (dot == std::string_view::npos) dot = name.size();
    std::string_view label = name.substr(start, dot - start);
    if (label.empty() || label.size() > 63)
      return makeError(ErrorKind::kInvalidArgument, "bad label length in '{}'", name);
    if (label.front() == '-' || label.back() == '-')
      return makeError(ErrorKind::kInvalidArgument, "label starts or ends with '-' in '{}'", name);
    for (char c : label)
      if (!isLdh(c)) return makeError(ErrorKind::kInvalidArgument, "character not allowed in a host name");
    start = dot + 1;
  }
  return ok();
}

}  // namespace

Result<std::string> normalizeName(std::string_view in) {
  if (in.empty() || in.size() > 1024) return makeError(ErrorKind::kInvalidArgument, "bad name length");
  std::string name(in);
  for (char c : name)
    if (static_cast<unsigned char>(c) < 0x21 || c == 0x7f)
      return makeError(ErrorKind::kInvalidArgument, "control character or space in a name");
  if (name.back() == '.') name.pop_back();
  bool ascii = true;
  for (char& c : name) {
    if (static_cast<unsigned char>(c) >= 0x80) ascii = false;
    if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
  }
  if (!ascii || name.find("xn--") != std::string::npos) {
    // idn2 also validates existing A-labels (a bogus "xn--" label is rejected, not passed through).
    char* out = nullptr;
    int rc = idn2_lookup_u8(reinterpret_cast<const uint8_t*>(name.c_str()), reinterpret_cast<uint8_t**>(&out),
                            IDN2_NFC_INPUT | IDN2_NONTRANSITIONAL);
    if (rc != IDN2_OK)
      return makeError(ErrorKind::kInvalidArgument, "invalid internationalised name: {}", idn2_strerror(rc));
    name = out;
    idn2_free(out);
    for (char& c : name)
      if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
  }
  TRY(checkLdh(name));
  return name;
}

Result<std::string> normalizePattern(std::string_view pattern) {
  if (pattern.starts_with("*.")) {
    ASSIGN_OR_RETURN(auto rest, normalizeName(pattern.substr(2)));
    return "*." + rest;
  }
  return normalizeName(pattern);
}

bool nameMatches(std::string_view pattern, std::string_view name) {
  if (pattern.starts_with("*.")) {
    std::string_view suffix = pattern.substr(1);  // ".example.com"
    return name.size() > suffix.size() && name.ends_with(suffix);
  }
  return pattern == name;
}

}  // namespace space::egress
