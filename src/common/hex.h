// Lowercase hexadecimal encoding of bytes (digests, random ids, keys in text form).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace space {

std::string toHex(const unsigned char* data, size_t n);
inline std::string toHex(std::string_view bytes) {
  return toHex(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size());
}

// Decodes lowercase hex; nullopt for an odd length or any other character (upper case included, so one
// text has exactly one spelling).
std::optional<std::string> fromHex(std::string_view hex);

}  // namespace space
