// What one sandbox may make the gateway do per second and hold at once (SECURITY.md E19, E20): token
// buckets for DNS queries, new connections and audit lines, and the connection caps with a reserve that
// keeps the node's last connections for sandboxes that hold few. Over a limit is counted and refused,
// never asserted on: the rates are the sandbox's to choose.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <unordered_map>

namespace space::egress {

using LimitClock = std::chrono::steady_clock;

struct Rate {
  double per_second = 0;
  double burst = 0;  // what a bucket holds when full; a new bucket starts full
};

class TokenBucket {
 public:
  TokenBucket(const Rate& rate, LimitClock::time_point now) : tokens_(rate.burst), last_(now) {}
  // Takes one token if there is one.
  bool take(const Rate& rate, LimitClock::time_point now);
  // Full again: nothing taken for long enough that forgetting the bucket changes nothing.
  bool full(const Rate& rate, LimitClock::time_point now) const;

 private:
  double tokens_;
  LimitClock::time_point last_;
};

// One bucket per sandbox id. Buckets that have refilled are forgotten by evictFull(), so the map holds only
// sandboxes that were busy lately.
class BucketsBySandbox {
 public:
  explicit BucketsBySandbox(Rate rate) : rate_(rate) {}
  bool take(const std::string& sandbox, LimitClock::time_point now);
  void evictFull(LimitClock::time_point now);
  const Rate& rate() const { return rate_; }
  size_t size() const { return buckets_.size(); }

 private:
  Rate rate_;
  std::unordered_map<std::string, TokenBucket> buckets_;
};

struct ConnectionCaps {
  size_t max_total = 4096;       // the node: every sandbox together
  size_t max_per_sandbox = 256;  // one sandbox
  // The last `reserve` connections of max_total go only to sandboxes holding fewer than
  // `reserve_per_sandbox`: sandboxes at their own cap cannot take the node's last connections together.
  size_t reserve = 512;
  size_t reserve_per_sandbox = 16;
};

enum class CapRefusal { kNone, kSandbox, kNode };

// Whether one more connection may open for a sandbox holding `held` while the node holds `total`. The
// sandbox's own cap is checked first, so a sandbox at its cap is told so whatever the node holds.
CapRefusal checkConnectionCaps(const ConnectionCaps& caps, size_t total, size_t held);

}  // namespace space::egress
