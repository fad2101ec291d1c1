// Reading archives: importSnapshot, openSealedFile, inspectArchive, rewrapArchive.
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <optional>
#include <set>

#include "archive/archive.h"
#include "archive/chunk_codec.h"
#include "archive/chunk_store.h"
#include "archive/durable_file.h"
#include "archive/sparse_file.h"
#include "common/defer.h"
#include "common/hex.h"
#include "common/unique_fd.h"
#include "crypto/aes_gcm.h"

namespace space::archive {
namespace {

// An archive whose clear parts parsed; nothing in it is authenticated yet.
struct OpenedArchive {
  std::string path;
  UniqueFd fd;
  uint64_t size = 0;
  mode_t mode = 0600;
  std::string header_bytes, manifest_aad;
  Header header;
  std::vector<KeySlot> slots;
  Trailer trailer;
};

Result<OpenedArchive> openArchive(const std::string& path) {
  OpenedArchive a;
  a.path = path;
  a.fd = UniqueFd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!a.fd) return sysError(errno, "open archive {}", path);
  struct stat st;
  if (fstat(a.fd.get(), &st) < 0) return sysError(errno, "stat {}", path);
  if (!S_ISREG(st.st_mode)) return makeError(ErrorKind::kInvalidArgument, "archive {} is not a regular file", path);
  a.size = static_cast<uint64_t>(st.st_size);
  a.mode = st.st_mode & 0777;
  if (a.size < kLeadBytes + kTrailerBytes)
    return makeError(ErrorKind::kInvalidArgument, "archive {} is truncated ({} bytes)", path, a.size);
  std::string bytes;
  TRY(preadExact(a.fd.get(), 0, kLeadBytes, bytes, path));
  ASSIGN_OR_RETURN(Lead lead, parseLead(bytes));
  std::string trailer;
  TRY(preadExact(a.fd.get(), a.size - kTrailerBytes, kTrailerBytes, trailer, path));
  ASSIGN_OR_RETURN(a.trailer, parseTrailer(trailer, a.size, lead));
  std::string header, key_block;
  TRY(preadExact(a.fd.get(), kLeadBytes, lead.header_len, header, path));
  TRY(preadExact(a.fd.get(), kLeadBytes + lead.header_len, lead.key_block_len, key_block, path));
  ASSIGN_OR_RETURN(a.header, parseHeader(header));
  ASSIGN_OR_RETURN(a.slots, parseKeyBlock(key_block));
  a.header_bytes = header;
  a.manifest_aad = manifestAssociatedData(bytes, header);
  return a;
}

struct Authenticated {
  ChunkCodec codec;
  Manifest manifest;
};

// Unwraps the DEK and opens the manifest, which authenticates the lead and header with it.
Result<Authenticated> authenticate(const OpenedArchive& a, const Kek& kek) {
  ASSIGN_OR_RETURN(auto key, unwrapDataKey(a.header.tenant, a.header.dek_id, a.slots, kek));
  ChunkCodec codec(std::move(key), a.header.dek_id);
  std::string record;
  TRY(preadExact(a.fd.get(), a.trailer.body_start + a.trailer.manifest_offset, a.trailer.manifest_len, record, a.path));
  ASSIGN_OR_RETURN(auto manifest_bytes, codec.openManifest(record, a.manifest_aad));
  ASSIGN_OR_RETURN(auto manifest, parseManifest(manifest_bytes, a.header));
  if (manifest.chunk_area_length != a.trailer.manifest_offset)
    return makeError(ErrorKind::kInvalidArgument, "archive {}: chunk area and manifest disagree", a.path);
  return Authenticated{std::move(codec), std::move(manifest)};
}

// Writes one file's data (verified chunk by chunk) into out_fd, sized first so that what is not written
// stays a hole. The caller fsyncs: only once everything verified, so a tampered archive costs no fsync.
Status restoreFile(const OpenedArchive& a, Authenticated& auth, const FileEntry& entry, int out_fd,
                   const std::string& out_path, const ChunkStore* store, bool add_to_store, ImportStats& stats) {
  if (ftruncate(out_fd, static_cast<off_t>(entry.size)) < 0) return sysError(errno, "size {}", out_path);
  std::optional<uint64_t> last_chunk;
  std::string plain, record;
  for (const auto& e : entry.extents) {
    const ChunkRef& ref = auth.manifest.chunks[e.chunk];
    if (last_chunk != e.chunk) {
      if (ref.in_archive) {
        TRY(preadExact(a.fd.get(), a.trailer.body_start + ref.offset, ref.length, record, a.path));
      } else {
        if (!store)
          return makeError(ErrorKind::kNotFound, "chunk {} is not in this thin archive and no chunk store was given",
                           ref.id);
        ASSIGN_OR_RETURN(auto stored, store->get(a.header.dek_id, ref.id));
        if (!stored)
          return makeError(ErrorKind::kNotFound, "chunk {} of this thin archive is not in the chunk store", ref.id);
        record = std::move(*stored);
      }
      ASSIGN_OR_RETURN(plain, auth.codec.open(ref.id, ref.raw_length, record));
      ++stats.chunks_verified;
      if (store && add_to_store && ref.in_archive) TRY(store->put(a.header.dek_id, ref.id, record));
      last_chunk = e.chunk;
    }
    TRY(writeSparse(out_fd, e.offset, plain, out_path));
    stats.data_bytes += plain.size();
  }
  if (fchmod(out_fd, entry.mode) < 0) return sysError(errno, "chmod {}", out_path);
  return ok();
}

Status importInto(const OpenedArchive& a, Authenticated& auth, const std::string& temp, const ImportOptions& options,
                  ImportStats& stats) {
  std::optional<ChunkStore> store;
  if (!options.chunk_store_dir.empty()) store.emplace(options.chunk_store_dir);
  std::set<std::string> dirs = {temp};
  std::vector<std::string> written;
  for (const auto& entry : auth.manifest.files) {
    // Paths were validated (relative, no '..'), and temp is a fresh 0700 directory of ours: nothing in
    // it can be a link planted by someone else.
    std::string path = temp + "/" + entry.path;
    std::string dir = parentDir(path);
    if (!dirs.count(dir)) {
      std::error_code ec;
      std::filesystem::create_directories(dir, ec);
      if (ec) return makeError(ErrorKind::kInternal, "create {}: {}", dir, ec.message());
      for (std::string d = dir; d.size() > temp.size(); d = parentDir(d)) dirs.insert(d);
    }
    UniqueFd out(::open(path.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC | O_NOFOLLOW, 0600));
    if (!out) return sysError(errno, "create {}", path);
    TRY(restoreFile(a, auth, entry, out.get(), path, store ? &*store : nullptr, options.add_to_store, stats));
    written.push_back(path);
    ++stats.files;
  }
  // Everything verified: now make it durable, files first, then the directories that name them.
  for (const auto& f : written) TRY(fsyncPath(f));
  for (const auto& d : dirs) TRY(fsyncPath(d));
  return ok();
}

struct Verified {
  OpenedArchive archive;
  Authenticated auth;
};

// Opens an archive of the expected kind and authenticates it under kek; errors name the file.
Result<Verified> openVerified(const std::string& path, ArchiveKind kind, const Kek& kek, std::string_view action) {
  auto fail = [&](Error e) { return tl::unexpected(e.context(fmt::format("{} {}", action, path))); };
  auto opened = openArchive(path);
  if (!opened) return fail(opened.error());
  if (opened->header.kind != kind)
    return fail(Error{ErrorKind::kInvalidArgument, 0,
                      kind == ArchiveKind::kSnapshot ? "it is a sealed file, not a snapshot archive"
                                                     : "it is a snapshot archive, not a sealed file"});
  auto auth = authenticate(*opened, kek);
  if (!auth) return fail(auth.error());
  return Verified{std::move(*opened), std::move(*auth)};
}

}  // namespace

Result<ImportStats> importSnapshot(const std::string& in_file, const std::string& dest_dir, const Kek& kek,
                                   const ImportOptions& options) {
  auto fail = [&](Error e) { return tl::unexpected(e.context(fmt::format("import {}", in_file))); };
  ASSIGN_OR_RETURN(auto verified, openVerified(in_file, ArchiveKind::kSnapshot, kek, "import"));
  struct stat st;
  if (lstat(dest_dir.c_str(), &st) == 0)
    return makeError(ErrorKind::kConflict, "import {}: {} already exists", in_file, dest_dir);

  std::string rnd;
  TRY(crypto::randomBytes(rnd, 8));
  auto slash = dest_dir.rfind('/');
  std::string base = slash == std::string::npos ? dest_dir : dest_dir.substr(slash + 1);
  std::string temp = fmt::format("{}/.{}.import-{}", parentDir(dest_dir), base, toHex(rnd));
  if (mkdir(temp.c_str(), 0700) < 0) return sysError(errno, "import {}: create {}", in_file, temp);
  Defer remove_temp([&] {
    std::error_code ec;
    std::filesystem::remove_all(temp, ec);
  });

  ImportStats stats;
  if (auto done = importInto(verified.archive, verified.auth, temp, options, stats); !done) return fail(done.error());
  // Only now, with every chunk verified and every file and directory fsynced, does dest appear.
  if (renameat2(AT_FDCWD, temp.c_str(), AT_FDCWD, dest_dir.c_str(), RENAME_NOREPLACE) < 0)
    return sysError(errno, "import {}: rename {} to {}", in_file, temp, dest_dir);
  remove_temp.dismiss();
  TRY(fsyncPath(parentDir(dest_dir)));
  return stats;
}

Status openSealedFile(const std::string& sealed_path, const std::string& out_path, const Kek& kek) {
  auto fail = [&](Error e) { return tl::unexpected(e.context(fmt::format("open sealed file {}", sealed_path))); };
  ASSIGN_OR_RETURN(auto verified, openVerified(sealed_path, ArchiveKind::kSealedFile, kek, "open sealed file"));
  const FileEntry& entry = verified.auth.manifest.files.front();
  auto out = AtomicFile::create(out_path, entry.mode);
  if (!out) return fail(out.error());
  ImportStats stats;
  if (auto done = restoreFile(verified.archive, verified.auth, entry, out->fd(), out_path, nullptr, false, stats);
      !done)
    return fail(done.error());
  return out->commit();
}

Result<ArchiveInfo> inspectArchive(const std::string& path) {
  ASSIGN_OR_RETURN(auto opened, openArchive(path));
  ArchiveInfo info{opened.header, {}};
  for (const auto& s : opened.slots) info.kek_ids.push_back(s.kek_id);
  return info;
}

Status rewrapArchive(const std::string& path, const Kek& from, const Kek& to) {
  auto fail = [&](Error e) { return tl::unexpected(e.context(fmt::format("rewrap {}", path))); };
  auto opened = openArchive(path);
  if (!opened) return fail(opened.error());
  // Authenticate first: rotation must not bless an altered archive with a fresh wrap.
  if (auto auth = authenticate(*opened, from); !auth) return fail(auth.error());
  auto slots = rewrapSlots(opened->header.tenant, opened->header.dek_id, opened->slots, from, to);
  if (!slots) return fail(slots.error());

  std::string header = opened->header_bytes, key_block = encodeKeyBlock(*slots);
  if (key_block.size() > kMaxKeyBlockBytes)
    return makeError(ErrorKind::kInvalidArgument, "rewrap {}: too many key slots", path);
  std::string lead = encodeLead({static_cast<uint32_t>(header.size()), static_cast<uint32_t>(key_block.size())});
  ASSIGN_OR_RETURN(auto out, AtomicFile::create(path, opened->mode));
  TRY(writeAll(out.fd(), lead + header + key_block, path));
  // The body (chunks, then the sealed manifest) is copied byte for byte: its offsets count from the body
  // start, and its authentication does not cover the key block.
  uint64_t body_start = lead.size() + header.size() + key_block.size();
  uint64_t body_len = opened->trailer.manifest_offset + opened->trailer.manifest_len;
  loff_t in_off = static_cast<loff_t>(opened->trailer.body_start);
  uint64_t copied = 0;
  std::string buf;
  while (copied < body_len) {
    size_t want = static_cast<size_t>(std::min<uint64_t>(body_len - copied, 1 << 20));
    ssize_t n = copy_file_range(opened->fd.get(), &in_off, out.fd(), nullptr, want, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EXDEV || errno == ENOSYS || errno == EINVAL || errno == EOPNOTSUPP)) {
      TRY(preadExact(opened->fd.get(), static_cast<uint64_t>(in_off), want, buf, path));
      TRY(writeAll(out.fd(), buf, path));
      in_off += static_cast<loff_t>(want);
      n = static_cast<ssize_t>(want);
    } else if (n < 0) {
      return sysError(errno, "rewrap {}: copy the body", path);
    } else if (n == 0) {
      return makeError(ErrorKind::kInvalidArgument, "rewrap {}: archive shrank while being copied", path);
    }
    copied += static_cast<uint64_t>(n);
  }
  TRY(writeAll(out.fd(), encodeTrailer({body_start, opened->trailer.manifest_offset, opened->trailer.manifest_len}),
               path));
  return out.commit();
}

}  // namespace space::archive
