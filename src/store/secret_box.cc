#include "store/secret_box.h"

#include <fcntl.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/hex.h"
#include "common/unique_fd.h"
#include "crypto/aes_gcm.h"

namespace space::store {
namespace {

constexpr size_t kKeyBytes = crypto::kAesKeyBytes;

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
  if ((st.st_mode & 077) != 0)
    return makeError(ErrorKind::kInternal, "node key {} must be mode 0600, not {:o}", key_path, st.st_mode & 0777);
  ASSIGN_OR_RETURN(box.key_, readExactly(fd.get(), kKeyBytes, key_path));
  return box;
}

Result<std::string> SecretBox::seal(const std::string& plaintext, const std::string& name) const {
  auto sealed = crypto::aesGcmSeal(key_, name, plaintext);
  if (!sealed) return tl::unexpected(sealed.error().context(fmt::format("seal secret {}", name)));
  return toHex(*sealed);
}

Result<std::string> SecretBox::unseal(const std::string& sealed, const std::string& name) const {
  auto raw = fromHex(sealed);
  if (!raw || raw->size() < crypto::kGcmOverhead)
    return makeError(ErrorKind::kInternal, "sealed secret {} is malformed", name);
  auto opened = crypto::aesGcmOpen(key_, name, *raw);
  if (!opened) return makeError(ErrorKind::kInternal, "secret {} does not authenticate under the node key", name);
  return opened;
}

}  // namespace space::store
