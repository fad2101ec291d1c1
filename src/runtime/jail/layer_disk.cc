#include "runtime/jail/layer_disk.h"

#include <fcntl.h>
#include <ftw.h>
#include <spawn.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <mutex>
#include <vector>

#include "common/unique_fd.h"
#include "runtime/jail/launch.h"
#include "sys/host_command.h"
#include "sys/loop.h"

namespace space::jail {

namespace {

// The smallest image mkfs.ext4 formats comfortably; smaller quotas are rounded up to it.
constexpr uint64_t kMinImageBytes = 4ull << 20;

Status makeDir(const std::string& path, mode_t mode) {
  if (mkdir(path.c_str(), mode) < 0) return sysError(errno, "mkdir {}", path);
  return ok();
}

// For mount points that a sandbox restarted in place (rollback) has already.
Status ensureDir(const std::string& path, mode_t mode) {
  if (mkdir(path.c_str(), mode) < 0 && errno != EEXIST) return sysError(errno, "mkdir {}", path);
  return ok();
}

}  // namespace

Status mountLayerDisk(const std::string& dir, const std::string& image, std::string* device) {
  // 0711: the sandbox's uid must traverse it (its init resolves rootfs/ before pivot_root), nothing more.
  TRY(ensureDir(dir, 0711));
  std::string disk = dir + "/disk";
  TRY(ensureDir(disk, 0711));
  ASSIGN_OR_RETURN(sys::LoopDevice loop, sys::attachLoopDevice(image));
  // noatime: reading a file must not write the layer (a read-only exec leaves its write counter, and the
  // rolling history, alone). noinit_itable: the image is sparse, so its inode tables read as zeros
  // already; the kernel's lazy zeroing would only write (and allocate) them for nothing.
  if (mount(loop.path.c_str(), disk.c_str(), "ext4", MS_NOSUID | MS_NODEV | MS_NOATIME, "noinit_itable") < 0)
    return sysError(errno, "mount {} ({}) on {}", image, loop.path, disk);
  if (device) {
    struct stat st;
    if (fstat(loop.fd.get(), &st) < 0) return sysError(errno, "stat {}", loop.path);
    *device = fmt::format("{}:{}", major(st.st_rdev), minor(st.st_rdev));
  }
  // Private: nothing mounted here may propagate into other mount namespaces of the host (which would pin
  // the sandbox's layer after destroy).
  if (mount("none", disk.c_str(), nullptr, MS_PRIVATE, nullptr) < 0) return sysError(errno, "make {} private", disk);
  TRY(ensureDir(dir + "/lower", 0755));
  TRY(ensureDir(dir + "/rootfs", 0755));
  return ok();
}

Status createLayerDisk(const std::string& dir, const std::string& image, uint64_t bytes, uint64_t inodes,
                       uint32_t owner, std::string* device) {
  {
    UniqueFd fd(open(image.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
    if (!fd) return sysError(errno, "create {}", image);
    // Sparse: host blocks are allocated only as the sandbox writes, never beyond `bytes`.
    if (ftruncate(fd.get(), static_cast<off_t>(std::max(bytes, kMinImageBytes))) < 0)
      return sysError(errno, "ftruncate {}", image);
  }
  // No journal: the layer is disposable and the journal would cost every sandbox space and start time.
  // -m 0: no blocks reserved for root (the sandbox's root is the only user). -N: the inode quota.
  TRY(sys::runTool({"mkfs.ext4", "-q", "-F", "-O", "^has_journal", "-m", "0", "-N", std::to_string(inodes), "-E",
                    fmt::format("lazy_itable_init=1,root_owner={0}:{0}", owner), image}));
  TRY(mountLayerDisk(dir, image, device));
  for (const char* sub : {"upper", "work"}) {
    std::string path = dir + "/disk/" + sub;
    TRY(makeDir(path, 0755));
    if (chown(path.c_str(), owner, owner) < 0) return sysError(errno, "chown {} {}", path, owner);
  }
  return ok();
}

namespace {
uint32_t shift_from, shift_to, shift_count;
int shiftOne(const char* path, const struct stat* st, int, struct FTW*) {
  auto move = [](uint32_t id) { return id - shift_from < shift_count ? id - shift_from + shift_to : id; };
  uid_t uid = move(st->st_uid);
  gid_t gid = move(st->st_gid);
  if ((uid != st->st_uid || gid != st->st_gid) && lchown(path, uid, gid) < 0) return errno;
  // lchown clears setuid/setgid bits of files: put them back (the mount is nosuid anyway).
  if (!S_ISLNK(st->st_mode) && (st->st_mode & (S_ISUID | S_ISGID)) && chmod(path, st->st_mode & 07777) < 0)
    return errno;
  return 0;
}
}  // namespace

Status shiftLayerOwners(const std::string& dir, uint32_t from_base, uint32_t to_base, uint32_t count) {
  if (from_base == to_base) return ok();
  // nftw keeps its callback state in globals: one shift at a time.
  static std::mutex mu;
  std::lock_guard lock(mu);
  shift_from = from_base;
  shift_to = to_base;
  shift_count = count;
  std::string root = dir + "/disk";
  int rc = nftw(root.c_str(), shiftOne, 64, FTW_PHYS | FTW_MOUNT);
  if (rc != 0) return sysError(rc > 0 ? rc : errno, "shift the owners of {} to uid {}", root, to_base);
  return ok();
}

Status removeLayerDisk(const std::string& dir, const std::string& image) {
  if (!image.empty() && unlink(image.c_str()) < 0 && errno != ENOENT) return sysError(errno, "remove {}", image);
  struct stat st;
  if (lstat(dir.c_str(), &st) < 0) return errno == ENOENT ? ok() : sysError(errno, "stat {}", dir);
  unmountHostCopies(dir);
  // Never descend into a mount: remove_all would delete inside it (or fail on a read-only lower).
  for (const char* sub : {"rootfs", "lower", "disk"}) {
    std::string path = dir + "/" + sub;
    if (rmdir(path.c_str()) < 0 && errno != ENOENT) return sysError(errno, "rmdir {}", path);
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  if (ec) return sysError(ec.value(), "remove {}", dir);
  return ok();
}

Result<uint64_t> layerDiskUsage(const std::string& image) {
  struct stat st;
  if (stat(image.c_str(), &st) < 0) return sysError(errno, "stat {}", image);
  return static_cast<uint64_t>(st.st_blocks) * 512;
}

}  // namespace space::jail
