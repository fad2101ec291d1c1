// Snapshots as encrypted archives (docs/snapshot-archive.md): export to a scratch file the caller streams
// out, import of an archive as a new snapshot of a sandbox, and the rotation of the tenants' data keys
// from the previous KEK to the current one.
//
// Locks: export, import and rotation hold the manager's one-operation lock (snapshot_mu_, handed in),
// so that none runs during a snapshot, rollback or fork, nor an import or rotation during another.
#pragma once

#include <mutex>
#include <string>

#include "core/context.h"

namespace space::core {

class SnapshotArchives {
 public:
  SnapshotArchives(const Context& ctx, std::mutex& snapshot_mu) : ctx_(ctx), snapshot_mu_(snapshot_mu) {}

  Result<std::string> exportSnapshot(const std::string& snapshot);
  Result<store::SnapshotRecord> importSnapshot(const std::string& id, const std::string& archive_path);
  Result<size_t> rotateKeys();
  // A scratch path under the state directory (for an upload or an export; removed by the caller).
  std::string scratchPath(const std::string& prefix);

 private:
  const Context& ctx_;
  std::mutex& snapshot_mu_;
};

}  // namespace space::core
