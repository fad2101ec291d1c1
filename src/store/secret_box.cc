#include "store/secret_box.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>

#include <memory>
#include <optional>

#include "common/hex.h"
#include "common/unique_fd.h"

namespace space::store {
namespace {

constexpr size_t kKeyBytes = 32, kNonceBytes = 12, kTagBytes = 16;

using CipherCtx = std::unique_ptr<EVP_CIPHER_CTX, decltype(&EVP_CIPHER_CTX_free)>;

Result<std::string> readExactly(int fd, size_t n, const std::string& path) {
  std::string out(n, '\0');
  size_t got = 0;
  while (got < n) {
    ssize_t r = read(fd, out.data() + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return sysError(errno, "read {}", path);
    if (r == 0) return makeError(ErrorKind::kInternal, "node key {} is shorter than {} bytes", path, n);
    got += static_cast<size_t>(r);
  }
  return out;
}

std::optional<std::string> fromHex(const std::string& hex) {
  if (hex.size() % 2) return std::nullopt;
  auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  std::string out;
  out.reserve(hex.size() / 2);
  for (size_t i = 0; i < hex.size(); i += 2) {
    int hi = digit(hex[i]), lo = digit(hex[i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out += static_cast<char>(hi << 4 | lo);
  }
  return out;
}

}  // namespace

Result<SecretBox> SecretBox::open(const std::string& key_path) {
  SecretBox box;
  UniqueFd fd(::open(key_path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd && errno == ENOENT) {
    std::string key(kKeyBytes, '\0');
    if (RAND_bytes(reinterpret_cast<unsigned char*>(key.data()), kKeyBytes) != 1)
      return makeError(ErrorKind::kInternal, "RAND_bytes failed for the node key");
    // O_EXCL: two daemons racing on a fresh state directory never end up with different keys.
    UniqueFd out(::open(key_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600));
    if (!out && errno != EEXIST) return sysError(errno, "create node key {}", key_path);
    if (out) {
      if (write(out.get(), key.data(), key.size()) != static_cast<ssize_t>(key.size()) || fsync(out.get()) < 0)
        return sysError(errno, "write node key {}", key_path);
    }
    fd = UniqueFd(::open(key_path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  }
  if (!fd) return sysError(errno, "open node key {}", key_path);
  struct stat st;
  if (fstat(fd.get(), &st) < 0) return sysError(errno, "stat {}", key_path);
  if ((st.st_mode & 077) != 0) return makeError(ErrorKind::kInternal, "node key {} must be mode 0600, not {:o}", key_path, st.st_mode & 0777);
  ASSIGN_OR_RETURN(box.key_, readExactly(fd.get(), kKeyBytes, key_path));
  return box;
}

Result<std::string> SecretBox::seal(const std::string& plaintext, const std::string& name) const {
  unsigned char nonce[kNonceBytes];
  if (RAND_bytes(nonce, sizeof nonce) != 1) return makeError(ErrorKind::kInternal, "RAND_bytes failed");
  CipherCtx ctx(EVP_CIPHER_CTX_new(), EVP_CIPHER_CTX_free);
  std::string out(plaintext.size() + kTagBytes, '\0');
  int len = 0, total = 0;
  auto* o = reinterpret_cast<unsigned char*>(out.data());
  if (!ctx || EVP_EncryptInit_ex(ctx.get(), EVP_aes_256_gcm(), nullptr, nullptr, nullptr) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_SET_IVLEN, kNonceBytes, nullptr) != 1 ||
      EVP_EncryptInit_ex(ctx.get(), nullptr, nullptr, reinterpret_cast<const unsigned char*>(key_.data()), nonce) != 1 ||
      EVP_EncryptUpdate(ctx.get(), nullptr, &len, reinterpret_cast<const unsigned char*>(name.data()), static_cast<int>(name.size())) != 1 ||
      EVP_EncryptUpdate(ctx.get(), o, &len, reinterpret_cast<const unsigned char*>(plaintext.data()), static_cast<int>(plaintext.size())) != 1)
    return makeError(ErrorKind::kInternal, "AES-256-GCM seal failed");
  total = len;
  if (EVP_EncryptFinal_ex(ctx.get(), o + total, &len) != 1) return makeError(ErrorKind::kInternal, "AES-256-GCM seal failed");
  total += len;
  if (EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_GET_TAG, kTagBytes, o + total) != 1)
    return makeError(ErrorKind::kInternal, "AES-256-GCM tag failed");
  return toHex(nonce, sizeof nonce) + toHex(o, static_cast<size_t>(total) + kTagBytes);
}

Result<std::string> SecretBox::unseal(const std::string& sealed, const std::string& name) const {
  auto raw = fromHex(sealed);
  if (!raw || raw->size() < kNonceBytes + kTagBytes) return makeError(ErrorKind::kInternal, "sealed secret {} is malformed", name);
  const auto* in = reinterpret_cast<const unsigned char*>(raw->data());
  size_t ct_len = raw->size() - kNonceBytes - kTagBytes;
  std::string out(ct_len, '\0');
  CipherCtx ctx(EVP_CIPHER_CTX_new(), EVP_CIPHER_CTX_free);
  int len = 0;
  auto* o = reinterpret_cast<unsigned char*>(out.data());
  std::string tag = raw->substr(kNonceBytes + ct_len);
  if (!ctx || EVP_DecryptInit_ex(ctx.get(), EVP_aes_256_gcm(), nullptr, nullptr, nullptr) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_SET_IVLEN, kNonceBytes, nullptr) != 1 ||
      EVP_DecryptInit_ex(ctx.get(), nullptr, nullptr, reinterpret_cast<const unsigned char*>(key_.data()), in) != 1 ||
      EVP_DecryptUpdate(ctx.get(), nullptr, &len, reinterpret_cast<const unsigned char*>(name.data()), static_cast<int>(name.size())) != 1 ||
      EVP_DecryptUpdate(ctx.get(), o, &len, in + kNonceBytes, static_cast<int>(ct_len)) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_SET_TAG, kTagBytes, tag.data()) != 1)
    return makeError(ErrorKind::kInternal, "AES-256-GCM open of secret {} failed", name);
  int fin = 0;
  if (EVP_DecryptFinal_ex(ctx.get(), o + len, &fin) != 1)
    return makeError(ErrorKind::kInternal, "secret {} does not authenticate under the node key", name);
  return out;
}

}  // namespace space::store
