#include "core/retention.h"

#include <algorithm>
#include <map>
#include <set>

namespace space::core {

namespace {
constexpr int64_t kMaxSeconds = 10ll * 365 * 24 * 3600;
}

nlohmann::json HistoryPolicy::toJson() const {
  nlohmann::json keep_j = nlohmann::json::array();
  for (const auto& t : keep) keep_j.push_back({{"within_s", t.within_s}, {"every_s", t.every_s}});
  nlohmann::json j = {{"every_s", every_s}, {"keep", keep_j}};
  if (after_exec) j["after_exec"] = true;
  return j;
}

HistoryPolicy HistoryPolicy::defaults(int64_t every_s, bool after_exec) {
  return {every_s, {{3600, 0}, {86400, 3600}, {7 * 86400, 86400}}, after_exec};
}

Result<HistoryPolicy> HistoryPolicy::parse(const nlohmann::json& j) {
  if (!j.is_object()) return makeError(ErrorKind::kInvalidArgument, "history must be an object");
  for (const auto& [k, v] : j.items())
    if (k != "every_s" && k != "keep" && k != "after_exec")
      return makeError(ErrorKind::kInvalidArgument, "history: unknown field '{}'", k);
  bool after_exec = false;
  if (j.contains("after_exec")) {
    if (!j["after_exec"].is_boolean())
      return makeError(ErrorKind::kInvalidArgument, "history.after_exec must be true or false");
    after_exec = j["after_exec"].get<bool>();
  }
  int64_t every = 0;
  if (j.contains("every_s") || !after_exec) {
    if (!j.contains("every_s") || !j["every_s"].is_number_integer())
      return makeError(ErrorKind::kInvalidArgument,
                       "history.every_s: an integer number of seconds is required (or after_exec: true)");
    every = j["every_s"].get<int64_t>();
    // 0 = no time cadence, only with after_exec.
    if ((every < 60 && !(every == 0 && after_exec)) || every > kMaxSeconds)
      return makeError(ErrorKind::kInvalidArgument, "history.every_s must be from 60 to {}", kMaxSeconds);
  }
  HistoryPolicy p = defaults(every, after_exec);
  if (j.contains("keep")) {
    if (!j["keep"].is_array() || j["keep"].empty() || j["keep"].size() > 8)
      return makeError(ErrorKind::kInvalidArgument, "history.keep: 1 to 8 tiers");
    p.keep.clear();
    int64_t last = 0;
    for (const auto& t : j["keep"]) {
      if (!t.is_object() || !t.contains("within_s") || !t["within_s"].is_number_integer() ||
          (t.contains("every_s") && !t["every_s"].is_number_integer()) || t.size() > 2)
        return makeError(ErrorKind::kInvalidArgument, "history.keep: tiers are {{\"within_s\": N, \"every_s\": M}}");
      RetentionTier tier{t["within_s"].get<int64_t>(), t.value("every_s", int64_t{0})};
      if (tier.within_s <= last || tier.within_s > kMaxSeconds || tier.every_s < 0 || tier.every_s > tier.within_s)
        return makeError(ErrorKind::kInvalidArgument,
                         "history.keep: within_s must ascend (max {}), 0 <= every_s <= within_s", kMaxSeconds);
      last = tier.within_s;
      p.keep.push_back(tier);
    }
  }
  return p;
}

bool snapshotDue(const HistoryPolicy& p, int64_t newest_auto_ms, int64_t now_ms) {
  if (p.every_s <= 0) return false;
  return newest_auto_ms == 0 || now_ms - newest_auto_ms >= p.every_s * 1000;
}

std::vector<std::string> snapshotsToThin(const HistoryPolicy& p, std::vector<HistoryEntry> autos, int64_t now_ms) {
  std::sort(autos.begin(), autos.end(), [](const auto& a, const auto& b) { return a.created_ms > b.created_ms; });
  std::vector<std::string> drop;
  std::set<std::pair<size_t, int64_t>> buckets_taken;  // (tier, bucket) already holding a newer snapshot
  for (size_t i = 0; i < autos.size(); ++i) {
    const auto& s = autos[i];
    if (i == 0) continue;  // the newest is always kept
    int64_t age_ms = std::max<int64_t>(0, now_ms - s.created_ms);
    size_t tier = 0;
    while (tier < p.keep.size() && age_ms >= p.keep[tier].within_s * 1000) ++tier;
    if (tier == p.keep.size()) {
      drop.push_back(s.id);
      continue;
    }
    int64_t every_ms = p.keep[tier].every_s * 1000;
    if (every_ms == 0) continue;
    int64_t bucket = s.created_ms / every_ms;
    if (!buckets_taken.insert({tier, bucket}).second) drop.push_back(s.id);
  }
  return drop;
}

}  // namespace space::core
