// AES-256-GCM through OpenSSL's EVP interface: the one authenticated cipher SPACE uses for data at rest
// (secrets in the store, snapshot chunks, wrapped data keys). A sealed message is
// nonce (12 bytes, random per message) || ciphertext || tag (16 bytes).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "common/result.h"

namespace space::crypto {

inline constexpr size_t kAesKeyBytes = 32, kGcmNonceBytes = 12, kGcmTagBytes = 16;
inline constexpr size_t kGcmOverhead = kGcmNonceBytes + kGcmTagBytes;

// Encrypts plaintext under a 32-byte key with a fresh random nonce; aad is authenticated, not stored.
Result<std::string> aesGcmSeal(std::string_view key, std::string_view aad, std::string_view plaintext);

// Opens what aesGcmSeal made. Any change to the sealed bytes, the key or the aad fails with
// kUnauthenticated; a message shorter than nonce + tag fails with kInvalidArgument.
Result<std::string> aesGcmOpen(std::string_view key, std::string_view aad, std::string_view sealed);

// Fills out with cryptographically random bytes (keys, nonces, ids).
Status randomBytes(std::string& out, size_t n);

}  // namespace space::crypto
