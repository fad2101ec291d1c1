#include "core/memory_sealer.h"

#include <algorithm>
#include <filesystem>

#include "archive/archive.h"
#include "archive/kek.h"
#include "archive/key_store.h"

namespace space::core {
namespace {

// Opens an archive whose key block names only KEKs this node no longer has (they were rotated away) but
// whose data key is the tenant's, held in the node's key store under the current KEK: stands in for the
// archive's slot `slot_id` and "unwraps" to the stored key when asked for that key's context. Import
// then checks the key against the archive's dek_id and authenticates every byte with it, as always.
class StoredKeyKek final : public archive::Kek {
 public:
  StoredKeyKek(std::string slot_id, archive::DataKey key) : slot_id_(std::move(slot_id)), key_(std::move(key)) {}
  const std::string& id() const override { return slot_id_; }
  Result<std::string> wrap(std::string_view, std::string_view) const override {
    return makeError(ErrorKind::kUnsupported, "a stored data key does not wrap");
  }
  Result<std::string> unwrap(std::string_view, std::string_view context) const override {
    if (context != archive::wrapContext(key_.tenant, key_.id))
      return makeError(ErrorKind::kUnauthenticated, "the archive is not under tenant {}'s data key", key_.tenant);
    return key_.key;
  }

 private:
  std::string slot_id_;
  archive::DataKey key_;
};

class KekMemorySealer : public runtime::MemorySealer {
 public:
  KekMemorySealer(std::string kek_spec, std::string keys_dir, std::string tenant)
      : kek_spec_(std::move(kek_spec)), keys_dir_(std::move(keys_dir)), tenant_(std::move(tenant)) {}

  Status seal(const std::string& plain_path, const std::string& sealed_path) override {
    ASSIGN_OR_RETURN(auto kek, archive::kekFromSpec(kek_spec_));
    archive::KeyStore keys(keys_dir_);
    ASSIGN_OR_RETURN(archive::DataKey dek, keys.dataKey(tenant_, *kek));
    ASSIGN_OR_RETURN(auto stats, archive::sealFile(plain_path, sealed_path, dek));
    (void)stats;
    return ok();
  }

  Status open(const std::string& sealed_path, const std::string& plain_path) override {
    ASSIGN_OR_RETURN(auto kek, archive::kekFromSpec(kek_spec_));
    kek = kekOpening(sealed_path, std::move(kek), keys_dir_);  // sealed before a rotation
    return archive::openSealedFile(sealed_path, plain_path, *kek);
  }

 private:
  std::string kek_spec_, keys_dir_, tenant_;
};

}  // namespace

std::unique_ptr<archive::Kek> kekOpening(const std::string& archive_path, std::unique_ptr<archive::Kek> current,
                                         const std::string& keys_dir) {
  auto info = archive::inspectArchive(archive_path);
  if (!info || info->kek_ids.empty() || !archive::validTenant(info->header.tenant) ||
      std::find(info->kek_ids.begin(), info->kek_ids.end(), current->id()) != info->kek_ids.end())
    return current;
  std::error_code ec;
  if (!std::filesystem::exists(keys_dir + "/" + info->header.tenant + ".json", ec)) return current;
  archive::KeyStore keys(keys_dir);
  auto stored = keys.dataKey(info->header.tenant, *current);
  if (!stored || stored->id != info->header.dek_id) return current;
  return std::make_unique<StoredKeyKek>(info->kek_ids.front(), std::move(*stored));
}

std::shared_ptr<runtime::MemorySealer> makeMemorySealer(const std::string& kek_spec, const std::string& keys_dir,
                                                        const std::string& tenant) {
  if (kek_spec.empty()) return nullptr;
  return std::make_shared<KekMemorySealer>(kek_spec, keys_dir, tenant);
}

}  // namespace space::core
