#include "archive/key_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <openssl/sha.h>
#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include "archive/durable_file.h"
#include "common/hex.h"
#include "common/unique_fd.h"
#include "crypto/aes_gcm.h"

namespace space::archive {
namespace {

struct DirCloser {
  void operator()(DIR* d) const { closedir(d); }
};

constexpr size_t kMaxKeyStoreFileBytes = 1 << 20;

Result<DataKey> loadStored(const std::string& path, const std::string& tenant) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd) return sysError(errno, "open key store entry {}", path);
  struct stat st;
  if (fstat(fd.get(), &st) < 0) return sysError(errno, "stat {}", path);
  if (!S_ISREG(st.st_mode) || st.st_size > static_cast<off_t>(kMaxKeyStoreFileBytes))
    return makeError(ErrorKind::kInternal, "key store entry {} is not a small regular file", path);
  std::string text;
  TRY(preadExact(fd.get(), 0, static_cast<size_t>(st.st_size), text, path));
  auto j = nlohmann::json::parse(text, nullptr, false);
  DataKey key;
  try {
    key.tenant = j.at("tenant").get<std::string>();
    key.id = j.at("dek_id").get<std::string>();
    for (const auto& s : j.at("slots")) {
      auto wrapped = fromHex(s.at("wrapped").get<std::string>());
      if (!wrapped) throw std::runtime_error("wrapped key is not hex");
      key.slots.push_back({s.at("kek_id").get<std::string>(), *wrapped});
    }
  } catch (const std::exception& e) {
    return makeError(ErrorKind::kInternal, "key store entry {} is malformed: {}", path, e.what());
  }
  if (key.tenant != tenant)
    return makeError(ErrorKind::kInternal, "key store entry {} names tenant {}", path, key.tenant);
  return key;
}

}  // namespace

std::string dataKeyId(std::string_view key) {
  std::string tagged = "space-dek-id-v1|" + std::string(key);
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(tagged.data()), tagged.size(), digest);
  return toHex(digest, 16);
}

std::string wrapContext(const std::string& tenant, const std::string& dek_id) {
  return fmt::format("space-dek-v1|{}|{}", tenant, dek_id);
}

bool validTenant(const std::string& tenant) {
  if (tenant.empty() || tenant.size() > 64) return false;
  for (char c : tenant)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-')) return false;
  return true;
}

Result<DataKey> newDataKey(const std::string& tenant, const Kek& kek) {
  if (!validTenant(tenant))
    return makeError(ErrorKind::kInvalidArgument, "tenant '{}' must be 1-64 of [a-z0-9_-]", tenant);
  DataKey key;
  key.tenant = tenant;
  TRY(crypto::randomBytes(key.key, crypto::kAesKeyBytes));
  key.id = dataKeyId(key.key);
  ASSIGN_OR_RETURN(auto wrapped, kek.wrap(key.key, wrapContext(tenant, key.id)));
  key.slots.push_back({kek.id(), std::move(wrapped)});
  return key;
}

Result<std::string> unwrapDataKey(const std::string& tenant, const std::string& dek_id,
                                  const std::vector<KeySlot>& slots, const Kek& kek) {
  for (const auto& slot : slots) {
    if (slot.kek_id != kek.id()) continue;
    auto key = kek.unwrap(slot.wrapped, wrapContext(tenant, dek_id));
    if (!key)
      return tl::unexpected(key.error().context(fmt::format("unwrap data key {} of tenant {}", dek_id, tenant)));
    if (key->size() != crypto::kAesKeyBytes || dataKeyId(*key) != dek_id)
      return makeError(ErrorKind::kUnauthenticated, "key {} unwrapped something that is not data key {}", kek.id(),
                       dek_id);
    return key;
  }
  std::string held;
  for (const auto& slot : slots) held += (held.empty() ? "" : ", ") + slot.kek_id;
  return makeError(ErrorKind::kUnauthenticated, "data key {} is not wrapped by key {} (wrapped by: {})", dek_id,
                   kek.id(), held.empty() ? "none" : held);
}

Result<std::vector<KeySlot>> rewrapSlots(const std::string& tenant, const std::string& dek_id,
                                         const std::vector<KeySlot>& slots, const Kek& from, const Kek& to) {
  ASSIGN_OR_RETURN(auto key, unwrapDataKey(tenant, dek_id, slots, from));
  ASSIGN_OR_RETURN(auto wrapped, to.wrap(key, wrapContext(tenant, dek_id)));
  std::vector<KeySlot> out;
  for (const auto& slot : slots)
    if (slot.kek_id != from.id() && slot.kek_id != to.id()) out.push_back(slot);
  out.push_back({to.id(), std::move(wrapped)});
  return out;
}

Status KeyStore::save(const DataKey& key, bool replace) const {
  if (mkdir(dir_.c_str(), 0700) < 0 && errno != EEXIST) return sysError(errno, "create key store {}", dir_);
  nlohmann::json slots = nlohmann::json::array();
  for (const auto& s : key.slots) slots.push_back({{"kek_id", s.kek_id}, {"wrapped", toHex(s.wrapped)}});
  nlohmann::json j = {{"tenant", key.tenant}, {"dek_id", key.id}, {"slots", slots}};
  return writeFileAtomic(pathOf(key.tenant), j.dump(), 0600, replace);
}

Result<DataKey> KeyStore::dataKey(const std::string& tenant, const Kek& kek) const {
  if (!validTenant(tenant))
    return makeError(ErrorKind::kInvalidArgument, "tenant '{}' must be 1-64 of [a-z0-9_-]", tenant);
  std::string path = pathOf(tenant);
  if (access(path.c_str(), F_OK) == 0) {
    ASSIGN_OR_RETURN(auto key, loadStored(path, tenant));
    ASSIGN_OR_RETURN(key.key, unwrapDataKey(tenant, key.id, key.slots, kek));
    return key;
  }
  ASSIGN_OR_RETURN(auto key, newDataKey(tenant, kek));
  // Two exports racing on a new tenant must not end with two DEKs: the first one stored wins.
  auto saved = save(key, /*replace=*/false);
  if (!saved && saved.error().sys_errno == EEXIST) return dataKey(tenant, kek);
  TRY(std::move(saved));
  return key;
}

Result<size_t> KeyStore::rotate(const Kek& from, const Kek& to) const {
  std::unique_ptr<DIR, DirCloser> dir(opendir(dir_.c_str()));
  if (!dir) {
    if (errno == ENOENT) return size_t{0};
    return sysError(errno, "open key store {}", dir_);
  }
  std::vector<std::string> tenants;
  while (dirent* e = readdir(dir.get())) {
    std::string name = e->d_name;
    if (name.size() > 5 && name.ends_with(".json")) tenants.push_back(name.substr(0, name.size() - 5));
  }
  size_t rotated = 0;
  for (const auto& tenant : tenants) {
    if (!validTenant(tenant)) continue;
    ASSIGN_OR_RETURN(auto key, loadStored(pathOf(tenant), tenant));
    bool has_from = false;
    for (const auto& s : key.slots) has_from |= s.kek_id == from.id();
    if (!has_from) continue;
    ASSIGN_OR_RETURN(key.slots, rewrapSlots(tenant, key.id, key.slots, from, to));
    TRY(save(key, /*replace=*/true));
    ++rotated;
  }
  return rotated;
}

}  // namespace space::archive
