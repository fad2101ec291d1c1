// Confinement of the VMM (SECURITY.md V2), after Firecracker's jailer: QEMU starts as PID 1 of its own
// pid namespace, in its own mount, network, IPC and UTS namespaces, as an unprivileged host uid of its
// own, with no_new_privs, inside a cgroup with memory and pids limits, and with QEMU's seccomp sandbox
// on (`-sandbox`, added to the argv by the caller). Its root is an empty tmpfs into which only the files it
// needs are bound, at their host paths: /usr (the QEMU binary, its libraries and firmware), the kernel and
// initramfs, the template's images (read-only), the VM's own directory (sockets, log, disk overlay) and
// a few device nodes. Guest RAM that comes from a template arrives as an inherited descriptor, never as
// a path: the template's files are not even visible to a restored VM's QEMU.
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

#include "common/result.h"
#include "runtime/vm/launch.h"

namespace space::vm {

struct VmmJail {
  uid_t uid = 0;  // the VMM's host uid and gid; must not be 0
  gid_t gid = 0;
  std::string root_dir;                // an empty host directory: the mount point of the VMM's tmpfs root
  std::vector<std::string> read_only;  // host paths (files or directories) visible read-only at the same path
  std::vector<std::string> writable;   // host paths visible read-write (the VM's directory)
  std::vector<std::string> devices;    // host device nodes bound in read-only (/dev/null, /dev/urandom)
  // A /dev/kvm of the VMM's own: a node made in its private /dev with the host node's device number,
  // owned by the VMM's uid, mode 0600 (docs/decisions/0008-kvm-for-the-vmm.md). The host's node, whatever
  // its owner and mode (root:kvm 0660, root:root 0600), is never bound in.
  bool kvm = false;
  int memory_fd = -1;  // inherited as kMemoryFd: the guest RAM's backing file
  int tap_fd = -1;     // inherited as kTapFd: the sandbox's host tap (QemuSpec::tap_fd)
  // Runs in spaced after the VMM exists and before it may exec (adds it to its cgroup).
  std::function<Status(pid_t)> before_exec;
};

// Where the VMM finds an inherited memory descriptor: memory-backend-file mem-path=/proc/self/fd/3.
inline constexpr int kMemoryFd = 3;
inline constexpr const char* kMemoryFdPath = "/proc/self/fd/3";
// Where the VMM finds the sandbox's tap: -netdev tap,fd=4. QEMU stays in its own empty network namespace;
// the descriptor, opened by spaced in the host's, is its only way to a network.
inline constexpr int kTapFd = 4;

// The arguments QEMU's own seccomp filter gets in a confined VMM: no obsolete syscalls, no setuid,
// no fork/exec, no scheduler or affinity changes.
inline constexpr const char* kQemuSandboxArg =
    "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny";

// The mount plan run by the VMM's pre-exec stub, computed in spaced (the stub may not allocate).
struct MountStep {
  // kDevTmpfs: a tmpfs without nodev at a (the VMM's /dev: the only place its device nodes work);
  // kCharDevice: a character node at a with device number rdev, owned by the VMM's uid and gid, mode 0600;
  // kRemountReadOnly: a, already a mount point, made read-only.
  enum Kind { kMkdir, kTouch, kBind, kBindReadOnly, kSymlink, kDevTmpfs, kCharDevice, kRemountReadOnly } kind;
  std::string a, b;  // kMkdir/kTouch: a; kBind*: a = source, b = target; kSymlink: a = target text, b = link
  dev_t rdev = 0;    // kCharDevice
};
// Every step to build `jail.root_dir` (paths resolved with realpath first; every parent directory made).
Result<std::vector<MountStep>> planVmmRoot(const VmmJail& jail);

Result<QemuProcess> launchConfinedQemu(const QemuSpec& spec, const VmmJail& jail);

}  // namespace space::vm
