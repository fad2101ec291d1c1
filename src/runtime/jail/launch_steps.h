// The jail's host-side launch as ordered tables of named steps, one table per variant (the shape of
// inside/contain.cc, of Firecracker's jailer run() and nsjail's initParent()). Every step is one small
// function that may assume the steps before it have run; a failing step's name leads its error:
// "launch step 'uid map': write /proc/N/uid_map: Operation not permitted".
//
// Variants:
//  - fresh:    a new sandbox on a new, empty layer disk;
//  - fork:     a new sandbox whose layer is a block-sharing clone of a snapshot's;
//  - relaunch: a sandbox started again in place (rollback): its directory, layer image, cgroup and
//              subnet exist already.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "common/unique_fd.h"
#include "runtime/runtime.h"

namespace space::host {
class CgroupBackend;
}  // namespace space::host

namespace space::jail {

struct JailConfig;
using host::CgroupBackend;

enum class LaunchVariant { kFresh, kFork, kRelaunch };

// What the steps share: the inputs, then what earlier steps made for later ones.
struct HostLaunch {
  const JailConfig& config;
  CgroupBackend& cgroups;
  int agent_fd;  // the sealed agent binary
  const std::string& seccomp_policy;
  const runtime::SandboxSpec& spec;
  runtime::PersistedInstance& persisted;  // each step records what it made, for destroy() to undo
  std::string base_image;                 // fork: the snapshot's layer image
  // fork, relaunch: the uid range base the layer's files have now (relaunch: 0 when they are this sandbox's).
  uint32_t base_uid = 0;

  std::string device;  // the layer's loop device (maj:min)
  UniqueFd listen_fd, host_sync, child_sync, stdio;
  pid_t pid = 0;  // the sandbox's init
};

// The names of the steps `variant` runs, in order.
std::vector<std::string_view> launchStepNames(LaunchVariant variant);

// Runs the variant's steps; the first failure ends the launch, its error prefixed with the step's name.
// What the steps made stays recorded in launch.persisted (the caller unwinds it with destroy()).
Status runLaunchSteps(HostLaunch& launch, LaunchVariant variant);

}  // namespace space::jail
