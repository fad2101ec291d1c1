// The local chunk store, <state>/chunks/: sealed chunk records (exactly the bytes an archive holds) by
// data key and chunk id, <dir>/<dek-id>/<id[0:2]>/<id>. Chunk ids are keyed by the tenant's DEK, so a
// tenant's chunks from templates, earlier snapshots and imports are all found under one directory and
// never match another tenant's. Exports reuse what is stored (no compression or encryption again, and
// thin archives may leave such chunks out); imports may add what they verified.
#pragma once

#include <optional>
#include <string>

#include "common/result.h"

namespace space::archive {

class ChunkStore {
 public:
  explicit ChunkStore(std::string dir) : dir_(std::move(dir)) {}
  const std::string& dir() const { return dir_; }

  // The stored record, or nullopt when there is none.
  Result<std::optional<std::string>> get(const std::string& dek_id, const std::string& id) const;
  // Stores a record durably (fsync + rename); a record already stored is kept unless replace is set
  // (a stored record that no longer opens).
  Status put(const std::string& dek_id, const std::string& id, std::string_view record, bool replace = false) const;

 private:
  std::string pathOf(const std::string& dek_id, const std::string& id) const;
  std::string dir_;
};

}  // namespace space::archive
