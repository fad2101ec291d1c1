// Builds the node's SandboxManager from the daemon configuration: opens the store, sets up the runtimes,
// reconciles the database with the kernel, and starts the pool and the reaper.
#pragma once

#include <memory>

#include "common/result.h"
#include "core/config.h"
#include "core/manager.h"

namespace space::core {

// Open files the host keeps for itself (spaced, the gateway, everything else) above what sandboxes may hold.
inline constexpr uint64_t kHostFileReserve = 1u << 20;
// The pids a sandbox's share of the file table is sized for (at least: the default pids when more).
inline constexpr uint64_t kFileTablePids = 4096;
// fs.file-max now (0 when unreadable).
uint64_t hostFileMax();

Result<std::unique_ptr<SandboxManager>> makeSandboxManager(const DaemonConfig& config);

}  // namespace space::core
