// Rolling history of a sandbox: when the next automatic snapshot is due, and which automatic snapshots
// a retention policy keeps (thinning). Pure functions of the snapshot list and a clock, so they are
// tested over simulated weeks in milliseconds.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/result.h"

namespace space::core {

// One retention tier: snapshots younger than `within_s` are kept at one per `every_s` (0 = all of them).
struct RetentionTier {
  int64_t within_s = 0;
  int64_t every_s = 0;
};

// {"every_s": 600, "after_exec": true, "keep": [{"within_s": 3600, "every_s": 0}, {"within_s": 86400,
//  "every_s": 3600}, {"within_s": 604800, "every_s": 86400}]}. At least one of every_s and after_exec.
struct HistoryPolicy {
  int64_t every_s = 0;              // take an automatic snapshot this often; 0 = never
  std::vector<RetentionTier> keep;  // ascending within_s; older than the last tier: deleted
  bool after_exec = false;          // and when an exec finished and the sandbox's files changed
  nlohmann::json toJson() const;
  static Result<HistoryPolicy> parse(const nlohmann::json& j);
  // All for an hour, hourly for a day, daily for a week.
  static HistoryPolicy defaults(int64_t every_s, bool after_exec = false);
};

struct HistoryEntry {
  std::string id;
  int64_t created_ms = 0;
};

// Whether an automatic snapshot is due, given the newest automatic one (0 = none yet).
bool snapshotDue(const HistoryPolicy& p, int64_t newest_auto_ms, int64_t now_ms);

// The ids of automatic snapshots the policy no longer keeps. Within each tier's age band the newest
// snapshot of every `every_s` bucket (buckets aligned to the epoch, so decisions do not drift as time
// passes) is kept; the newest snapshot overall is always kept.
std::vector<std::string> snapshotsToThin(const HistoryPolicy& p, std::vector<HistoryEntry> autos, int64_t now_ms);

}  // namespace space::core
