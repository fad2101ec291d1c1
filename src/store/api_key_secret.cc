#include "store/api_key_secret.h"

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

#include <vector>

#include "common/hex.h"

namespace space::store {
namespace {

constexpr std::string_view kSecretTag = "space_";
constexpr size_t kSecretBytes = 32;
// "space_" + 6 characters: 36 bits, enough to tell keys apart, far too few to help guess one.
constexpr size_t kPrefixLength = kSecretTag.size() + 6;

Result<std::vector<unsigned char>> randomBytes(size_t n) {
  std::vector<unsigned char> bytes(n);
  if (RAND_bytes(bytes.data(), static_cast<int>(n)) != 1) {
    return makeError(ErrorKind::kInternal, "RAND_bytes({}): OpenSSL error {:#x}", n, ERR_get_error());
  }
  return bytes;
}

std::string base64Url(const std::vector<unsigned char>& bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3) + 1, '\0');
  int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()), bytes.data(), static_cast<int>(bytes.size()));
  out.resize(n);
  while (!out.empty() && out.back() == '=') out.pop_back();
  for (char& c : out) {
    if (c == '+') c = '-';
    if (c == '/') c = '_';
  }
  return out;
}

}  // namespace

Result<std::string> generateApiKeySecret() {
  ASSIGN_OR_RETURN(auto bytes, randomBytes(kSecretBytes));
  return std::string(kSecretTag) + base64Url(bytes);
}

std::string sha256Hex(std::string_view data) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(), digest);
  return toHex(digest, sizeof digest);
}

std::string apiKeyPrefix(std::string_view secret) { return std::string(secret.substr(0, kPrefixLength)); }

Result<std::string> randomHex(size_t n) {
  ASSIGN_OR_RETURN(auto bytes, randomBytes(n));
  return toHex(bytes.data(), bytes.size());
}

}  // namespace space::store
