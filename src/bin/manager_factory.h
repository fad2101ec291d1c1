// Builds the node's SandboxManager from the daemon configuration: opens the store, sets up the runtimes,
// reconciles the database with the kernel, and starts the pool and the reaper.
#pragma once

#include <memory>

#include "common/result.h"
#include "core/config.h"
#include "core/manager.h"

namespace space::core {

Result<std::unique_ptr<SandboxManager>> makeSandboxManager(const DaemonConfig& config);

}  // namespace space::core
