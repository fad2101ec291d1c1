// The sandbox's mount namespace: entered after the host built the overlay root at config.rootfs. Every
// mount here is made inside the sandbox's own user namespace, so the kernel's userns rules apply: mounts
// copied from the host are locked (cannot be revealed by unmounting what covers them), new proc needs a
// fully visible proc in the namespace, tmpfs/devpts are implicitly nodev-owned by this userns.
#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "common/unique_fd.h"
#include "runtime/jail/inside/steps.h"
#include "sys/mount_api.h"

namespace space::jail {

namespace {

Status doMount(const std::string& source, const std::string& target, const char* type, unsigned long flags,
               const std::string& data = "") {
  if (mount(source.c_str(), target.c_str(), type, flags, data.empty() ? nullptr : data.c_str()) < 0)
    return sysError(errno, "mount {} on {} (type {}, flags {:#x}, {})", source, target, type ? type : "-", flags, data);
  return ok();
}

Status ensureDir(const std::string& path, mode_t mode) {
  if (mkdir(path.c_str(), mode) < 0 && errno != EEXIST) return sysError(errno, "mkdir {}", path);
  return ok();
}

Status ensureFile(const std::string& path) {
  UniqueFd fd(open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644));
  if (!fd) return sysError(errno, "create bind target {}", path);
  return ok();
}

Status ensureSymlink(const std::string& target, const std::string& link) {
  if (symlink(target.c_str(), link.c_str()) < 0 && errno != EEXIST) return sysError(errno, "symlink {}", link);
  return ok();
}

// Read-only remount of a bind: the flags of the existing mount must be repeated, the kernel refuses to
// clear nosuid/nodev/noexec on a remount inside a user namespace when they were locked.
Status bindReadOnly(const std::string& path) {
  TRY(doMount(path, path, nullptr, MS_BIND | MS_REC));
  return doMount("none", path, nullptr, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC);
}

constexpr unsigned long kNoExecFlags = MS_NOSUID | MS_NODEV | MS_NOEXEC;

}  // namespace

Status enterMountCgroupTimeNamespaces() {
  // CLONE_NEWCGROUP after the host moved us into the sandbox's cgroups: that cgroup becomes our root.
  // CLONE_NEWTIME applies to children only (the agent's commands), which is all that matters.
  if (unshare(CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWTIME) < 0)
    return sysError(errno, "unshare(CLONE_NEWNS|CLONE_NEWCGROUP|CLONE_NEWTIME)");
  return ok();
}

Status makeMountsPrivate() {
  // Our copy of the host's mount table still shares peer groups with the host: without this, mounts made
  // here would propagate back to the host (and the host's into the sandbox).
  return doMount("none", "/", nullptr, MS_REC | MS_PRIVATE);
}

Status bindRootfs(const JailInitConfig& config) {
  // The overlay at config.rootfs is a copy of the host's mount, and copies made into a less privileged
  // mount namespace are locked: pivot_root refuses a locked new root (EINVAL). A bind of it onto itself is
  // a mount of our own namespace, which pivot_root accepts.
  return doMount(config.rootfs, config.rootfs, nullptr, MS_BIND | MS_REC);
}

Status mountProc(const JailInitConfig& config) {
  std::string proc = config.rootfs + "/proc";
  TRY(ensureDir(proc, 0555));
  // Our own pid namespace: this proc shows only sandbox pids (J9); no hidepid needed.
  return doMount("proc", proc, "proc", kNoExecFlags);
}

Status buildDev(const JailInitConfig& config) {
  std::string dev = config.rootfs + "/dev";
  TRY(ensureDir(dev, 0755));
  // A small tmpfs holds only the nodes we bind in (J10): no host /dev, no block devices, no kvm/mem/kmsg.
  TRY(doMount("tmpfs", dev, "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=755,size=65536k,nr_inodes=64"));
  for (const char* node : {"null", "zero", "full", "random", "urandom", "tty"}) {
    std::string target = dev + "/" + node;
    TRY(ensureFile(target));
    // Binding the host's character device is the only way to get one here: mknod is denied in a userns.
    TRY(doMount(std::string("/dev/") + node, target, nullptr, MS_BIND));
  }
  TRY(ensureDir(dev + "/pts", 0755));
  // newinstance: the sandbox's own pty numbering, no host ptys visible.
  TRY(doMount("devpts", dev + "/pts", "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620,gid=5"));
  TRY(ensureSymlink("pts/ptmx", dev + "/ptmx"));
  TRY(ensureDir(dev + "/shm", 01777));
  TRY(doMount("shm", dev + "/shm", "tmpfs", kNoExecFlags & ~MS_NOEXEC,
              fmt::format("mode=1777,size={},nr_inodes=4096", config.shm_bytes)));
  TRY(ensureSymlink("/proc/self/fd", dev + "/fd"));
  TRY(ensureSymlink("/proc/self/fd/0", dev + "/stdin"));
  TRY(ensureSymlink("/proc/self/fd/1", dev + "/stdout"));
  TRY(ensureSymlink("/proc/self/fd/2", dev + "/stderr"));
  return ok();
}

Status maskProc(const JailInitConfig& config) {
  std::string proc = config.rootfs + "/proc";
  // Files that leak host kernel state or act on the host (J3, J11): covered by /dev/null.
  for (const char* file : {"kcore", "kallsyms", "kmsg", "sched_debug", "timer_list", "timer_stats", "keys", "key-users",
                           "latency_stats", "sysrq-trigger", "kpagecount", "kpageflags", "kpagecgroup", "config.gz",
                           "modules", "slabinfo", "vmallocinfo", "buddyinfo",
                           // Every block device's I/O counters, every sandbox's layer loop device among
                           // them, and the host's file locks: a channel between tenants (J27).
                           "diskstats", "partitions", "locks"}) {
    std::string path = proc + "/" + file;
    struct stat st;
    if (lstat(path.c_str(), &st) < 0 || !S_ISREG(st.st_mode)) continue;
    TRY(doMount("/dev/null", path, nullptr, MS_BIND));
  }
  // Directories of host hardware and drivers: an empty read-only tmpfs on top.
  for (const char* dir : {"acpi", "asound", "scsi", "firmware", "driver", "tty/driver"}) {
    std::string path = proc + "/" + dir;
    struct stat st;
    if (lstat(path.c_str(), &st) < 0 || !S_ISDIR(st.st_mode)) continue;
    TRY(doMount("tmpfs", path, "tmpfs", kNoExecFlags | MS_RDONLY, "size=0,nr_inodes=1"));
  }
  // Writable knobs of the host kernel (core_pattern, modprobe, binfmt_misc, irq affinity): read-only.
  for (const char* dir : {"sys", "irq", "bus", "fs"}) {
    std::string path = proc + "/" + dir;
    struct stat st;
    if (lstat(path.c_str(), &st) < 0 || !S_ISDIR(st.st_mode)) continue;
    TRY(bindReadOnly(path));
  }
  return giveOwnBootId(config);
}

Status giveOwnBootId(const JailInitConfig& config) {
  // The host's boot id names the host (and its reboots) to every tenant (J27): the sandbox reads one of
  // its own. The file is made on the sandbox's /dev tmpfs, bound read-only over the kernel's, and
  // unlinked from /dev again (the bind keeps it).
  std::string target = config.rootfs + "/proc/sys/kernel/random/boot_id";
  struct stat st;
  if (lstat(target.c_str(), &st) < 0) return ok();
  unsigned char b[16];
  if (getrandom(b, sizeof b, 0) != static_cast<ssize_t>(sizeof b)) return sysError(errno, "getrandom");
  b[6] = (b[6] & 0x0f) | 0x40;  // a version 4 UUID, like the kernel's
  b[8] = (b[8] & 0x3f) | 0x80;
  std::string id = fmt::format(
      "{:02x}{:02x}{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}{:02x}{:02x}{:02x}{:02x}\n", b[0],
      b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
  std::string source = config.rootfs + "/dev/.boot_id";
  {
    UniqueFd fd(open(source.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0444));
    if (!fd) return sysError(errno, "create {}", source);
    if (write(fd.get(), id.data(), id.size()) != static_cast<ssize_t>(id.size()))
      return sysError(errno, "write {}", source);
  }
  TRY(doMount(source, target, nullptr, MS_BIND));
  TRY(doMount("", target, nullptr, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC));
  if (unlink(source.c_str()) < 0) return sysError(errno, "unlink {}", source);
  return ok();
}

Status pivotIntoRoot(const JailInitConfig& config) {
  // /tmp lives on the overlay, so it counts against the sandbox's disk quota (J18). mkdir is subject to
  // the umask, which would strip the sticky bit.
  std::string tmp = config.rootfs + "/tmp";
  TRY(ensureDir(tmp, 01777));
  if (chmod(tmp.c_str(), 01777) < 0) return sysError(errno, "chmod 1777 {}", tmp);
  if (chdir(config.rootfs.c_str()) < 0) return sysError(errno, "chdir {}", config.rootfs);
  // pivot_root(".", "."): the old root ends up stacked on "/", and one lazy unmount of "." removes it
  // with every host mount beneath it; nothing of the host's tree stays reachable (J9, J13).
  TRY(sys::pivotRoot(".", "."));
  if (umount2(".", MNT_DETACH) < 0) return sysError(errno, "umount2(old root, MNT_DETACH)");
  if (chdir("/") < 0) return sysError(errno, "chdir /");
  return ok();
}

}  // namespace space::jail
