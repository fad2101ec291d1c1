// The VM guest's half: inside a SPACE microVM the kernel starts space-agent as PID 1 with --vm-init
// (kernel command line `rdinit=/sbin/space-agent -- --vm-init`). It mounts the kernel filesystems, loads
// the initramfs's modules in dependency order, finds the host's virtio-serial port and hands it to
// agent::serve. The guest kernel is the isolation boundary here, so nothing is contained further.
#pragma once

#include <string>
#include <vector>

#include "agent/server/serve.h"
#include "common/result.h"

namespace space::vm {

// Name of the virtio-serial port the host binds to the agent (QEMU `virtserialport,name=`).
inline constexpr const char* kAgentPortName = "space.agent";
// Written by scripts/vm/build-guest: one absolute module path a line, dependencies first.
inline constexpr const char* kModuleListPath = "/lib/modules/space-modules.list";

// On success the returned options carry the port's fd (device_fd) and the base environment.
Result<agent::ServeOptions> vmInit(int argc, char** argv);

// Parses the module list file's text into paths (blank lines and '#' comments skipped).
std::vector<std::string> parseModuleList(const std::string& text);

}  // namespace space::vm
