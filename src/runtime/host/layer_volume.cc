#include "runtime/host/layer_volume.h"

#include <fcntl.h>
#include <linux/fs.h>
#include <spawn.h>
#include <spdlog/spdlog.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <vector>

#include "common/unique_fd.h"
#include "sys/host_command.h"
#include "sys/loop.h"

namespace space::host {

namespace {

bool isMountPoint(const std::string& path) {
  std::ifstream mi("/proc/self/mountinfo");
  for (std::string line; std::getline(mi, line);) {
    std::istringstream f(line);
    std::string id, parent, dev, root, point;
    f >> id >> parent >> dev >> root >> point;
    if (point == path) return true;
  }
  return false;
}

Status ensureDir(const std::string& path, mode_t mode) {
  if (mkdir(path.c_str(), mode) < 0 && errno != EEXIST) return sysError(errno, "mkdir {}", path);
  return ok();
}

Status makeSubdirs(const LayerVolume& v) {
  TRY(ensureDir(v.layersDir(), 0700));
  TRY(ensureDir(v.snapshotsDir(), 0700));
  return ok();
}

}  // namespace

bool canReflink(const std::string& dir) {
  std::string a = dir + "/.reflink-probe-a", b = dir + "/.reflink-probe-b";
  unlink(a.c_str());
  unlink(b.c_str());
  bool ok = false;
  {
    UniqueFd fa(open(a.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
    UniqueFd fb(open(b.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
    if (fa && fb) {
      char block[4096] = {1};
      ok = pwrite(fa.get(), block, sizeof block, 0) == static_cast<ssize_t>(sizeof block) &&
           ioctl(fb.get(), FICLONE, fa.get()) == 0;
    }
  }
  unlink(a.c_str());
  unlink(b.c_str());
  return ok;
}

Status cloneFile(const std::string& src, const std::string& dst, unsigned mode, bool durable) {
  UniqueFd in(open(src.c_str(), O_RDONLY | O_CLOEXEC));
  if (!in) return sysError(errno, "open {}", src);
  UniqueFd out(open(dst.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode));
  if (!out) return sysError(errno, "create {}", dst);
  if (ioctl(out.get(), FICLONE, in.get()) < 0) {
    int err = errno;
    unlink(dst.c_str());
    return sysError(err, "clone {} to {}", src, dst);
  }
  if (durable && fsync(out.get()) < 0) {
    int err = errno;
    unlink(dst.c_str());
    return sysError(err, "fsync {}", dst);
  }
  return ok();
}

Status syncDir(const std::string& dir) {
  UniqueFd fd(open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd) return sysError(errno, "open {}", dir);
  if (fsync(fd.get()) < 0) return sysError(errno, "fsync {}", dir);
  return ok();
}

Result<LayerVolume> openLayerVolume(const std::string& state_dir, uint64_t bytes) {
  LayerVolume v;
  std::string mount_point = state_dir + "/volume";
  if (isMountPoint(mount_point)) {
    v.root = mount_point;
    v.own_mount = true;
    TRY(makeSubdirs(v));
    return v;
  }
  if (canReflink(state_dir)) {
    v.root = state_dir;
    TRY(makeSubdirs(v));
    return v;
  }
  std::string image = state_dir + "/volume.img";
  struct stat st;
  if (stat(image.c_str(), &st) < 0) {
    if (errno != ENOENT) return sysError(errno, "stat {}", image);
    // Made under a temporary name: a crash mid-mkfs leaves no image that looks finished.
    std::string tmp = image + ".tmp";
    unlink(tmp.c_str());
    {
      UniqueFd fd(open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
      if (!fd) return sysError(errno, "create {}", tmp);
      if (ftruncate(fd.get(), static_cast<off_t>(bytes)) < 0) return sysError(errno, "ftruncate {}", tmp);
    }
    auto made = sys::runTool({"mkfs.xfs", "-q", "-f", "-m", "reflink=1", "-L", "space-layers", tmp});
    if (!made) {
      unlink(tmp.c_str());
      return tl::unexpected(made.error().context("make the layer volume (xfsprogs installed?)"));
    }
    if (rename(tmp.c_str(), image.c_str()) < 0) return sysError(errno, "rename {}", tmp);
    TRY(syncDir(state_dir));
    spdlog::info("layer volume: made {} ({} GiB sparse, XFS with reflink)", image, bytes >> 30);
  }
  TRY(ensureDir(mount_point, 0700));
  ASSIGN_OR_RETURN(sys::LoopDevice loop, sys::attachLoopDevice(image));
  // discard: blocks XFS frees become holes in volume.img again, so deleted layers give the host its disk back.
  if (mount(loop.path.c_str(), mount_point.c_str(), "xfs", MS_NOSUID | MS_NODEV | MS_NOATIME, "discard") < 0)
    return sysError(errno, "mount {} ({}) on {}", image, loop.path, mount_point);
  // Private: sandboxes' mount namespaces (copies of the host's) must not keep receiving or pinning it.
  if (mount("none", mount_point.c_str(), nullptr, MS_PRIVATE, nullptr) < 0)
    return sysError(errno, "make {} private", mount_point);
  v.root = mount_point;
  v.own_mount = true;
  TRY(makeSubdirs(v));
  return v;
}

void ensureVolumeReserve(const LayerVolume& v) {
  std::string path = v.reservePath();
  struct stat st;
  if (stat(path.c_str(), &st) == 0 && static_cast<uint64_t>(st.st_blocks) * 512 >= kVolumeReserveBytes) return;
  struct statvfs vfs;
  if (statvfs(v.root.c_str(), &vfs) < 0 || static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize < 2 * kVolumeReserveBytes)
    return;
  std::string tmp = path + ".tmp";
  UniqueFd fd(open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  if (!fd) return;
  if (fallocate(fd.get(), 0, 0, static_cast<off_t>(kVolumeReserveBytes)) < 0 || rename(tmp.c_str(), path.c_str()) < 0) {
    unlink(tmp.c_str());
    return;
  }
}

bool releaseVolumeReserve(const LayerVolume& v) {
  if (unlink(v.reservePath().c_str()) < 0) return false;
  spdlog::warn("layer volume {} is full: its reserve is released for a rollback", v.root);
  return true;
}

Status closeLayerVolume(const std::string& state_dir) {
  std::string mount_point = state_dir + "/volume";
  if (!isMountPoint(mount_point)) return ok();
  if (umount2(mount_point.c_str(), UMOUNT_NOFOLLOW) < 0) {
    if (errno == EBUSY) return makeError(ErrorKind::kConflict, "layer volume {} is still in use", mount_point);
    return sysError(errno, "umount {}", mount_point);
  }
  return ok();
}

}  // namespace space::host
