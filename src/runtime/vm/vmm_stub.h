// The confined VMM's pre-exec stub (confine.h): what the child of clone3 does between the clone and
// QEMU's execve, as an ordered table of named steps. spaced prepares everything the stub needs
// (VmmStubArgs: C strings and descriptors); a failing step writes a VmmStubFailure (its index, errno, the
// mount plan's entry) to the report pipe and exits, and spaced names the step in its error
// (vmmStubStepName).
#pragma once

#include <sys/types.h>

#include <string_view>
#include <vector>

#include "runtime/vm/confine.h"

namespace space::vm {

// One entry of the mount plan (MountStep) as plain C strings.
struct VmmStubMount {
  MountStep::Kind kind;
  const char* a;
  const char* b;
  dev_t rdev;
};

struct VmmStubArgs {
  const char* root;  // an empty host directory: the mount point of the VMM's tmpfs root
  const VmmStubMount* mounts;
  int mount_count;
  uid_t uid;
  gid_t gid;
  int go_read_fd;   // spaced writes one byte once the VMM is in its cgroup
  int go_write_fd;  // this copy of spaced's end of that pipe: closed first
  int report_fd;    // close-on-exec: EOF there is a successful execve
  int devnull_fd, log_fd;
  int memory_fd, tap_fd;  // above 16 (or -1): placed at kMemoryFd and kTapFd
  const char* qemu_path;
  char* const* argv;
};

// What the stub writes to report_fd when a step fails.
struct VmmStubFailure {
  int step;   // index into vmmStubStepNames()
  int err;    // errno of the failed call
  int mount;  // the mount plan's entry that failed (step "mount plan"), else -1
};

// Runs every step in order and execs QEMU; never returns. Only between clone3 and execve.
[[noreturn]] void runVmmStub(const VmmStubArgs& args);

// The names of the stub's steps, in order.
std::vector<std::string_view> vmmStubStepNames();
// The name of step `index`, or nullptr when it names no step.
const char* vmmStubStepName(int index);

}  // namespace space::vm
