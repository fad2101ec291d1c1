// The host's file table (SECURITY.md J26): fs.file-max against what the admitted sandboxes may open.
#pragma once

#include <cstdint>

#include "core/config.h"

namespace space::core {

// Open files the host keeps for itself (spaced, the gateway, everything else) above what sandboxes may hold.
inline constexpr uint64_t kHostFileReserve = 1u << 20;
// The pids a sandbox's share of the file table is sized for (at least: the default pids when more).
inline constexpr uint64_t kFileTablePids = 4096;
// fs.file-max now (0 when unreadable).
uint64_t hostFileMax();

// Raises fs.file-max to what config's sandboxes may open, or says loudly what to set.
void ensureFileTable(const DaemonConfig& config);

}  // namespace space::core
