// Snapshot archives (core/snapshot_archives.h).
#include "core/snapshot_archives.h"

#include <spdlog/spdlog.h>

#include <filesystem>

#include "archive/archive.h"
#include "archive/kek.h"
#include "archive/key_store.h"
#include "common/defer.h"
#include "common/ids.h"
#include "core/memory_sealer.h"

namespace space::core {
namespace {

runtime::SnapshotRef refOf(const store::SnapshotRecord& s) { return {s.id, s.path, s.kind, s.size_bytes}; }

}  // namespace

Result<size_t> SnapshotArchives::rotateKeys() {
  if (ctx_.config.snapshot_kek.empty() || ctx_.config.snapshot_kek_previous.empty())
    return makeError(ErrorKind::kInvalidArgument,
                     "key rotation needs snapshot_kek (the new key) and "
                     "snapshot_kek_previous (the old one) in the daemon's config (docs/snapshot-archive.md)");
  ASSIGN_OR_RETURN(auto to, archive::kekFromSpec(ctx_.config.snapshot_kek));
  ASSIGN_OR_RETURN(auto from, archive::kekFromSpec(ctx_.config.snapshot_kek_previous));
  if (from->id() == to->id())
    return makeError(ErrorKind::kInvalidArgument, "snapshot_kek and snapshot_kek_previous are the same key ({})",
                     to->id());
  // No export or import runs meanwhile (both hold the data key they unwrapped, so they would not break,
  // but an export creating a tenant's first key under the old KEK would be missed).
  std::lock_guard op(snapshot_mu_);
  archive::KeyStore keys(ctx_.config.state_dir + "/keys");
  // Each tenant's file is replaced atomically (temporary file, fsync, rename, directory fsync): a crash
  // leaves every key wrapped by the old or the new KEK, and the rotation can simply be run again.
  ASSIGN_OR_RETURN(size_t rotated, keys.rotate(*from, *to));
  spdlog::info("keys: {} data key(s) rewrapped from {} to {}", rotated, from->id(), to->id());
  return rotated;
}

std::string SnapshotArchives::scratchPath(const std::string& prefix) {
  std::string dir = ctx_.config.state_dir + "/scratch";
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  return dir + "/" + prefix + "-" + randomHex(8);
}

namespace {

// The archive code says kUnauthenticated when a seal does not open; to an API client that would read as
// a bad API key. It is the archive (or the key it was sealed under) that is wrong.
Error archiveKeyFailure(Error e) {
  if (e.kind != ErrorKind::kUnauthenticated) return e;
  e.kind = ErrorKind::kInvalidArgument;
  e.message += " (the archive was altered, or sealed under another key than this node's snapshot_kek)";
  return e;
}

}  // namespace

Result<std::string> SnapshotArchives::exportSnapshot(const std::string& snapshot) {
  if (ctx_.config.snapshot_kek.empty())
    return makeError(ErrorKind::kUnsupported,
                     "snapshot export needs the customer's key: set snapshot_kek in the "
                     "daemon's config (file:, env: or command:, docs/snapshot-archive.md)");
  ASSIGN_OR_RETURN(store::SnapshotRecord s, ctx_.store.getSnapshot(snapshot));
  ASSIGN_OR_RETURN(auto kek, archive::kekFromSpec(ctx_.config.snapshot_kek));
  archive::KeyStore keys(ctx_.config.state_dir + "/keys");
  ASSIGN_OR_RETURN(archive::DataKey dek, keys.dataKey(ctx_.config.snapshot_tenant, *kek));
  archive::ExportOptions options;
  options.chunk_store_dir = ctx_.config.state_dir + "/chunks";
  std::string out = scratchPath(s.id) + ".spacearchive";
  ASSIGN_OR_RETURN(archive::ExportStats stats, archive::exportSnapshot(s.path, out, dek, options));
  spdlog::info("export {}: {} files, {} chunks ({} new), {} bytes", s.id, stats.files, stats.unique_chunks,
               stats.chunks_sealed, stats.archive_bytes);
  return out;
}

Result<store::SnapshotRecord> SnapshotArchives::importSnapshot(const std::string& id, const std::string& archive_path) {
  if (ctx_.config.snapshot_kek.empty())
    return makeError(ErrorKind::kUnsupported,
                     "snapshot import needs the customer's key: set snapshot_kek in the "
                     "daemon's config (file:, env: or command:, docs/snapshot-archive.md)");
  std::lock_guard op(snapshot_mu_);
  ASSIGN_OR_RETURN(store::SandboxRecord rec, ctx_.store.getSandbox(id));
  if (rec.pooled) return notFoundError("sandbox", "sandbox {} not found", id);
  store::SnapshotRecord s;
  s.id = "snap-" + randomHex(8);
  runtime::Runtime* rt = ctx_.runtimes.find(rec.runtime);
  s.path = rt ? rt->snapshotDirFor(s.id) : "";
  if (s.path.empty())
    return makeError(ErrorKind::kUnsupported, "snapshots of the {} runtime are not supported", rec.runtime);
  ASSIGN_OR_RETURN(std::unique_ptr<archive::Kek> kek, archive::kekFromSpec(ctx_.config.snapshot_kek));
  // An archive exported before a key rotation names the old KEK only: the tenant's stored data key opens it.
  kek = kekOpening(archive_path, std::move(kek), ctx_.config.state_dir + "/keys");
  archive::ImportOptions options;
  options.chunk_store_dir = ctx_.config.state_dir + "/chunks";
  auto imported = archive::importSnapshot(archive_path, s.path, *kek, options);
  if (!imported) return tl::unexpected(archiveKeyFailure(imported.error()));
  Defer drop([&] { (void)rt->deleteSnapshot(refOf(s)); });
  uint64_t disk = rec.spec.value("limits", nlohmann::json::object()).value("disk_bytes", uint64_t{0});
  ASSIGN_OR_RETURN(runtime::SnapshotRef adopted,
                   rt->adoptSnapshot(refOf(s), runtime::PersistedInstance{rec.id, rec.runtime, rec.persisted}, disk));
  s.sandbox_id = id;
  s.runtime = rec.runtime;
  s.kind = adopted.kind;
  s.origin = "import";
  s.created_ms = nowUnixMs();
  s.size_bytes = adopted.size_bytes;
  TRY(ctx_.store.insertSnapshot(s));
  drop.dismiss();
  return s;
}

}  // namespace space::core
