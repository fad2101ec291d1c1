// The sandbox resolver: answers A/AAAA only for names the sandbox's policy allows, from the pinned host-side
// resolution, with only the addresses that policy would let it connect to. Everything else is NXDOMAIN and
// nothing about it leaves the host (E16): a denied name is never forwarded upstream. Queries over a
// sandbox's rate are dropped unanswered (E19).
#include <cstring>

#include "egress/asio.h"
#include "egress/dns_message.h"
#include "egress/names.h"
#include "egress/proxy_impl.h"
#include "egress/secrets.h"
#include "sys/pktinfo.h"

namespace space::egress {

namespace {

constexpr size_t kMaxAnswers = 8;

awaitable<void> answerQuery(Gateway::Impl& g, std::shared_ptr<const Sandbox> sb, asio::ip::udp::endpoint from,
                            std::vector<uint8_t> msg) {
  AuditRecord rec;
  rec.kind = "dns";
  rec.sandbox = sb->id;
  rec.source = from.address().to_string();
  auto t0 = Clock::now();
  // A UDP send does not block for long; a plain call also keeps temporaries out of co_await (GCC 12).
  auto send = [&](const std::vector<uint8_t>& out) {
    boost::system::error_code ec;
    g.dns->send_to(asio::buffer(out), from, 0, ec);
  };
  auto finish = [&](const std::string& verdict, const std::string& rule, const std::string& reason) {
    rec.verdict = verdict;
    rec.rule = rule;
    rec.reason = reason;
    rec.duration_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    g.audit.write(rec);
  };
  auto q = dns::parseQuery(msg);
  if (!q) {
    finish("deny", "dns-malformed", q.error().message);
    if (auto id = dns::peekId(msg)) send(dns::buildFormErr(*id));
    co_return;
  }
  rec.name = q->name;
  if (auto i = findPlaceholder(q->name, sb->secrets)) {
    finish("deny", "placeholder", fmt::format("placeholder of secret {} in a DNS name", sb->secrets[*i].name));
    send(dns::buildResponse(*q, dns::kNxDomain, {}, 0));
    co_return;
  }
  if (q->qclass != dns::kClassIn) {
    finish("deny", "dns-class", "only class IN is answered");
    send(dns::buildResponse(*q, dns::kRefused, {}, 0));
    co_return;
  }
  auto name = normalizeName(q->name);
  if (!name) {
    finish("deny", "malformed-host", name.error().message);
    send(dns::buildResponse(*q, dns::kNxDomain, {}, 0));
    co_return;
  }
  rec.name = *name;
  // An address literal as a name ("127.0.0.1.", "2130706433") is never resolved on the sandbox's behalf.
  auto literal = parseHostLiteral(*name);
  if (!literal || *literal) {
    finish("deny", "address-literal", "a name spelled as an address is not resolved");
    send(dns::buildResponse(*q, dns::kNxDomain, {}, 0));
    co_return;
  }
  Decision d = decideName(sb->policy, *name, 0);
  if (!d.allowed()) {
    finish("deny", d.rule, d.reason);
    send(dns::buildResponse(*q, dns::kNxDomain, {}, 0));
    co_return;
  }
  if (q->qtype != dns::kA && q->qtype != dns::kAAAA) {
    finish("allow", d.rule, "no data for this type");
    send(dns::buildResponse(*q, dns::kNoError, {}, 0));
    co_return;
  }
  auto pinned = co_await lookupName(g, *name);
  if (!pinned) {
    finish("deny", "resolution", pinned.error().message);
    bool nx = pinned.error().kind == ErrorKind::kNotFound;
    send(dns::buildResponse(*q, nx ? dns::kNxDomain : dns::kServFail, {}, 0));
    co_return;
  }
  HostFacts facts = g.currentFacts();
  PolicyContext ctx{&facts, &g.opts.test_external_subnets};
  std::vector<IpAddress> answers;
  std::string first_denial;
  for (const auto& a : pinned->addresses) {
    rec.resolved.push_back(a.str());
    if (a.v6 != (q->qtype == dns::kAAAA)) continue;
    Decision ad = decideAnswer(sb->policy, ctx, a, 0);  // E4, E6: private answers never reach the sandbox
    if (!ad.allowed()) {
      if (first_denial.empty()) first_denial = ad.reason;
      continue;
    }
    if (answers.size() < kMaxAnswers) answers.push_back(a);
  }
  // TTL: what is left of the pin, so the sandbox asks again only when the gateway would resolve again.
  uint32_t ttl = uint32_t(pinned->remaining.count());
  finish("allow", d.rule, answers.empty() && !first_denial.empty() ? "answers withheld: " + first_denial : "answered");
  send(dns::buildResponse(*q, dns::kNoError, answers, ttl));
}

}  // namespace

awaitable<void> Gateway::Impl::dnsLoop() {
  std::vector<uint8_t> buf(4096);
  // The socket is non-blocking: the loop drains what is queued after each wake-up (a flood costs a
  // recvfrom per packet, not a coroutine resumption), and an answer that finds the send buffer full is
  // dropped rather than blocking the gateway's only thread.
  constexpr int kBatch = 256;
  while (!stopped) {
    boost::system::error_code ec;
    co_await dns->async_wait(asio::ip::udp::socket::wait_read, asio::redirect_error(use_awaitable, ec));
    if (ec) {
      if (ec == asio::error::operation_aborted || stopped) co_return;
      continue;
    }
    for (int i = 0; i < kBatch && !stopped; ++i) {
      sockaddr_storage from_addr{};
      socklen_t from_len = 0;
      int arrival = 0;
      auto got = sys::receiveWithArrival(dns->native_handle(), buf.data(), buf.size(), &from_addr, &from_len, &arrival);
      if (!got) break;  // drained (EAGAIN), or an error the next wait reports again
      size_t n = *got;
      asio::ip::udp::endpoint from;
      if (from_len > from.capacity()) continue;
      std::memcpy(from.data(), &from_addr, from_len);
      from.resize(from_len);
      IpAddress src = fromEndpoint(tcp::endpoint(from.address(), from.port()));
      auto sb = senderOrAudit(src, arrival, "dns", nullptr);
      if (!sb) continue;  // no answer: nothing to tell a stranger
      // Over the sandbox's rate, a query is dropped before it is parsed (E19): no answer costs nothing, and
      // a stub resolver retries after its timeout, when the bucket has refilled. The drops are counted and
      // audited as one record per tick.
      if (!dns_buckets.take(sb->id, Clock::now())) {
        tallyRateDrop(0, sb, src);
        continue;
      }
      std::vector<uint8_t> msg(buf.begin(), buf.begin() + n);
      asio::co_spawn(io, answerQuery(*this, sb, from, msg), asio::detached);
    }
  }
}

}  // namespace space::egress
