// Lowercase hexadecimal encoding of bytes (digests, random ids).
#pragma once

#include <cstddef>
#include <string>

namespace space {

std::string toHex(const unsigned char* data, size_t n);

}  // namespace space
