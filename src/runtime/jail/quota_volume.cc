#include "runtime/jail/quota_volume.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "sys/loop.h"

extern char** environ;

namespace space::jail {

namespace {

constexpr long kXfsMagic = 0x58465342;  // "XFSB"

Status runCommand(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid;
  if (int rc = posix_spawnp(&pid, args[0], nullptr, nullptr, args.data(), environ); rc != 0)
    return sysError(rc, "spawn {}", argv[0]);
  int status = 0;
  if (waitpid(pid, &status, 0) < 0) return sysError(errno, "waitpid {}", argv[0]);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return makeError(ErrorKind::kInternal, "{} failed (status {:#x})", argv[0], status);
  return ok();
}

// The mount options of the mount at `path` from /proc/self/mountinfo ("" if not a mount point).
std::string superOptionsOf(const std::string& path) {
  std::ifstream in("/proc/self/mountinfo");
  std::string line, found;
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string id, parent, dev, root, point;
    f >> id >> parent >> dev >> root >> point;
    if (point == path) found = line;  // the last one wins: it is the top of the stack
  }
  return found;
}

bool looksLikeXfsImage(const std::string& image) {
  char magic[4] = {};
  std::ifstream in(image, std::ios::binary);
  in.read(magic, 4);
  return in.gcount() == 4 && std::string(magic, 4) == "XFSB";
}

}  // namespace

Result<QuotaVolume> QuotaVolume::open(const std::string& state_dir, uint64_t size_bytes) {
  QuotaVolume v;
  v.mount_point_ = state_dir + "/sandboxes";
  std::error_code ec;
  std::filesystem::create_directories(v.mount_point_, ec);
  if (ec) return sysError(ec.value(), "create {}", v.mount_point_);
  std::string image = state_dir + "/disk.xfs";

  if (superOptionsOf(v.mount_point_).empty()) {
    if (!looksLikeXfsImage(image)) {
      UniqueFd fd(::open(image.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
      if (!fd) return sysError(errno, "create {}", image);
      // Sparse: blocks are allocated on the host disk only as sandboxes write.
      if (ftruncate(fd.get(), static_cast<off_t>(size_bytes)) < 0) return sysError(errno, "ftruncate {}", image);
      TRY(runCommand({"mkfs.xfs", "-q", "-f", image}));
    }
    ASSIGN_OR_RETURN(sys::LoopDevice loop, sys::attachLoopDevice(image));
    if (mount(loop.path.c_str(), v.mount_point_.c_str(), "xfs", MS_NOSUID | MS_NODEV, "prjquota") < 0)
      return sysError(errno, "mount {} ({}) on {} with prjquota", image, loop.path, v.mount_point_);
    // Private: the sandboxes' overlay mounts below must never propagate into other mount namespaces of
    // the host (which would pin them after destroy).
    if (mount("none", v.mount_point_.c_str(), nullptr, MS_PRIVATE, nullptr) < 0)
      return sysError(errno, "make {} private", v.mount_point_);
  }
  std::string info = superOptionsOf(v.mount_point_);
  if (info.find(" xfs ") == std::string::npos || (info.find("prjquota") == std::string::npos &&
                                                   info.find("pquota") == std::string::npos))
    return makeError(ErrorKind::kInternal, "{} is mounted but not XFS with prjquota: {}", v.mount_point_, info);
  v.fs_fd_.reset(::open(v.mount_point_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!v.fs_fd_) return sysError(errno, "open {}", v.mount_point_);
  return v;
}

Status QuotaVolume::createSandboxDir(const std::string& dir, uint32_t project_id, uint64_t bytes, uint64_t inodes,
                                     uint32_t owner) {
  if (std::filesystem::path(dir).parent_path() != std::filesystem::path(mount_point_))
    return makeError(ErrorKind::kInvalidArgument, "sandbox dir {} is not directly under {}", dir, mount_point_);
  // 0711: the sandbox's uid must traverse it (its init resolves rootfs/ before pivot_root), nothing more.
  if (mkdir(dir.c_str(), 0711) < 0) return sysError(errno, "mkdir {}", dir);
  UniqueFd dfd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dfd) return sysError(errno, "open {}", dir);
  // Set before anything is created below: PROJINHERIT only reaches entries made afterwards.
  TRY(sys::setProjectId(dfd.get(), project_id));
  TRY(sys::setProjectLimits(fs_fd_.get(), project_id, bytes, inodes));
  for (const char* sub : {"upper", "work", "lower", "rootfs"}) {
    std::string path = dir + "/" + sub;
    if (mkdir(path.c_str(), 0755) < 0) return sysError(errno, "mkdir {}", path);
  }
  for (const char* sub : {"upper", "work"}) {
    std::string path = dir + "/" + sub;
    if (chown(path.c_str(), owner, owner) < 0) return sysError(errno, "chown {} {}", path, owner);
  }
  return ok();
}

Status QuotaVolume::removeSandboxDir(const std::string& dir, uint32_t project_id) {
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  if (ec) return sysError(ec.value(), "remove {}", dir);
  if (project_id != 0) TRY(sys::setProjectLimits(fs_fd_.get(), project_id, 0, 0));
  return ok();
}

Result<sys::ProjectUsage> QuotaVolume::usage(uint32_t project_id) {
  return sys::getProjectUsage(fs_fd_.get(), project_id);
}

}  // namespace space::jail
