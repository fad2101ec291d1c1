// API key secrets: generated from the kernel-seeded OpenSSL RNG, stored only as a SHA-256 digest.
#pragma once

#include <string>
#include <string_view>

#include "common/result.h"

namespace space::store {

// "space_" followed by 32 random bytes in unpadded base64url (43 characters).
Result<std::string> generateApiKeySecret();

// Lowercase hex SHA-256; what the database holds instead of the secret.
std::string sha256Hex(std::string_view data);

// The first characters of a secret, kept in clear so a user can tell their keys apart in a list.
std::string apiKeyPrefix(std::string_view secret);

// Random bytes as lowercase hex, for ids and temporary names.
Result<std::string> randomHex(size_t bytes);

}  // namespace space::store
