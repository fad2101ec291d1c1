// Loop devices: attach a regular file as a block device so it can be mounted (SPACE's XFS volume).
#pragma once

#include <string>

#include "common/result.h"
#include "common/unique_fd.h"

namespace space::sys {

// Finds a free loop device (LOOP_CTL_GET_FREE) and binds `backing_file` to it with LOOP_CONFIGURE and
// LO_FLAGS_AUTOCLEAR: the device detaches by itself once its last user (the mount) goes away, so no loop
// device outlives the volume's mount. Returns the device path (/dev/loopN); the returned fd must stay
// open until the mount holds the device, otherwise autoclear detaches it immediately.
struct LoopDevice {
  std::string path;
  UniqueFd fd;
};
Result<LoopDevice> attachLoopDevice(const std::string& backing_file);

}  // namespace space::sys
