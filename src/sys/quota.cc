#include "sys/quota.h"

#include <linux/dqblk_xfs.h>
#include <linux/fs.h>
#include <linux/quota.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace space::sys {

namespace {
// XFS quota limits count 512-byte "basic blocks".
constexpr uint64_t kBasicBlock = 512;

long quotactlFd(int fs_fd, unsigned cmd, uint32_t id, void* addr) {
  // quotactl_fd(2) (Linux 5.14+) names the filesystem by any fd on it instead of by block device path.
  return syscall(SYS_quotactl_fd, fs_fd, cmd, id, addr);
}
}  // namespace

Status setProjectId(int dir_fd, uint32_t project_id) {
  fsxattr attr{};
  if (ioctl(dir_fd, FS_IOC_FSGETXATTR, &attr) < 0) return sysError(errno, "FS_IOC_FSGETXATTR");
  attr.fsx_projid = project_id;
  attr.fsx_xflags |= FS_XFLAG_PROJINHERIT;
  if (ioctl(dir_fd, FS_IOC_FSSETXATTR, &attr) < 0)
    return sysError(errno, "FS_IOC_FSSETXATTR(projid={})", project_id);
  return ok();
}

Status setProjectLimits(int fs_fd, uint32_t project_id, uint64_t bytes, uint64_t inodes) {
  fs_disk_quota q{};
  q.d_version = FS_DQUOT_VERSION;
  q.d_flags = FS_PROJ_QUOTA;
  q.d_id = project_id;
  q.d_fieldmask = FS_DQ_BSOFT | FS_DQ_BHARD | FS_DQ_ISOFT | FS_DQ_IHARD;
  q.d_blk_softlimit = q.d_blk_hardlimit = (bytes + kBasicBlock - 1) / kBasicBlock;
  q.d_ino_softlimit = q.d_ino_hardlimit = inodes;
  if (quotactlFd(fs_fd, QCMD(Q_XSETQLIM, PRJQUOTA), project_id, &q) < 0)
    return sysError(errno, "quotactl_fd(Q_XSETQLIM, project {}, {} bytes, {} inodes)", project_id, bytes, inodes);
  return ok();
}

Result<ProjectUsage> getProjectUsage(int fs_fd, uint32_t project_id) {
  fs_disk_quota q{};
  if (quotactlFd(fs_fd, QCMD(Q_XGETQUOTA, PRJQUOTA), project_id, &q) < 0)
    return sysError(errno, "quotactl_fd(Q_XGETQUOTA, project {})", project_id);
  ProjectUsage u;
  u.bytes = q.d_bcount * kBasicBlock;
  u.inodes = q.d_icount;
  u.bytes_limit = q.d_blk_hardlimit * kBasicBlock;
  u.inodes_limit = q.d_ino_hardlimit;
  return u;
}

}  // namespace space::sys
