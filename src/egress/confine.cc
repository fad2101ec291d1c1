#include "egress/confine.h"

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <sys/capability.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <fstream>
#include <memory>

#include "common/unique_fd.h"
#include "runtime/jail/inside/seccomp.h"
#include "sys/mount_api.h"
#include "sys/path.h"

namespace space::egress {
namespace {

using sys::parentOf;
using sys::realPath;

// setresuid and capset act on the calling thread only (glibc relays setresuid to other threads, nothing
// relays capset or no_new_privs, and a seccomp filter without TSYNC binds one thread): a thread started
// before confinement would keep root and no filter.
Status checkSingleThreaded() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("Threads:", 0) == 0) {
      int n = std::atoi(line.c_str() + 8);
      if (n != 1) return makeError(ErrorKind::kInternal, "{} threads run already; confinement must come first", n);
      return ok();
    }
  return makeError(ErrorKind::kInternal, "no Threads: line in /proc/self/status");
}

// The audit directory becomes the gateway's own: the directory and the regular files in it (left by a
// gateway that ran as root) change owner. Through descriptors opened without following links, and only
// files with a single link: an earlier, compromised gateway that planted a symlink or a hard link to a
// host file here gets nothing of it.
Status handOver(const std::string& dir, uid_t uid, gid_t gid) {
  if (mkdir(dir.c_str(), 0700) < 0 && errno != EEXIST) return sysError(errno, "mkdir {}", dir);
  UniqueFd dfd(open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!dfd) return sysError(errno, "open {}", dir);
  if (fchown(dfd.get(), uid, gid) < 0) return sysError(errno, "chown {} to {}:{}", dir, uid, gid);
  if (fchmod(dfd.get(), 0700) < 0) return sysError(errno, "chmod {}", dir);
  UniqueFd listing(fcntl(dfd.get(), F_DUPFD_CLOEXEC, 0));
  if (!listing) return sysError(errno, "dup {}", dir);
  std::unique_ptr<DIR, decltype(&closedir)> d(fdopendir(listing.release()), closedir);
  if (!d) return sysError(errno, "list {}", dir);
  while (dirent* e = readdir(d.get())) {
    std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    UniqueFd f(openat(dfd.get(), name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
    if (!f) continue;  // a symlink (ELOOP) or gone: not ours to hand over
    struct stat st;
    if (fstat(f.get(), &st) < 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1) continue;
    if (fchown(f.get(), uid, gid) < 0) return sysError(errno, "chown {}/{}", dir, name);
    if (fchmod(f.get(), 0600) < 0) return sysError(errno, "chmod {}/{}", dir, name);
  }
  return ok();
}

Status enterMountNamespace() {
  if (unshare(CLONE_NEWNS) < 0) return sysError(errno, "unshare(CLONE_NEWNS)");
  // Nothing mounted below propagates back to the host.
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) < 0) return sysError(errno, "make / private");
  return ok();
}

Status mountRoot(const std::string& root) {
  if (mkdir(root.c_str(), 0700) < 0 && errno != EEXIST) return sysError(errno, "mkdir {}", root);
  if (mount("tmpfs", root.c_str(), "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0755,size=64k,nr_inodes=64") < 0)
    return sysError(errno, "mount tmpfs at {}", root);
  return ok();
}

// The mount point for host path `real` inside the root: its parents as 0755 directories of the tmpfs (so
// host directory modes above it do not matter), then a directory or an empty file like the source.
Status makeMountPoint(const std::string& root, const std::string& real, bool dir) {
  std::vector<std::string> chain;
  for (std::string p = dir ? real : parentOf(real); p != "/"; p = parentOf(p)) chain.insert(chain.begin(), p);
  for (const auto& p : chain)
    if (mkdir((root + p).c_str(), 0755) < 0 && errno != EEXIST) return sysError(errno, "mkdir {}{}", root, p);
  if (!dir) {
    UniqueFd f(open((root + real).c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
    if (!f) return sysError(errno, "create {}{}", root, real);
  }
  return ok();
}

enum class BindKind { kReadOnly, kWritable, kDevice };

Status bindPath(const std::string& root, const std::string& path, BindKind kind) {
  ASSIGN_OR_RETURN(std::string real, realPath(path));
  struct stat st;
  if (stat(real.c_str(), &st) < 0) return sysError(errno, "stat {}", real);
  if (kind == BindKind::kDevice && !S_ISCHR(st.st_mode))
    return makeError(ErrorKind::kInvalidArgument, "{} is not a character device", real);
  TRY(makeMountPoint(root, real, S_ISDIR(st.st_mode)));
  std::string target = root + real;
  if (mount(real.c_str(), target.c_str(), nullptr, MS_BIND | MS_REC, nullptr) < 0)
    return sysError(errno, "bind {} at {}", real, target);
  unsigned long flags = MS_BIND | MS_REMOUNT | MS_NOSUID | MS_NOEXEC;
  if (kind != BindKind::kWritable) flags |= MS_RDONLY;
  if (kind != BindKind::kDevice) flags |= MS_NODEV;  // device nodes work only on a mount without nodev
  if (mount(nullptr, target.c_str(), nullptr, flags, nullptr) < 0) return sysError(errno, "remount {}", target);
  return ok();
}

Status pivotInto(const std::string& root) {
  if (chdir(root.c_str()) < 0) return sysError(errno, "chdir {}", root);
  // pivot_root(".", ".") stacks the old root on the new one; detaching it leaves only the new.
  TRY(sys::pivotRoot(".", "."));
  if (umount2(".", MNT_DETACH) < 0) return sysError(errno, "detach the old root");
  if (chdir("/") < 0) return sysError(errno, "chdir /");
  if (mount(nullptr, "/", nullptr, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) < 0)
    return sysError(errno, "make / read-only");
  return ok();
}

// Needs CAP_SETPCAP, so it comes before the uid changes. The bounding set limits what any execve could
// regain; the ambient set is what one would keep.
Status dropBoundingAndAmbient() {
  // PR_CAPBSET_READ fails with EINVAL past the running kernel's last capability.
  for (int cap = 0; prctl(PR_CAPBSET_READ, cap, 0, 0, 0) >= 0; ++cap)
    if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0) return sysError(errno, "prctl(PR_CAPBSET_DROP, {})", cap);
  if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL)
    return sysError(errno, "prctl(PR_CAP_AMBIENT_CLEAR_ALL)");
  return ok();
}

Status dropToUid(uid_t uid, gid_t gid) {
  if (uid == 0 || gid == 0) return makeError(ErrorKind::kInvalidArgument, "the gateway may not run as uid or gid 0");
  if (setgroups(0, nullptr) < 0) return sysError(errno, "setgroups(0)");
  if (setresgid(gid, gid, gid) < 0) return sysError(errno, "setresgid({})", gid);
  if (setresuid(uid, uid, uid) < 0) return sysError(errno, "setresuid({})", uid);
  uid_t r, e, s;
  gid_t gr, ge, gs;
  if (getresuid(&r, &e, &s) < 0 || getresgid(&gr, &ge, &gs) < 0) return sysError(errno, "getresuid");
  if (r != uid || e != uid || s != uid || gr != gid || ge != gid || gs != gid)
    return makeError(ErrorKind::kInternal, "uids {}/{}/{} gids {}/{}/{} after the drop", r, e, s, gr, ge, gs);
  return ok();
}

// Leaving uid 0 already empties the permitted and effective sets (no SECBIT_KEEP_CAPS); clearing all
// three explicitly and reading them back makes that a checked fact rather than an assumption.
Status clearCapabilities() {
  std::unique_ptr<std::remove_pointer_t<cap_t>, decltype(&cap_free)> none(cap_init(), cap_free);
  if (!none || cap_clear(none.get()) < 0) return sysError(errno, "cap_init");
  if (cap_set_proc(none.get()) < 0) return sysError(errno, "cap_set_proc(empty)");
  std::unique_ptr<std::remove_pointer_t<cap_t>, decltype(&cap_free)> now(cap_get_proc(), cap_free);
  if (!now) return sysError(errno, "cap_get_proc");
  if (cap_compare(now.get(), none.get()) != 0)
    return makeError(ErrorKind::kInternal, "capabilities remain after clearing");
  return ok();
}

Status setNoNewPrivs() {
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) return sysError(errno, "prctl(PR_SET_NO_NEW_PRIVS)");
  return ok();
}

}  // namespace

std::vector<ConfineStep> confinementSteps(const Confinement& c) {
  // Compiled first, before anything changes: a policy that does not compile leaves the process as it was.
  auto program = std::make_shared<jail::SeccompProgram>();
  std::vector<ConfineStep> steps;
  steps.push_back({"check that no other thread runs", checkSingleThreaded});
  steps.push_back({"compile the seccomp policy", [&c, program]() -> Status {
                     ASSIGN_OR_RETURN(*program, jail::compileSeccompPolicy(c.seccomp_policy));
                     return ok();
                   }});
  for (const auto& dir : c.writable)
    steps.push_back(
        {"hand " + dir + " to uid " + std::to_string(c.uid), [&c, dir] { return handOver(dir, c.uid, c.gid); }});
  steps.push_back({"enter a mount namespace of its own", enterMountNamespace});
  steps.push_back({"mount an empty tmpfs at " + c.root_dir, [&c] { return mountRoot(c.root_dir); }});
  for (const auto& p : c.writable)
    steps.push_back({"bind " + p + " read-write", [&c, p] { return bindPath(c.root_dir, p, BindKind::kWritable); }});
  for (const auto& p : c.read_only)
    steps.push_back({"bind " + p + " read-only", [&c, p] { return bindPath(c.root_dir, p, BindKind::kReadOnly); }});
  for (const auto& p : c.devices)
    steps.push_back({"bind device " + p, [&c, p] { return bindPath(c.root_dir, p, BindKind::kDevice); }});
  steps.push_back({"pivot into its root", [&c] { return pivotInto(c.root_dir); }});
  steps.push_back({"drop the capability bounding and ambient sets", dropBoundingAndAmbient});
  steps.push_back({"drop to uid " + std::to_string(c.uid) + " gid " + std::to_string(c.gid),
                   [&c] { return dropToUid(c.uid, c.gid); }});
  steps.push_back({"clear every capability set", clearCapabilities});
  steps.push_back({"set no_new_privs", setNoNewPrivs});
  // Last: every step before needs syscalls the gateway's own policy does not allow.
  steps.push_back({"apply the seccomp allow-list", [program] { return jail::applySeccompProgram(*program); }});
  return steps;
}

Status confineGateway(const Confinement& c) {
  for (const auto& step : confinementSteps(c))
    if (auto st = step.run(); !st) return makeError(st.error().kind, "confine: {}: {}", step.name, st.error().message);
  return ok();
}

}  // namespace space::egress
