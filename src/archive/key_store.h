// Per-tenant data keys (DEKs). A DEK is 32 random bytes that encrypts a tenant's snapshot chunks; it is
// stored only wrapped, by one or more customer KEKs (kek.h), in <state>/keys/<tenant>.json (0600).
// Rotation rewraps the DEK under a new KEK: the data it encrypted stays as it is.
#pragma once

#include <string>
#include <vector>

#include "archive/kek.h"
#include "common/result.h"

namespace space::archive {

struct KeySlot {
  std::string kek_id;
  std::string wrapped;  // bytes, as the KEK returned them
};

struct DataKey {
  std::string tenant;
  std::string id;   // dataKeyId(key): names the DEK in archives and the chunk store; reveals nothing
  std::string key;  // 32 bytes
  std::vector<KeySlot> slots;
};

// 32 hex digits of SHA-256("space-dek-id-v1|" + key): a commitment to the key, checked after every
// unwrap, so a KEK command that returns the wrong bytes is caught before any data is touched.
std::string dataKeyId(std::string_view key);
// What a wrap binds the DEK to: its tenant and its id.
std::string wrapContext(const std::string& tenant, const std::string& dek_id);
bool validTenant(const std::string& tenant);  // [a-z0-9_-]{1,64}

Result<DataKey> newDataKey(const std::string& tenant, const Kek& kek);
// Unwraps the slot whose kek_id is kek.id() and checks the key against dek_id.
Result<std::string> unwrapDataKey(const std::string& tenant, const std::string& dek_id,
                                  const std::vector<KeySlot>& slots, const Kek& kek);
// The slots after rotation: from's slot replaced by one under to (other KEKs' slots kept).
Result<std::vector<KeySlot>> rewrapSlots(const std::string& tenant, const std::string& dek_id,
                                         const std::vector<KeySlot>& slots, const Kek& from, const Kek& to);

class KeyStore {
 public:
  explicit KeyStore(std::string dir) : dir_(std::move(dir)) {}
  // The tenant's DEK, created (and stored wrapped under kek) on first use.
  Result<DataKey> dataKey(const std::string& tenant, const Kek& kek) const;
  // Rewraps every stored DEK that from can unwrap under to; returns how many. DEKs wrapped only by
  // other KEKs are left alone.
  Result<size_t> rotate(const Kek& from, const Kek& to) const;

 private:
  std::string pathOf(const std::string& tenant) const { return dir_ + "/" + tenant + ".json"; }
  Status save(const DataKey& key, bool replace) const;
  std::string dir_;
};

}  // namespace space::archive
