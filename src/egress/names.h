// Host name normalisation: every name from a sandbox (DNS question, SNI, Host, CONNECT) and every domain
// in a policy passes through here before matching, so "API.Example.com." and "api.example.com" are one name
// and a Unicode look-alike becomes its distinct xn-- A-label (E7).
#pragma once

#include <string>
#include <string_view>

#include "common/result.h"

namespace space::egress {

// Lowercase, strip one trailing dot, IDNA2008 (UTS#46 non-transitional) to A-labels via libidn2, then
// require LDH labels of 1..63 bytes and at most 253 bytes in all. Rejects empty labels, "_", spaces, NULs.
Result<std::string> normalizeName(std::string_view name);

// For policy patterns: "*.example.com" keeps its "*." prefix and normalises the rest.
Result<std::string> normalizePattern(std::string_view pattern);

// "*.example.com" matches "a.example.com" and "a.b.example.com", never "example.com" or "xexample.com".
bool nameMatches(std::string_view pattern, std::string_view name);

}  // namespace space::egress
