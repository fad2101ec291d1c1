// Snapshot archives: a snapshot directory exported as one self-contained, authenticated file of
// content-addressed, zstd-compressed chunks encrypted under the tenant's data key (DEK), the DEK wrapped
// by the customer's key-encryption key(s) (kek.h). Format and reasoning: docs/snapshot-archive.md.
//
// Guarantees:
//  - export writes the archive unnamed and names it only when complete and fsynced: a crash or kill -9
//    leaves no archive (and no partial file) under the final name;
//  - import verifies every byte it uses (header and manifest by the manifest's GCM tag, each chunk by
//    its tag and its content hash) and writes into a hidden directory next to dest that is renamed into
//    place only when everything verified and is fsynced: a wrong key, a flipped bit or a truncated file
//    imports nothing;
//  - holes cost nothing: data is found with SEEK_DATA/SEEK_HOLE, zero chunks are not stored, and import
//    writes zero blocks as holes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "archive/format.h"
#include "archive/kek.h"
#include "archive/key_store.h"
#include "common/result.h"

namespace space::archive {

inline constexpr uint64_t kDefaultChunkSize = 1 << 20;

struct ExportOptions {
  std::string chunk_store_dir;  // <state>/chunks; empty: no chunk store
  // Leave out the chunks the chunk store already holds: a small archive that only imports where that
  // store is (local history). Default: self-contained.
  bool thin = false;
  uint64_t chunk_size = kDefaultChunkSize;
};

struct ExportStats {
  uint64_t files = 0;
  uint64_t data_chunks = 0;        // chunk windows holding data (all-zero windows are not counted)
  uint64_t unique_chunks = 0;      // distinct chunks in the manifest (dedup within the archive)
  uint64_t chunks_from_store = 0;  // found in the chunk store: not compressed or encrypted again
  uint64_t chunks_sealed = 0;      // compressed and encrypted by this export
  uint64_t chunks_left_out = 0;    // thin archives: referenced, not included
  uint64_t data_bytes = 0;         // bytes read from data windows
  uint64_t archive_bytes = 0;
};

struct ImportOptions {
  std::string chunk_store_dir;  // needed for thin archives; with add_to_store, receives verified chunks
  bool add_to_store = false;
};

struct ImportStats {
  uint64_t files = 0;
  uint64_t chunks_verified = 0;
  uint64_t data_bytes = 0;
};

// snapshot_dir: regular files in nested directories (anything else is refused). The archive is 0600.
Result<ExportStats> exportSnapshot(const std::string& snapshot_dir, const std::string& out_file, const DataKey& key,
                                   const ExportOptions& options = {});
// dest_dir must not exist; its parent must.
Result<ImportStats> importSnapshot(const std::string& in_file, const std::string& dest_dir, const Kek& kek,
                                   const ImportOptions& options = {});

// What an archive says about itself without any key: which tenant, which DEK, which KEKs can open it.
struct ArchiveInfo {
  Header header;
  std::vector<std::string> kek_ids;
};
Result<ArchiveInfo> inspectArchive(const std::string& path);

// Key rotation: the archive's DEK is unwrapped with from and rewrapped with to; from's slot is removed,
// other KEKs' slots kept. The chunks and manifest are copied as they are (never decrypted again); the
// archive is replaced atomically. The archive is authenticated under from first.
Status rewrapArchive(const std::string& path, const Kek& from, const Kek& to);

// Encryption at rest of one local file (a VM snapshot's memory): the same chunks, compression, cipher
// and key handling as an archive, holes included. sealed_path replaces atomically; so does out_path.
Result<ExportStats> sealFile(const std::string& plain_path, const std::string& sealed_path, const DataKey& key);
Status openSealedFile(const std::string& sealed_path, const std::string& out_path, const Kek& kek);

}  // namespace space::archive
