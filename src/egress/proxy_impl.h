// Internals shared by the gateway's listeners: the per-connection state, the decision flow, and the
// awaitable helpers. Included only by proxy*.cc and dns.cc.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <unordered_map>

#include "egress/asio.h"
#include "egress/policy.h"
#include "egress/proxy.h"

namespace space::egress {

namespace asio = boost::asio;
using asio::awaitable;
using asio::use_awaitable;
using asio::ip::tcp;
using Clock = std::chrono::steady_clock;

struct Conn;

struct Gateway::Impl {
  asio::io_context& io;
  Registry& registry;
  NameCache& cache;
  Audit& audit;
  GatewayOptions opts;
  std::shared_ptr<SSL_CTX> upstream_ctx;
  std::unique_ptr<tcp::acceptor> transparent, proxy;
  std::unique_ptr<asio::ip::udp::socket> dns;
  std::unique_ptr<asio::steady_timer> ticker;  // ends audit intervals, forgets refilled buckets
  size_t active = 0;
  std::map<std::string, size_t> active_per_sandbox;
  BucketsBySandbox connection_buckets;
  BucketsBySandbox dns_buckets;
  // Refusals for a rate, counted as they happen and handed to the audit as one record per sandbox at each
  // tick: under a flood the drop path is a lookup and an increment (E19). Keyed by the sandbox snapshot,
  // which the entry keeps alive; [0] DNS, [1] transparent connections, [2] proxy connections.
  struct Tally {
    std::shared_ptr<const Sandbox> sb;
    AuditRecord rec;
    uint64_t count = 0;
  };
  std::unordered_map<const Sandbox*, Tally> rate_drops[3];
  bool stopped = false;
  uint64_t wrong_link = 0;  // connections and queries refused: a sandbox's source on another link (V8)

  Impl(asio::io_context& i, Registry& r, NameCache& c, Audit& a, GatewayOptions o)
      : io(i),
        registry(r),
        cache(c),
        audit(a),
        opts(std::move(o)),
        connection_buckets(opts.connection_rate),
        dns_buckets(opts.dns_rate) {}

  // Facts for one decision: the static ones plus every sandbox subnet registered now.
  HostFacts currentFacts() const {
    HostFacts f = opts.facts;
    auto subnets = registry.subnets();
    f.sandbox_subnets.insert(f.sandbox_subnets.end(), subnets.begin(), subnets.end());
    return f;
  }

  awaitable<void> acceptLoop(tcp::acceptor& acceptor, bool transparent_mode);
  awaitable<void> transparentSession(std::shared_ptr<Conn> c);
  awaitable<void> proxySession(std::shared_ptr<Conn> c);
  awaitable<void> dnsLoop();
  awaitable<void> tickLoop();
  // Counts one refusal for a rate (which: 0 DNS, 1 transparent, 2 proxy); flushRateDrops() audits them.
  void tallyRateDrop(int which, const std::shared_ptr<const Sandbox>& sb, const IpAddress& src);
  void flushRateDrops();
  // What arrived from `src` on interface `ifindex` (0: unknown) came from this sandbox, or from nobody:
  // a wrong-link arrival is counted and audited (kind "dns"/"connect") as an unknown sender, never as
  // the sandbox that owns the address.
  std::shared_ptr<const Sandbox> senderOrAudit(const IpAddress& src, int ifindex, const char* kind, const char* mode);
  // A connection refused before it got a session: one audit record (aggregated like every refusal).
  void refuseAtAccept(const std::shared_ptr<const Sandbox>& sb, const IpAddress& src, bool transparent_mode,
                      std::string rule, std::string reason);
};

// One sandbox connection. Its destructor writes the connection's audit line, so that every path out of a
// session (including exceptions from the event loop) is audited exactly once.
struct Conn : std::enable_shared_from_this<Conn> {
  Gateway::Impl& g;
  std::shared_ptr<const Sandbox> sb;
  tcp::socket client;
  tcp::socket upstream;
  AuditRecord rec;
  Clock::time_point start = Clock::now();
  Clock::time_point last = Clock::now();
  std::chrono::milliseconds timeout;  // inactivity: handshake_timeout, then idle_timeout once relaying
  // Absolute (E20): bytes arriving do not move it. From accept until relaying starts, then per request
  // head on a relayed HTTP connection (armHeadDeadline). max(): none.
  Clock::time_point deadline = Clock::time_point::max();
  std::string deadline_reason;
  bool relaying = false;
  // Why the watchdog cut the connection, when that is the reason it ended (it overrides what the session
  // saw once its sockets were closed under it).
  std::string expired_rule, expired_reason;
  bool closed = false;
  bool counted = false;
  bool audited = false;

  Conn(Gateway::Impl& gi, tcp::socket s)
      : g(gi), client(std::move(s)), upstream(gi.io), timeout(gi.opts.handshake_timeout) {}
  ~Conn();

  void touch() { last = Clock::now(); }
  // The decision is made and bytes flow: only inactivity ends the connection from now on.
  void startRelaying() {
    relaying = true;
    timeout = g.opts.idle_timeout;
    deadline = Clock::time_point::max();
  }
  // The first byte of a request head on a relayed connection: the head must be complete by the deadline.
  void armHeadDeadline() {
    if (deadline != Clock::time_point::max()) return;
    deadline = Clock::now() + g.opts.head_deadline;
    deadline_reason =
        fmt::format("a request head was not complete within {} ms of its first byte", g.opts.head_deadline.count());
  }
  void disarmHeadDeadline() { deadline = Clock::time_point::max(); }
  // Called by the watchdog when it closes the connection at `now`.
  void expire(Clock::time_point now);
  // Writes the connection's audit line once. Called before the sockets close, so that whoever sees the
  // connection end can already read why.
  void finishAudit();
  void closeAll() {
    closed = true;
    boost::system::error_code ec;
    client.close(ec);
    upstream.close(ec);
  }
  PolicyContext policyContext(const HostFacts& facts) const {
    return PolicyContext{&facts, &g.opts.test_external_subnets};
  }
};

// Closes the connection's sockets once nothing moved for conn->timeout.
awaitable<void> watchdog(std::weak_ptr<Conn> weak);

// The decision for one target, with resolution and pinning (E1-E7, E10, E12, E13 in names).
// host: the SNI, Host or CONNECT host as sent ("" when there is none). dst: where the connection was
// going (transparent) or nullopt (explicit proxy: the gateway picks a vetted address into *chosen).
awaitable<Decision> decideTarget(Conn& c, std::string host, std::optional<IpAddress> dst, uint16_t port,
                                 IpAddress* chosen);

// The awaitable form of NameCache::lookup; completes on the io_context.
awaitable<Result<NameCache::Pinned>> lookupName(Gateway::Impl& g, const std::string& name);

tcp::endpoint toEndpoint(const IpAddress& ip, uint16_t port);
IpAddress fromEndpoint(const tcp::endpoint& ep);

// A short refusal on a plain HTTP connection (explicit proxy or transparent HTTP).
std::string refusal(int status, std::string_view reason);

}  // namespace space::egress
