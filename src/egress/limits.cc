#include "egress/limits.h"

#include <algorithm>

namespace space::egress {

namespace {

double refilled(double tokens, const Rate& rate, LimitClock::time_point last, LimitClock::time_point now) {
  if (now <= last) return tokens;
  double elapsed = std::chrono::duration<double>(now - last).count();
  return std::min(rate.burst, tokens + elapsed * rate.per_second);
}

}  // namespace

bool TokenBucket::take(const Rate& rate, LimitClock::time_point now) {
  tokens_ = refilled(tokens_, rate, last_, now);
  last_ = std::max(last_, now);
  if (tokens_ < 1) return false;
  tokens_ -= 1;
  return true;
}

bool TokenBucket::full(const Rate& rate, LimitClock::time_point now) const {
  return refilled(tokens_, rate, last_, now) >= rate.burst;
}

bool BucketsBySandbox::take(const std::string& sandbox, LimitClock::time_point now) {
  auto it = buckets_.find(sandbox);
  if (it == buckets_.end()) it = buckets_.emplace(sandbox, TokenBucket(rate_, now)).first;
  return it->second.take(rate_, now);
}

void BucketsBySandbox::evictFull(LimitClock::time_point now) {
  std::erase_if(buckets_, [&](const auto& kv) { return kv.second.full(rate_, now); });
}

CapRefusal checkConnectionCaps(const ConnectionCaps& caps, size_t total, size_t held) {
  if (held >= caps.max_per_sandbox) return CapRefusal::kSandbox;
  if (total >= caps.max_total) return CapRefusal::kNode;
  size_t shared = caps.max_total > caps.reserve ? caps.max_total - caps.reserve : 0;
  if (total >= shared && held >= caps.reserve_per_sandbox) return CapRefusal::kNode;
  return CapRefusal::kNone;
}

}  // namespace space::egress
