#include "crypto/aes_gcm.h"

#include <openssl/evp.h>
#include <openssl/rand.h>

#include <climits>
#include <memory>

namespace space::crypto {
namespace {

using CipherCtx = std::unique_ptr<EVP_CIPHER_CTX, decltype(&EVP_CIPHER_CTX_free)>;

const unsigned char* bytes(std::string_view s) { return reinterpret_cast<const unsigned char*>(s.data()); }

}  // namespace

Status randomBytes(std::string& out, size_t n) {
  out.assign(n, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(out.data()), static_cast<int>(n)) != 1)
    return makeError(ErrorKind::kInternal, "RAND_bytes({}) failed", n);
  return ok();
}

Result<std::string> aesGcmSeal(std::string_view key, std::string_view aad, std::string_view plaintext) {
  if (key.size() != kAesKeyBytes)
    return makeError(ErrorKind::kInternal, "AES-256-GCM key is {} bytes, not 32", key.size());
  if (plaintext.size() > INT_MAX || aad.size() > INT_MAX)
    return makeError(ErrorKind::kInvalidArgument, "message too large to seal");
  std::string out;
  TRY(randomBytes(out, kGcmNonceBytes));
  out.resize(kGcmNonceBytes + plaintext.size() + kGcmTagBytes);
  auto* nonce = reinterpret_cast<unsigned char*>(out.data());
  auto* o = nonce + kGcmNonceBytes;
  CipherCtx ctx(EVP_CIPHER_CTX_new(), EVP_CIPHER_CTX_free);
  int len = 0, total = 0;
  if (!ctx || EVP_EncryptInit_ex(ctx.get(), EVP_aes_256_gcm(), nullptr, nullptr, nullptr) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_SET_IVLEN, kGcmNonceBytes, nullptr) != 1 ||
      EVP_EncryptInit_ex(ctx.get(), nullptr, nullptr, bytes(key), nonce) != 1 ||
      EVP_EncryptUpdate(ctx.get(), nullptr, &len, bytes(aad), static_cast<int>(aad.size())) != 1 ||
      EVP_EncryptUpdate(ctx.get(), o, &len, bytes(plaintext), static_cast<int>(plaintext.size())) != 1)
    return makeError(ErrorKind::kInternal, "AES-256-GCM seal failed");
  total = len;
  if (EVP_EncryptFinal_ex(ctx.get(), o + total, &len) != 1)
    return makeError(ErrorKind::kInternal, "AES-256-GCM seal failed");
  total += len;
  if (EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_GET_TAG, kGcmTagBytes, o + total) != 1)
    return makeError(ErrorKind::kInternal, "AES-256-GCM tag failed");
  return out;
}

Result<std::string> aesGcmOpen(std::string_view key, std::string_view aad, std::string_view sealed) {
  if (key.size() != kAesKeyBytes)
    return makeError(ErrorKind::kInternal, "AES-256-GCM key is {} bytes, not 32", key.size());
  if (sealed.size() < kGcmOverhead)
    return makeError(ErrorKind::kInvalidArgument, "sealed message is {} bytes, shorter than nonce and tag",
                     sealed.size());
  if (sealed.size() > INT_MAX || aad.size() > INT_MAX)
    return makeError(ErrorKind::kInvalidArgument, "sealed message too large");
  const unsigned char* nonce = bytes(sealed);
  size_t ct_len = sealed.size() - kGcmOverhead;
  std::string tag(sealed.substr(kGcmNonceBytes + ct_len));
  std::string out(ct_len, '\0');
  auto* o = reinterpret_cast<unsigned char*>(out.data());
  CipherCtx ctx(EVP_CIPHER_CTX_new(), EVP_CIPHER_CTX_free);
  int len = 0;
  if (!ctx || EVP_DecryptInit_ex(ctx.get(), EVP_aes_256_gcm(), nullptr, nullptr, nullptr) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_SET_IVLEN, kGcmNonceBytes, nullptr) != 1 ||
      EVP_DecryptInit_ex(ctx.get(), nullptr, nullptr, bytes(key), nonce) != 1 ||
      EVP_DecryptUpdate(ctx.get(), nullptr, &len, bytes(aad), static_cast<int>(aad.size())) != 1 ||
      EVP_DecryptUpdate(ctx.get(), o, &len, nonce + kGcmNonceBytes, static_cast<int>(ct_len)) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_SET_TAG, kGcmTagBytes, tag.data()) != 1)
    return makeError(ErrorKind::kInternal, "AES-256-GCM open failed");
  int fin = 0;
  if (EVP_DecryptFinal_ex(ctx.get(), o + len, &fin) != 1)
    return makeError(ErrorKind::kUnauthenticated,
                     "AES-256-GCM tag does not verify (wrong key, or the data was altered)");
  return out;
}

}  // namespace space::crypto
