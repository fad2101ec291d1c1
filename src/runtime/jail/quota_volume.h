// QuotaVolume: SPACE's own XFS filesystem for the sandboxes' writable layers. A sparse image file
// <state_dir>/disk.xfs, loop-mounted with prjquota at <state_dir>/sandboxes. Each sandbox directory is an
// XFS project with hard block and inode limits, so a sandbox filling its disk (or its inode table with
// millions of empty files) gets ENOSPC inside and the host disk is unaffected (J18).
#pragma once

#include <cstdint>
#include <string>

#include "common/result.h"
#include "common/unique_fd.h"
#include "sys/quota.h"

namespace space::jail {

class QuotaVolume {
 public:
  // Mounts the volume unless it is mounted already (reused as is, after checking it is XFS with prjquota).
  // mkfs.xfs runs only when the image file does not exist yet.
  static Result<QuotaVolume> open(const std::string& state_dir, uint64_t size_bytes);

  const std::string& mountPoint() const { return mount_point_; }

  // Creates `dir` (which must be directly under the mount point) as project `project_id` with the limits,
  // and its overlay subdirectories: upper/ and work/ owned by `owner` (the sandbox's root), lower/ and
  // rootfs/ as mount points.
  Status createSandboxDir(const std::string& dir, uint32_t project_id, uint64_t bytes, uint64_t inodes,
                          uint32_t owner);
  // Removes the limit and the whole tree. Idempotent.
  Status removeSandboxDir(const std::string& dir, uint32_t project_id);
  Result<sys::ProjectUsage> usage(uint32_t project_id);

 private:
  std::string mount_point_;
  UniqueFd fs_fd_;  // any fd on the filesystem names it for quotactl_fd
};

}  // namespace space::jail
