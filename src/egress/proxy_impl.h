// Internals shared by the gateway's listeners: the per-connection state, the decision flow, and the
// awaitable helpers. Included only by proxy*.cc and dns.cc.
#pragma once

#include <map>
#include <memory>
#include <string>

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
  size_t active = 0;
  std::map<std::string, size_t> active_per_sandbox;
  bool stopped = false;

  Impl(asio::io_context& i, Registry& r, NameCache& c, Audit& a, GatewayOptions o)
      : io(i), registry(r), cache(c), audit(a), opts(std::move(o)) {}

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
  std::chrono::milliseconds timeout;
  bool closed = false;
  bool counted = false;
  bool audited = false;

  Conn(Gateway::Impl& gi, tcp::socket s)
      : g(gi), client(std::move(s)), upstream(gi.io), timeout(gi.opts.handshake_timeout) {}
  ~Conn();

  void touch() { last = Clock::now(); }
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
