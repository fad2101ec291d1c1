// Host-side name resolution for sandboxes, and the pin that makes it happen once (E5). The resolver asks
// the configured upstream servers; the cache keeps the raw answer for at least kMinPin so that the answer a
// sandbox got from our DNS and the address the proxy connects to are the same vetted set, whatever TTL the
// upstream chose. Answers are classified per sandbox by the caller (policy.h decideAnswer).
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/result.h"
#include "egress/address.h"

namespace space::egress {

struct Resolution {
  std::vector<IpAddress> addresses;  // A then AAAA, as the upstream answered
  std::chrono::seconds ttl{0};
};

class Resolver {
 public:
  virtual ~Resolver() = default;
  // Starts the background work (c-ares's thread). Separate from construction so that the gateway reads
  // resolv.conf before it confines itself and starts the thread after, which then inherits the confinement.
  virtual Status start() { return ok(); }
  // Calls done exactly once, on any thread. Errors: kNotFound (NXDOMAIN / no data), kUnavailable.
  virtual void resolve(const std::string& name, std::function<void(Result<Resolution>)> done) = 0;
};

// c-ares on its own thread (docs/decisions/0004-egress-gateway.md), started by start(). servers: "1.1.1.1,8.8.8.8:53"
// or empty for the host's resolv.conf. /etc/hosts is never consulted: names come from DNS only.
Result<std::unique_ptr<Resolver>> makeCaresResolver(const std::string& servers, std::chrono::milliseconds timeout);

class NameCache {
 public:
  static constexpr std::chrono::seconds kMinPin{30};
  static constexpr std::chrono::seconds kMaxPin{300};
  static constexpr size_t kMaxEntries = 100000;

  using Clock = std::chrono::steady_clock;
  explicit NameCache(Resolver& resolver) : resolver_(resolver) {}

  struct Pinned {
    std::vector<IpAddress> addresses;
    std::chrono::seconds remaining{0};
  };
  // One resolution per pin period: concurrent callers for the same name share one upstream query.
  void lookup(const std::string& name, std::function<void(Result<Pinned>)> done);
  // What is pinned now, without resolving.
  std::optional<Pinned> peek(const std::string& name);

  void setClockForTest(std::function<Clock::time_point()> now) { now_ = std::move(now); }

 private:
  struct Entry {
    bool resolving = false;
    std::vector<IpAddress> addresses;
    Clock::time_point expires;
    std::vector<std::function<void(Result<Pinned>)>> waiters;
  };
  Resolver& resolver_;
  std::mutex mu_;
  std::map<std::string, Entry> entries_;
  std::function<Clock::time_point()> now_ = [] { return Clock::now(); };
};

}  // namespace space::egress
