// The vm tier's encryption at rest of snapshot memory with the customer's key: the node's per-tenant data
// key (archive/key_store.h, wrapped by snapshot_kek) seals each snapshot's guest pages into the archive
// format's sealed-file form (archive/archive.h sealFile).
#pragma once

#include <memory>
#include <string>

#include "archive/kek.h"
#include "common/result.h"
#include "runtime/memory_sealer.h"

namespace space::core {

// Null when kek_spec is empty (no key configured). The KEK is resolved on each use, so a key file or
// command that changes (rotation) is followed.
std::shared_ptr<runtime::MemorySealer> makeMemorySealer(const std::string& kek_spec, const std::string& keys_dir,
                                                        const std::string& tenant);

// The KEK that opens an archive or sealed file: `current`, or — when the file names only KEKs rotated away
// since and its data key is the tenant's, held in keys_dir under `current` — a stand-in that yields that
// stored key (the import or open still checks it against the file's key id and authenticates every byte).
std::unique_ptr<archive::Kek> kekOpening(const std::string& archive_path, std::unique_ptr<archive::Kek> current,
                                         const std::string& keys_dir);

}  // namespace space::core
