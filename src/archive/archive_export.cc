// Writing archives: exportSnapshot and sealFile.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <map>
#include <optional>

#include "archive/archive.h"
#include "archive/chunk_codec.h"
#include "archive/chunk_store.h"
#include "archive/durable_file.h"
#include "archive/sparse_file.h"
#include "common/hex.h"
#include "common/unique_fd.h"
#include "crypto/aes_gcm.h"

namespace space::archive {
namespace {

struct DirCloser {
  void operator()(DIR* d) const { closedir(d); }
};

struct SourceFile {
  std::string rel, abs;
};

// Regular files below dir, depth first in name order (so one snapshot always yields one manifest).
Status listFiles(const std::string& dir, const std::string& rel, std::vector<SourceFile>& out) {
  std::unique_ptr<DIR, DirCloser> d(opendir(dir.c_str()));
  if (!d) return sysError(errno, "open snapshot directory {}", dir);
  std::vector<std::string> names;
  while (dirent* e = readdir(d.get())) {
    std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  for (const auto& name : names) {
    std::string abs = dir + "/" + name, sub = rel.empty() ? name : rel + "/" + name;
    struct stat st;
    if (lstat(abs.c_str(), &st) < 0) return sysError(errno, "stat {}", abs);
    if (S_ISDIR(st.st_mode)) {
      TRY(listFiles(abs, sub, out));
    } else if (S_ISREG(st.st_mode)) {
      out.push_back({sub, abs});
    } else {
      return makeError(ErrorKind::kInvalidArgument,
                       "{} is neither a regular file nor a directory: snapshots hold only files", abs);
    }
  }
  return ok();
}

Status checkDataKey(const DataKey& key) {
  if (key.key.size() != crypto::kAesKeyBytes || dataKeyId(key.key) != key.id)
    return makeError(ErrorKind::kInvalidArgument, "data key {} is not a 32-byte key matching its id", key.id);
  if (!validTenant(key.tenant)) return makeError(ErrorKind::kInvalidArgument, "tenant '{}' is not valid", key.tenant);
  if (key.slots.empty())
    return makeError(ErrorKind::kInvalidArgument, "data key {} has no wrapped form to store", key.id);
  return ok();
}

Result<ExportStats> writeArchive(const std::vector<SourceFile>& files, const std::string& out_file, const DataKey& key,
                                 const ExportOptions& options, ArchiveKind kind) {
  TRY(checkDataKey(key));
  if (options.chunk_size < kMinChunkSize || options.chunk_size > kMaxChunkSize || options.chunk_size % kSparseBlock)
    return makeError(ErrorKind::kInvalidArgument, "chunk size {} out of range", options.chunk_size);
  if (options.thin && options.chunk_store_dir.empty())
    return makeError(ErrorKind::kInvalidArgument, "a thin archive needs a chunk store");

  std::string archive_id;
  TRY(crypto::randomBytes(archive_id, 16));
  Header header{toHex(archive_id), kind, key.tenant, key.id, options.chunk_size};
  std::string header_bytes = encodeHeader(header), key_block = encodeKeyBlock(key.slots);
  std::string lead = encodeLead({static_cast<uint32_t>(header_bytes.size()), static_cast<uint32_t>(key_block.size())});
  if (header_bytes.size() > kMaxHeaderBytes || key_block.size() > kMaxKeyBlockBytes)
    return makeError(ErrorKind::kInvalidArgument, "archive header or key block too large");

  ASSIGN_OR_RETURN(auto out, AtomicFile::create(out_file, 0600));
  TRY(writeAll(out.fd(), lead + header_bytes + key_block, out_file));
  uint64_t body_start = lead.size() + header_bytes.size() + key_block.size();

  ChunkCodec codec(key.key, key.id);
  std::optional<ChunkStore> store;
  if (!options.chunk_store_dir.empty()) store.emplace(options.chunk_store_dir);
  Manifest manifest;
  manifest.archive_id = header.archive_id;
  std::map<std::string, uint64_t> index_of;  // chunk id -> index in manifest.chunks
  ExportStats stats;

  // Returns the sealed record to append, or nullopt for a thin archive's stored chunk.
  auto recordFor = [&](const std::string& id, std::string_view data,
                       ChunkRef& ref) -> Result<std::optional<std::string>> {
    bool damaged = false;
    if (store) {
      ASSIGN_OR_RETURN(auto stored, store->get(key.id, id));
      // A stored record is checked before it is reused: a damaged store must not yield an archive
      // that fails on import. A record that does not open is replaced below.
      damaged = stored && !codec.open(id, data.size(), *stored);
      if (stored && !damaged) {
        ++stats.chunks_from_store;
        if (options.thin) {
          ref.in_archive = false;
          ++stats.chunks_left_out;
          return std::optional<std::string>();
        }
        return stored;
      }
    }
    ASSIGN_OR_RETURN(auto record, codec.seal(id, data));
    ++stats.chunks_sealed;
    if (store) TRY(store->put(key.id, id, record, /*replace=*/damaged));
    return std::optional<std::string>(std::move(record));
  };

  for (const auto& file : files) {
    UniqueFd fd(::open(file.abs.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
    if (!fd) return sysError(errno, "open {}", file.abs);
    struct stat st;
    if (fstat(fd.get(), &st) < 0) return sysError(errno, "stat {}", file.abs);
    if (!S_ISREG(st.st_mode)) return makeError(ErrorKind::kInvalidArgument, "{} is not a regular file", file.abs);
    FileEntry entry{file.rel, static_cast<uint64_t>(st.st_size), static_cast<uint32_t>(st.st_mode & 0777), {}};
    if (entry.size > kMaxFileSize) return makeError(ErrorKind::kInvalidArgument, "{} is too large", file.abs);
    TRY(forEachDataChunk(fd.get(), entry.size, options.chunk_size, file.abs,
                         [&](uint64_t offset, std::string_view data) -> Status {
                           ++stats.data_chunks;
                           stats.data_bytes += data.size();
                           std::string id = codec.idOf(data);
                           auto known = index_of.find(id);
                           if (known != index_of.end()) {
                             entry.extents.push_back({offset, known->second});
                             return ok();
                           }
                           ChunkRef ref{id, 0, 0, data.size(), true};
                           ASSIGN_OR_RETURN(auto record, recordFor(id, data, ref));
                           if (record) {
                             ref.offset = manifest.chunk_area_length;
                             ref.length = record->size();
                             TRY(writeAll(out.fd(), *record, out_file));
                             manifest.chunk_area_length += record->size();
                           }
                           index_of.emplace(id, manifest.chunks.size());
                           entry.extents.push_back({offset, manifest.chunks.size()});
                           manifest.chunks.push_back(std::move(ref));
                           return ok();
                         }));
    manifest.files.push_back(std::move(entry));
    ++stats.files;
  }
  stats.unique_chunks = manifest.chunks.size();

  std::string manifest_bytes = encodeManifest(manifest);
  if (manifest_bytes.size() > kMaxManifestBytes)
    return makeError(ErrorKind::kResourceExhausted,
                     "manifest of {} bytes exceeds the format's limit; use larger chunks", manifest_bytes.size());
  ASSIGN_OR_RETURN(auto sealed_manifest,
                   codec.sealManifest(manifest_bytes, manifestAssociatedData(lead, header_bytes)));
  TRY(writeAll(out.fd(), sealed_manifest, out_file));
  TRY(writeAll(out.fd(), encodeTrailer({body_start, manifest.chunk_area_length, sealed_manifest.size()}), out_file));
  stats.archive_bytes = body_start + manifest.chunk_area_length + sealed_manifest.size() + kTrailerBytes;
  TRY(out.commit());
  return stats;
}

}  // namespace

Result<ExportStats> exportSnapshot(const std::string& snapshot_dir, const std::string& out_file, const DataKey& key,
                                   const ExportOptions& options) {
  std::vector<SourceFile> files;
  TRY(listFiles(snapshot_dir, "", files));
  auto stats = writeArchive(files, out_file, key, options, ArchiveKind::kSnapshot);
  if (!stats) return tl::unexpected(stats.error().context(fmt::format("export {} to {}", snapshot_dir, out_file)));
  return stats;
}

Result<ExportStats> sealFile(const std::string& plain_path, const std::string& sealed_path, const DataKey& key) {
  auto stats = writeArchive({{"data", plain_path}}, sealed_path, key, {}, ArchiveKind::kSealedFile);
  if (!stats) return tl::unexpected(stats.error().context(fmt::format("seal {}", plain_path)));
  return stats;
}

}  // namespace space::archive
