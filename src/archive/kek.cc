#include "archive/kek.h"

#include <fcntl.h>
#include <openssl/sha.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>

#include "archive/kek_command.h"
#include "common/hex.h"
#include "common/unique_fd.h"
#include "crypto/aes_gcm.h"

namespace space::archive {
namespace {

constexpr size_t kMaxKeyFileBytes = 4096;

std::string wrapAad(const std::string& kek_id, std::string_view context) {
  return fmt::format("space-dek-wrap-v1|{}|{}", kek_id, context);
}

// A KEK held in this process: AES-256-GCM key wrap with the KEK id and the context as associated data.
class LocalKek final : public Kek {
 public:
  explicit LocalKek(std::string key) : key_(std::move(key)) {
    unsigned char digest[SHA256_DIGEST_LENGTH];
    std::string tagged = "space-kek-id-v1|" + key_;
    SHA256(reinterpret_cast<const unsigned char*>(tagged.data()), tagged.size(), digest);
    id_ = "local:" + toHex(digest, 8);
  }
  const std::string& id() const override { return id_; }
  Result<std::string> wrap(std::string_view dek, std::string_view context) const override {
    return crypto::aesGcmSeal(key_, wrapAad(id_, context), dek);
  }
  Result<std::string> unwrap(std::string_view wrapped, std::string_view context) const override {
    auto dek = crypto::aesGcmOpen(key_, wrapAad(id_, context), wrapped);
    if (!dek) return makeError(ErrorKind::kUnauthenticated, "data key does not unwrap under key {}", id_);
    return dek;
  }

 private:
  std::string key_, id_;
};

// 32 raw bytes, or 64 hex digits with at most one trailing newline.
Result<std::string> parseKeyText(std::string text, const std::string& where) {
  if (text.size() == crypto::kAesKeyBytes) return text;
  if (!text.empty() && text.back() == '\n') text.pop_back();
  if (text.size() == 2 * crypto::kAesKeyBytes) {
    if (auto key = fromHex(text)) return *key;
  }
  return makeError(ErrorKind::kInvalidArgument, "{} must hold 32 raw bytes or 64 lowercase hex digits", where);
}

bool validKeyId(const std::string& id) {
  if (id.empty() || id.size() > 128) return false;
  for (char c : id) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
              c == ':' || c == '/' || c == '-';
    if (!ok) return false;
  }
  return true;
}

}  // namespace

Result<std::unique_ptr<Kek>> kekFromBytes(std::string key) {
  if (key.size() != crypto::kAesKeyBytes)
    return makeError(ErrorKind::kInvalidArgument, "a key-encryption key is 32 bytes, not {}", key.size());
  return std::make_unique<LocalKek>(std::move(key));
}

Result<std::unique_ptr<Kek>> kekFromFile(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd) return sysError(errno, "open key file {}", path);
  struct stat st;
  if (fstat(fd.get(), &st) < 0) return sysError(errno, "stat key file {}", path);
  if (!S_ISREG(st.st_mode)) return makeError(ErrorKind::kInvalidArgument, "key file {} is not a regular file", path);
  // A key others can read is no longer the customer's alone: refuse it rather than use it.
  if ((st.st_mode & 077) != 0)
    return makeError(ErrorKind::kInvalidArgument,
                     "key file {} must not be accessible to group or others (mode {:o}); chmod 600 it", path,
                     st.st_mode & 0777);
  if (st.st_uid != geteuid())
    return makeError(ErrorKind::kInvalidArgument, "key file {} is owned by uid {}, not by this process (uid {})", path,
                     st.st_uid, geteuid());
  if (st.st_size > static_cast<off_t>(kMaxKeyFileBytes))
    return makeError(ErrorKind::kInvalidArgument, "key file {} is too large to be a key", path);
  std::string text(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < text.size()) {
    ssize_t r = read(fd.get(), text.data() + got, text.size() - got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return sysError(errno, "read key file {}", path);
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  text.resize(got);
  ASSIGN_OR_RETURN(auto key, parseKeyText(std::move(text), "key file " + path));
  return kekFromBytes(std::move(key));
}

Result<std::unique_ptr<Kek>> kekFromEnv(const std::string& variable) {
  const char* value = std::getenv(variable.c_str());
  if (!value || !*value) return makeError(ErrorKind::kNotFound, "environment variable {} is not set", variable);
  std::string text(value);
  if (text.size() != 2 * crypto::kAesKeyBytes || !fromHex(text))
    return makeError(ErrorKind::kInvalidArgument, "environment variable {} must hold 64 lowercase hex digits",
                     variable);
  return kekFromBytes(*fromHex(text));
}

Result<std::unique_ptr<Kek>> kekFromCommand(std::vector<std::string> argv, std::string key_id) {
  if (argv.empty() || argv[0].empty()) return makeError(ErrorKind::kInvalidArgument, "key command is empty");
  if (!validKeyId(key_id))
    return makeError(ErrorKind::kInvalidArgument, "key id '{}' must be 1-128 of [A-Za-z0-9._:/-]", key_id);
  return makeCommandKek(std::move(argv), std::move(key_id));
}

Result<std::unique_ptr<Kek>> kekFromSpec(const std::string& spec) {
  auto colon = spec.find(':');
  if (colon == std::string::npos)
    return makeError(ErrorKind::kInvalidArgument, "key spec '{}' lacks a kind (file:, env:, command:)", spec);
  std::string kind = spec.substr(0, colon), rest = spec.substr(colon + 1);
  if (kind == "file") return kekFromFile(rest);
  if (kind == "env") return kekFromEnv(rest);
  if (kind == "command") {
    // Key ids may hold ':' (KMS ARNs do), never '=': the id ends at the first '='.
    auto id_end = rest.find('=');
    if (id_end == std::string::npos)
      return makeError(ErrorKind::kInvalidArgument, "command key spec needs command:<key-id>=<program> [args]");
    std::vector<std::string> argv;
    std::string words = rest.substr(id_end + 1);
    for (size_t pos = 0; pos < words.size();) {
      size_t end = words.find(' ', pos);
      if (end == std::string::npos) end = words.size();
      if (end > pos) argv.push_back(words.substr(pos, end - pos));
      pos = end + 1;
    }
    return kekFromCommand(std::move(argv), rest.substr(0, id_end));
  }
  return makeError(ErrorKind::kInvalidArgument, "unknown key kind '{}' (file, env or command)", kind);
}

}  // namespace space::archive
