#include "core/memory_sealer.h"

#include "archive/archive.h"
#include "archive/kek.h"
#include "archive/key_store.h"

namespace space::core {
namespace {

class KekMemorySealer : public vm::MemorySealer {
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
    return archive::openSealedFile(sealed_path, plain_path, *kek);
  }

 private:
  std::string kek_spec_, keys_dir_, tenant_;
};

}  // namespace

std::shared_ptr<vm::MemorySealer> makeMemorySealer(const std::string& kek_spec, const std::string& keys_dir,
                                                  const std::string& tenant) {
  if (kek_spec.empty()) return nullptr;
  return std::make_shared<KekMemorySealer>(kek_spec, keys_dir, tenant);
}

}  // namespace space::core
