#include "core/ttl.h"

#include <algorithm>

namespace space::core {
namespace {
constexpr const char* kLeft = "ttl_left_ms";
constexpr const char* kPausedAt = "paused_at_ms";
}  // namespace

void stopTtlClock(store::SandboxRecord& rec, int64_t now_ms) {
  rec.spec[kPausedAt] = now_ms;
  if (rec.expires_ms == 0) return;
  rec.spec[kLeft] = std::max<int64_t>(0, rec.expires_ms - now_ms);
  rec.expires_ms = 0;
}

void startTtlClock(store::SandboxRecord& rec, int64_t now_ms) {
  rec.spec.erase(kPausedAt);
  if (!rec.spec.contains(kLeft)) return;
  rec.expires_ms = now_ms + rec.spec[kLeft].get<int64_t>();
  rec.spec.erase(kLeft);
}

void setTtlClock(store::SandboxRecord& rec, int64_t ttl_s, int64_t now_ms) {
  rec.spec["ttl_s"] = ttl_s;
  bool paused = rec.spec.contains(kPausedAt);
  rec.spec.erase(kLeft);
  rec.expires_ms = 0;
  if (ttl_s == 0) return;
  if (paused)
    rec.spec[kLeft] = ttl_s * 1000;
  else
    rec.expires_ms = now_ms + ttl_s * 1000;
}

std::optional<int64_t> ttlLeftMs(const store::SandboxRecord& rec, int64_t now_ms) {
  if (rec.spec.contains(kLeft)) return rec.spec[kLeft].get<int64_t>();
  if (rec.expires_ms) return std::max<int64_t>(0, rec.expires_ms - now_ms);
  return std::nullopt;
}

int64_t pausedAtMs(const store::SandboxRecord& rec) { return rec.spec.value(kPausedAt, int64_t{0}); }

}  // namespace space::core

// The operation, here beside the clock it moves.
#include "common/ids.h"
#include "core/manager_impl.h"

namespace space::core {

Result<SandboxView> Manager::setTtl(const std::string& id, const SetTtl& cmd) {
  ASSIGN_OR_RETURN(store::SandboxRecord rec, store_->getSandbox(id));
  if (rec.pooled) return notFoundError("sandbox", "sandbox {} not found", id);
  if (rec.state != store::SandboxState::kRunning && rec.state != store::SandboxState::kPaused)
    return makeError(ErrorKind::kConflict, "sandbox {} is {}: only a running or paused sandbox has a TTL to change", id,
                     store::toString(rec.state));
  int64_t now = nowUnixMs();
  int64_t ttl_s = 0;
  if (cmd.add_s) {
    auto left = ttlLeftMs(rec, now);
    if (!left) return makeError(ErrorKind::kInvalidArgument, "sandbox {} has no TTL to add to; set one with ttl_s", id);
    ttl_s = (*left + 999) / 1000 + *cmd.add_s;
  } else {
    ttl_s = cmd.ttl_s.value_or(0);
  }
  if (ttl_s < 0) return makeError(ErrorKind::kInvalidArgument, "the TTL would end before now");
  // As at create: no TTL only where the node gives none by default, and never more than max_ttl_s.
  if (ttl_s == 0 && config_.default_ttl_s > 0)
    return makeError(ErrorKind::kInvalidArgument, "this node gives every sandbox a TTL: from 1 to {} seconds",
                     config_.max_ttl_s);
  if (ttl_s > config_.max_ttl_s)
    return makeError(ErrorKind::kInvalidArgument, "a TTL of {} s exceeds this node's max_ttl_s ({} s)", ttl_s,
                     config_.max_ttl_s);
  setTtlClock(rec, ttl_s, now);
  TRY(store_->updateSandbox(rec));
  touch(id);
  return viewOf(rec, false);
}

}  // namespace space::core
