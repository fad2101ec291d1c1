// The snapshot archive's on-disk format (docs/snapshot-archive.md): encoding, and parsing of untrusted
// bytes. Parsers check every field and every cross-reference, so that the importer can trust a parsed
// value's ranges; whether the bytes are authentic is the cipher's job (archive.cc).
//
//   lead      24 B  "SPACEARC", u32 version, u32 header length, u32 key block length, u32 zero
//   header         JSON, in clear, authenticated as associated data of the manifest
//   key block      JSON, in clear, the DEK wrapped once per KEK (each wrap authenticated by its KEK)
//   body           chunk records (nonce | zstd ciphertext | tag), then the sealed manifest
//   trailer   32 B  "SPACEEND", u64 body start, u64 manifest offset (from body start), u64 manifest length
// Integers are little-endian.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "archive/key_store.h"
#include "common/result.h"

namespace space::archive {

inline constexpr std::string_view kArchiveMagic = "SPACEARC", kTrailerMagic = "SPACEEND";
inline constexpr uint32_t kFormatVersion = 1;
inline constexpr size_t kLeadBytes = 24, kTrailerBytes = 32;
inline constexpr size_t kMaxHeaderBytes = 64 << 10, kMaxKeyBlockBytes = 64 << 10, kMaxManifestBytes = 64 << 20;
inline constexpr uint64_t kMinChunkSize = 64 << 10, kMaxChunkSize = 16 << 20;
inline constexpr uint64_t kMaxFileSize = uint64_t{1} << 50;

struct Lead {
  uint32_t header_len = 0, key_block_len = 0;
};
std::string encodeLead(const Lead& lead);
// What the manifest's tag authenticates besides the manifest: the lead's magic, version and header
// length, and the header. Not the key block's length: rotation changes it and nothing else.
std::string manifestAssociatedData(std::string_view lead, std::string_view header);
Result<Lead> parseLead(std::string_view bytes);  // exactly kLeadBytes

struct Trailer {
  uint64_t body_start = 0, manifest_offset = 0, manifest_len = 0;
};
std::string encodeTrailer(const Trailer& trailer);
// Also checks the trailer against the file's size and the lead: the manifest ends where the trailer
// begins, so a truncated or extended file does not parse.
Result<Trailer> parseTrailer(std::string_view bytes, uint64_t file_size, const Lead& lead);

enum class ArchiveKind { kSnapshot, kSealedFile };

struct Header {
  std::string archive_id;  // 32 hex digits, random per archive
  ArchiveKind kind = ArchiveKind::kSnapshot;
  std::string tenant;
  std::string dek_id;
  uint64_t chunk_size = 0;
};
std::string encodeHeader(const Header& header);
Result<Header> parseHeader(std::string_view json);

std::string encodeKeyBlock(const std::vector<KeySlot>& slots);
Result<std::vector<KeySlot>> parseKeyBlock(std::string_view json);

struct ChunkRef {
  std::string id;           // 64 hex digits: keyed SHA-256 of the plaintext (chunk_codec.h)
  uint64_t offset = 0;      // of its record, from the body start (0 when not in the archive)
  uint64_t length = 0;      // of its record (0 when not in the archive)
  uint64_t raw_length = 0;  // plaintext bytes
  bool in_archive = true;   // false: a thin archive's chunk, taken from the local chunk store
};
struct Extent {
  uint64_t offset = 0;  // in the file, a multiple of the chunk size
  uint64_t chunk = 0;   // index into Manifest::chunks
};
struct FileEntry {
  std::string path;  // relative, '/'-separated, no '.', '..' or empty components
  uint64_t size = 0;
  uint32_t mode = 0600;         // permission bits only
  std::vector<Extent> extents;  // every other byte of the file is zero
};
struct Manifest {
  std::string archive_id;
  uint64_t chunk_area_length = 0;  // the body bytes before the manifest
  std::vector<FileEntry> files;
  std::vector<ChunkRef> chunks;
};
std::string encodeManifest(const Manifest& manifest);
// Checks the manifest against its header: ids, paths, every extent and chunk record in range, chunk
// records tiling the chunk area exactly, every chunk used.
Result<Manifest> parseManifest(std::string_view json, const Header& header);

bool validRelativePath(std::string_view path);

}  // namespace space::archive
