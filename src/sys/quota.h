// XFS project quota: per-directory-tree block and inode limits, the mechanism behind each sandbox's disk
// quota on SPACE's own XFS volume.
#pragma once

#include <cstdint>
#include <string>

#include "common/result.h"

namespace space::sys {

// Tags `dir_fd` with project `project_id` and sets PROJINHERIT, so every file and directory later made
// under it is charged to that project (FS_IOC_FSSETXATTR; needs CAP_FOWNER over the directory).
Status setProjectId(int dir_fd, uint32_t project_id);

// quotactl_fd(Q_XSETQLIM, PRJQUOTA): hard = soft limits on blocks and inodes for `project_id` on the
// filesystem holding `fs_fd`. Zero for both removes the limit. The filesystem must be mounted with
// prjquota (enforcement on), else XFS accepts the limit but never enforces it.
Status setProjectLimits(int fs_fd, uint32_t project_id, uint64_t bytes, uint64_t inodes);

struct ProjectUsage {
  uint64_t bytes = 0;
  uint64_t inodes = 0;
  uint64_t bytes_limit = 0;
  uint64_t inodes_limit = 0;
};
Result<ProjectUsage> getProjectUsage(int fs_fd, uint32_t project_id);

}  // namespace space::sys
