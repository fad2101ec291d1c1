// Who gets a session, and for how long it may take to decide (SECURITY.md E19, E20): every accepted
// connection is matched to its sandbox by source address, then held to the sandbox's rate of new
// connections and to the connection caps, and watched by a deadline that bytes arriving do not move. A
// refusal here costs an accept, a lookup and a close; its audit record is aggregated like every refusal.
#include <net/if.h>

#include <cstring>

#include "egress/asio.h"
#include "egress/proxy_impl.h"
#include "sys/pktinfo.h"

namespace space::egress {

void Conn::expire(Clock::time_point now) {
  if (now >= deadline) {
    expired_rule = "head-deadline";
    expired_reason = deadline_reason;
  } else if (!relaying) {
    expired_rule = "handshake-timeout";
    expired_reason = fmt::format("no byte for {} ms before the gateway could decide", timeout.count());
  }  // idle once relaying: an ordinary end, the connection's verdict stands
}

void Conn::finishAudit() {
  if (audited) return;
  if (!expired_rule.empty() && rec.verdict != "allow" && rec.verdict != "intercept") {
    rec.verdict = "deny";
    rec.rule = expired_rule;
    rec.reason = expired_reason;
  }
  if (rec.verdict.empty()) return;
  audited = true;
  rec.duration_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  g.audit.write(rec);
}

Conn::~Conn() {
  if (counted) {
    --g.active;
    if (sb && --g.active_per_sandbox[sb->id] == 0) g.active_per_sandbox.erase(sb->id);
  }
  finishAudit();
}

awaitable<void> watchdog(std::weak_ptr<Conn> weak) {
  asio::steady_timer timer(co_await asio::this_coro::executor);
  while (true) {
    Clock::time_point deadline;
    {
      auto c = weak.lock();
      if (!c || c->closed) co_return;
      deadline = std::min(c->last + c->timeout, c->deadline);
      auto now = Clock::now();
      if (now >= deadline) {
        c->expire(now);
        // The line first: whoever sees the connection end can already read why (a request cut on a relayed
        // connection gets its own line from the session, after this one).
        c->finishAudit();
        c->closeAll();
        co_return;
      }
    }
    timer.expires_at(std::min(deadline, Clock::now() + std::chrono::seconds(1)));
    boost::system::error_code ec;
    co_await timer.async_wait(asio::redirect_error(use_awaitable, ec));
  }
}

std::shared_ptr<const Sandbox> Gateway::Impl::senderOrAudit(const IpAddress& src, int ifindex, const char* kind,
                                                            const char* mode) {
  Registry::Sender who = registry.sender(src, ifindex);
  if (who.sb) return who.sb;
  AuditRecord rec;
  rec.kind = kind;
  rec.source = src.str();
  if (mode) rec.mode = mode;
  rec.verdict = "deny";
  if (who.wrong_link) {
    ++wrong_link;
    char name[IF_NAMESIZE] = "?";
    if (ifindex > 0 && !if_indextoname(static_cast<unsigned>(ifindex), name)) std::strcpy(name, "?");
    rec.rule = "wrong-link";
    rec.reason = fmt::format(
        "arrived on interface {} (index {}), not on the link of the sandbox this address "
        "belongs to: an unknown sender",
        name, ifindex);
  } else {
    rec.rule = "unknown-source";
    rec.reason = "the source address belongs to no sandbox";
  }
  audit.write(rec);
  return nullptr;
}

void Gateway::Impl::refuseAtAccept(const std::shared_ptr<const Sandbox>& sb, const IpAddress& src,
                                   bool transparent_mode, std::string rule, std::string reason) {
  AuditRecord rec;
  rec.kind = "connect";
  rec.sandbox = sb ? sb->id : "";
  rec.source = src.str();
  rec.mode = transparent_mode ? "transparent" : "http-proxy";
  rec.verdict = "deny";
  rec.rule = std::move(rule);
  rec.reason = std::move(reason);
  audit.write(rec);
}

awaitable<void> Gateway::Impl::acceptLoop(tcp::acceptor& acceptor, bool transparent_mode) {
  const std::string sandbox_cap_reason =
      fmt::format("the sandbox holds its {} connections", opts.connections.max_per_sandbox);
  const std::string node_cap_reason =
      fmt::format("the node's connections are taken (max {}, the last {} kept for sandboxes holding fewer than {})",
                  opts.connections.max_total, opts.connections.reserve, opts.connections.reserve_per_sandbox);
  while (!stopped) {
    boost::system::error_code ec;
    tcp::socket s = co_await acceptor.async_accept(asio::redirect_error(use_awaitable, ec));
    if (ec) {
      if (ec == asio::error::operation_aborted || stopped) co_return;
      continue;  // EMFILE and friends: keep serving
    }
    // Everything before the session is cheap on purpose: a refused connection costs an accept, a lookup
    // and a close, and its audit line is aggregated with the other refusals of its kind (E19).
    boost::system::error_code pe;
    auto peer = s.remote_endpoint(pe);
    if (pe) continue;
    IpAddress src = fromEndpoint(peer);
    int arrival = sys::acceptedArrivalInterface(s.native_handle());
    auto sb = senderOrAudit(src, arrival, "connect", transparent_mode ? "transparent" : "http-proxy");
    if (!sb) continue;
    if (!connection_buckets.take(sb->id, Clock::now())) {
      tallyRateDrop(transparent_mode ? 1 : 2, sb, src);
      continue;
    }
    auto held = active_per_sandbox.find(sb->id);
    CapRefusal cap = checkConnectionCaps(opts.connections, active, held == active_per_sandbox.end() ? 0 : held->second);
    if (cap != CapRefusal::kNone) {
      bool own = cap == CapRefusal::kSandbox;
      refuseAtAccept(sb, src, transparent_mode, own ? "connection-limit" : "node-connection-limit",
                     own ? sandbox_cap_reason : node_cap_reason);
      continue;
    }
    // Requests and answers are small writes that must leave at once: without this, Nagle holds a body
    // written after its head until the head is acknowledged, and a delayed ACK makes that up to 40 ms.
    s.set_option(tcp::no_delay(true), ec);
    auto c = std::make_shared<Conn>(*this, std::move(s));
    c->rec.kind = "connect";
    c->rec.source = src.str();
    c->sb = sb;
    c->rec.sandbox = sb->id;
    c->deadline = c->start + opts.head_deadline;
    c->deadline_reason = fmt::format("no decision within {} ms of accept", opts.head_deadline.count());
    ++active;
    ++active_per_sandbox[sb->id];
    c->counted = true;
    std::weak_ptr<Conn> weak = c;
    asio::co_spawn(io, watchdog(weak), asio::detached);
    asio::co_spawn(
        io,
        [this, c, transparent_mode]() -> awaitable<void> {
          try {
            if (transparent_mode)
              co_await transparentSession(c);
            else
              co_await proxySession(c);
          } catch (const std::exception& e) {
            if (c->rec.verdict.empty()) {
              c->rec.verdict = "error";
              c->rec.reason = e.what();
            }
          }
          c->finishAudit();
          c->closeAll();
        },
        asio::detached);
  }
}

void Gateway::Impl::tallyRateDrop(int which, const std::shared_ptr<const Sandbox>& sb, const IpAddress& src) {
  auto [it, fresh] = rate_drops[which].try_emplace(sb.get());
  Tally& t = it->second;
  if (fresh) {
    t.sb = sb;
    t.rec.kind = which == 0 ? "dns" : "connect";
    t.rec.sandbox = sb->id;
    t.rec.source = src.str();
    t.rec.verdict = "deny";
    if (which == 0) {
      t.rec.rule = "dns-rate-limit";
      t.rec.reason = fmt::format("over {} queries/s: dropped without an answer", opts.dns_rate.per_second);
    } else {
      t.rec.mode = which == 1 ? "transparent" : "http-proxy";
      t.rec.rule = "connection-rate-limit";
      t.rec.reason = fmt::format("over {} new connections/s: closed at once", opts.connection_rate.per_second);
    }
  }
  ++t.count;
}

void Gateway::Impl::flushRateDrops() {
  for (auto& drops : rate_drops) {
    for (auto& [key, t] : drops) audit.writeTally(t.rec, t.count);
    drops.clear();
  }
}

awaitable<void> Gateway::Impl::tickLoop() {
  // A quarter of the interval: an interval's summary lines are written at most a quarter late.
  auto period = std::max(std::chrono::milliseconds(25), audit.options().interval / 4);
  while (!stopped) {
    ticker->expires_after(period);
    boost::system::error_code ec;
    co_await ticker->async_wait(asio::redirect_error(use_awaitable, ec));
    if (ec || stopped) co_return;
    flushRateDrops();
    audit.tick();
    auto now = Clock::now();
    connection_buckets.evictFull(now);
    dns_buckets.evictFull(now);
  }
}

}  // namespace space::egress
