#include "core/file_table.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>

namespace space::core {

uint64_t hostFileMax() {
  unsigned long long v = 0;
  if (FILE* f = fopen("/proc/sys/fs/file-max", "r")) {
    if (fscanf(f, "%llu", &v) != 1) v = 0;
    fclose(f);
  }
  return v;
}

// The host's file table (SECURITY.md J26). Every process of a sandbox may hold `nofile` descriptors, so
// a sandbox reaches pids × nofile open files; the kernel charges them to the sandbox's memory cgroup, but
// fs.file-max is host-wide: with it below what the admitted sandboxes may open, a few sandboxes give
// ENFILE to spaced, the gateway and everyone. spaced raises it to max_sandboxes × pids × nofile plus a
// reserve for the host, and says so; where it cannot, it says what to set. The pids counted are the
// default's or kFileTablePids, whichever is more, so that creates asking for more pids than the default
// still fit their share (the size costs nothing until files are open, and those are charged to the
// sandbox's memory cgroup).
void ensureFileTable(const DaemonConfig& config) {
  uint64_t pids = std::max<uint64_t>(config.default_limits.pids, kFileTablePids);
  uint64_t per_sandbox = pids * config.default_limits.nofile;
  uint64_t need = per_sandbox * static_cast<uint64_t>(std::max(config.max_sandboxes, 1)) + kHostFileReserve;
  uint64_t current = hostFileMax();
  if (current >= need) return;
  FILE* f = fopen("/proc/sys/fs/file-max", "w");
  bool raised = f && fprintf(f, "%llu\n", static_cast<unsigned long long>(need)) > 0;
  if (f && fclose(f) != 0) raised = false;
  if (raised && hostFileMax() >= need) {
    spdlog::info("raised fs.file-max from {} to {}: {} sandboxes × {} pids × {} files, and {} for the host", current,
                 need, config.max_sandboxes, pids, config.default_limits.nofile, kHostFileReserve);
    return;
  }
  spdlog::warn(
      "fs.file-max is {}, but {} sandboxes × {} pids × {} files need {}: a few sandboxes could exhaust the "
      "host's file table. Set sysctl fs.file-max={} or lower max_sandboxes, the default pids or nofile",
      current, config.max_sandboxes, pids, config.default_limits.nofile, need, need);
}

}  // namespace space::core
