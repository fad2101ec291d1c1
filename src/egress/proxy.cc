#include "egress/proxy.h"

#include <poll.h>

#include "egress/asio.h"
#include "egress/client_hello.h"
#include "egress/proxy_http.h"
#include "sys/netfilter.h"
#include "sys/pktinfo.h"

namespace space::egress {

tcp::endpoint toEndpoint(const IpAddress& ip, uint16_t port) {
  if (ip.v6) {
    asio::ip::address_v6::bytes_type b;
    std::copy(ip.bytes.begin(), ip.bytes.end(), b.begin());
    return {asio::ip::address_v6(b), port};
  }
  return {asio::ip::address_v4(ip.v4Value()), port};
}

IpAddress fromEndpoint(const tcp::endpoint& ep) {
  IpAddress ip;
  if (ep.address().is_v6()) {
    ip.v6 = true;
    auto b = ep.address().to_v6().to_bytes();
    std::copy(b.begin(), b.end(), ip.bytes.begin());
    return ip;
  }
  return IpAddress::fromV4(ep.address().to_v4().to_uint());
}

std::string refusal(int status, std::string_view reason) {
  const char* text = status == 403   ? "Forbidden"
                     : status == 400 ? "Bad Request"
                     : status == 405 ? "Method Not Allowed"
                     : status == 502 ? "Bad Gateway"
                     : status == 503 ? "Service Unavailable"
                                     : "Error";
  std::string body = fmt::format("space-egress: {}\n", reason);
  return fmt::format(
      "HTTP/1.1 {} {}\r\nContent-Type: text/plain\r\nX-Space-Egress: refused\r\nContent-Length: {}\r\n"
      "Connection: close\r\n\r\n{}",
      status, text, body.size(), body);
}

Result<tcp::endpoint> parseListenAddress(const std::string& text) {
  size_t colon = text.rfind(':');
  if (colon == std::string::npos)
    return makeError(ErrorKind::kInvalidArgument, "listen address '{}' needs a port", text);
  std::string host = text.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  ASSIGN_OR_RETURN(auto ip, parseIp(host));
  std::string port = text.substr(colon + 1);
  if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos ||
      std::stoi(port) > 65535)
    return makeError(ErrorKind::kInvalidArgument, "bad port in '{}'", text);
  return toEndpoint(ip, uint16_t(std::stoi(port)));
}

namespace {

// Starts a NameCache lookup and completes the awaiting coroutine on its executor. Only pointers inside:
// GCC 12 destroys a coroutine's by-value parameters twice in Asio 1.74's use_awaitable initiation, which
// is harmless only for trivially destructible initiations. The pointees live in lookupName's frame.
struct LookupInitiation {
  Gateway::Impl* g;
  const std::string* name;
  const asio::any_io_executor* ex;

  template <class Handler>
  void operator()(Handler handler) const {
    auto h = std::make_shared<Handler>(std::move(handler));
    auto exec = *ex;
    g->cache.lookup(*name, [h, exec](Result<NameCache::Pinned> r) {
      asio::post(exec, [h, r = std::move(r)]() mutable { (*h)(std::move(r)); });
    });
  }
};
static_assert(std::is_trivially_destructible_v<LookupInitiation>);

}  // namespace

awaitable<Result<NameCache::Pinned>> lookupName(Gateway::Impl& g, const std::string& name) {
  const std::string key = name;
  const asio::any_io_executor ex = co_await asio::this_coro::executor;
  Result<NameCache::Pinned> r = co_await asio::async_initiate<decltype(use_awaitable), void(Result<NameCache::Pinned>)>(
      LookupInitiation{&g, &key, &ex}, use_awaitable);
  co_return r;
}

awaitable<Decision> decideTarget(Conn& c, std::string host, std::optional<IpAddress> dst, uint16_t port,
                                 IpAddress* chosen) {
  const Policy& policy = c.sb->policy;
  HostFacts facts = c.g.currentFacts();
  PolicyContext ctx = c.policyContext(facts);
  auto deny = [](std::string rule, std::string reason) { return Decision{Verdict::kDeny, rule, reason}; };
  if (host.empty()) {
    if (!dst) co_return deny("no-target", "no host and no destination");
    *chosen = *dst;
    co_return decideConnection(policy, ctx, "", *dst, port);
  }
  if (auto i = findPlaceholder(host, c.sb->secrets))
    co_return deny("placeholder", fmt::format("placeholder of secret {} in a host name", c.sb->secrets[*i].name));
  auto literal = parseHostLiteral(host);
  if (!literal) co_return deny("malformed-host", literal.error().message);
  if (*literal) {
    IpAddress ip = **literal;
    if (dst && *dst != ip)
      co_return deny("destination-mismatch", fmt::format("host {} is not the destination {}", ip.str(), dst->str()));
    *chosen = ip;
    co_return decideConnection(policy, ctx, "", ip, port);
  }
  auto name = normalizeName(host);
  if (!name) co_return deny("malformed-host", name.error().message);
  c.rec.name = *name;
  Decision d = decideName(policy, *name, port);
  if (!d.allowed()) co_return d;
  auto pinned = co_await lookupName(c.g, *name);
  if (!pinned) co_return deny("resolution", pinned.error().message);
  std::vector<IpAddress> vetted;
  Decision first_denial;
  c.rec.resolved.clear();
  for (const auto& a : pinned->addresses) {
    c.rec.resolved.push_back(a.str());
    Decision ad = decideAnswer(policy, ctx, a, port);
    if (ad.allowed())
      vetted.push_back(a);
    else if (first_denial.rule.empty())
      first_denial = ad;
  }
  if (dst) {
    // Transparent: the sandbox chose the address; it must be one the gateway vetted for this name (E5, E10).
    if (std::find(vetted.begin(), vetted.end(), *dst) == vetted.end())
      co_return deny("destination-mismatch",
                     fmt::format("destination {} is not a vetted address of {}", dst->str(), *name));
    *chosen = *dst;
  } else {
    if (vetted.empty())
      co_return deny(first_denial.rule.empty() ? "resolution" : first_denial.rule,
                     fmt::format("no usable address for {}: {}", *name, first_denial.reason));
    *chosen = vetted.front();
  }
  co_return decideConnection(policy, ctx, *name, *chosen, port);
}

namespace {

// Peeks (MSG_PEEK) until the ClientHello or an HTTP head is complete, without consuming anything: the bytes
// stay in the socket for the upstream (passthrough) or for the TLS server handshake (interception).
struct Peeked {
  bool tls = false;
  bool http = false;
  std::string sni;        // TLS
  std::string host;       // HTTP Host (host part)
  std::string error;      // neither, or malformed
  bool bad_http = false;  // error is about an HTTP request: the sandbox gets a 400, the audit says http-strict
};

// Whether the peer has closed its sending side (no more bytes will come after what is queued). MSG_PEEK
// keeps returning the queued bytes after a FIN, so without this an incomplete first message would hold
// the connection until the handshake timeout.
bool peerHalfClosed(tcp::socket& s) {
  pollfd p{s.native_handle(), POLLRDHUP, 0};
  return ::poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

awaitable<Peeked> peekFirstBytes(Conn& c, uint16_t default_port) {
  Peeked out;
  std::vector<uint8_t> buf(tls::kMaxClientHello);
  asio::steady_timer backoff(c.client.get_executor());
  auto delay = std::chrono::milliseconds(1);
  while (true) {
    co_await c.client.async_wait(tcp::socket::wait_read, use_awaitable);
    const bool final_bytes = peerHalfClosed(c.client);  // checked before the peek: then the peek saw them all
    size_t n = co_await c.client.async_receive(asio::buffer(buf), tcp::socket::message_peek, use_awaitable);
    if (n == 0) {
      out.error = "connection closed before any request";
      co_return out;
    }
    std::span<const uint8_t> data(buf.data(), n);
    if (data[0] == 0x16) {
      auto r = tls::parseClientHello(data);
      if (!r) {
        out.error = r.error().message;
        co_return out;
      }
      if (r->state == tls::ParseState::kDone) {
        out.tls = true;
        out.sni = r->hello.server_name.value_or("");
        co_return out;
      }
    } else {
      std::string_view text(reinterpret_cast<const char*>(buf.data()), n);
      auto upper = [](char ch) { return ch >= 'A' && ch <= 'Z'; };
      size_t sp = text.find(' ');
      bool token =
          sp != std::string_view::npos && sp > 0 && sp < 16 && std::all_of(text.begin(), text.begin() + sp, upper);
      // A method is upper-case letters: anything else is decided on its first byte, not after more arrive.
      size_t letters = std::find_if_not(text.begin(), text.end(), upper) - text.begin();
      bool may_become_token = letters == n && n < 16;
      if (!token && !may_become_token) {
        out.error = "neither a TLS ClientHello nor an HTTP request";
        co_return out;
      }
      auto fail_http = [&](const std::string& why) {
        out.error = why;
        out.bad_http = true;
      };
      auto end = http::findHeadEnd(text);
      if (!end) {
        fail_http(end.error().message);
        co_return out;
      }
      if (*end != std::string_view::npos) {
        auto head = http::parseRequestHead(text.substr(0, *end));
        if (!head) {
          fail_http(head.error().message);
          co_return out;
        }
        out.http = true;
        if (const http::Header* h = head->find("Host")) {
          auto a = http::parseAuthority(h->value, default_port);
          if (!a) {
            fail_http(a.error().message);
            co_return out;
          }
          out.host = a->bracketed ? "[" + a->host + "]" : a->host;
        }
        co_return out;
      }
    }
    if (final_bytes) {
      out.error = "connection closed before the first message was complete";
      out.bad_http = data[0] != 0x16;
      co_return out;
    }
    if (n >= buf.size()) {
      out.error = "first message too large";
      co_return out;
    }
    // More bytes are needed; the socket stays readable because of what is already queued, so wait a little.
    backoff.expires_after(delay);
    co_await backoff.async_wait(use_awaitable);
    delay = std::min(delay * 2, std::chrono::milliseconds(50));
  }
}

awaitable<void> pipe(std::shared_ptr<Conn> c, tcp::socket& from, tcp::socket& to, uint64_t* counter) {
  std::vector<char> buf(16384);
  boost::system::error_code ec;
  while (true) {
    size_t n = co_await from.async_read_some(asio::buffer(buf), asio::redirect_error(use_awaitable, ec));
    if (ec) break;
    c->touch();
    co_await asio::async_write(to, asio::buffer(buf.data(), n), asio::redirect_error(use_awaitable, ec));
    if (ec) break;
    *counter += n;
  }
  // Half-close towards the other side; the other direction ends on its own EOF or the idle watchdog.
  to.shutdown(tcp::socket::shutdown_send, ec);
}

awaitable<void> splice(std::shared_ptr<Conn> c) {
  auto ex = co_await asio::this_coro::executor;
  asio::co_spawn(ex, pipe(c, c->upstream, c->client, &c->rec.bytes_down), asio::detached);  // c: an lvalue
  co_await pipe(c, c->client, c->upstream, &c->rec.bytes_up);
}

awaitable<void> intercept(std::shared_ptr<Conn> c, std::string name, uint16_t port) {
  // Upstream first: if its certificate does not verify, the sandbox never gets a forged one for it.
  SSL_CTX_up_ref(c->g.upstream_ctx.get());
  asio::ssl::context upstream_ctx(c->g.upstream_ctx.get());
  asio::ssl::stream<tcp::socket&> up(c->upstream, upstream_ctx);
  SSL_set_tlsext_host_name(up.native_handle(), name.c_str());
  SSL_set1_host(up.native_handle(), name.c_str());
  boost::system::error_code ec;
  co_await up.async_handshake(asio::ssl::stream_base::client, asio::redirect_error(use_awaitable, ec));
  if (ec) {
    c->rec.verdict = "error";
    c->rec.reason = fmt::format("upstream TLS to {} failed verification or handshake: {}", name, ec.message());
    co_return;
  }
  auto leaf = c->sb->ca ? c->sb->ca->serverContext(name)
                        : Result<std::shared_ptr<SSL_CTX>>(makeError(ErrorKind::kInternal, "sandbox has no CA"));
  if (!leaf) {
    c->rec.verdict = "error";
    c->rec.reason = leaf.error().message;
    co_return;
  }
  SSL_CTX_up_ref(leaf->get());
  asio::ssl::context client_ctx(leaf->get());
  asio::ssl::stream<tcp::socket&> down(c->client, client_ctx);
  co_await down.async_handshake(asio::ssl::stream_base::server, asio::redirect_error(use_awaitable, ec));
  if (ec) {
    c->rec.verdict = "error";
    c->rec.reason = fmt::format("sandbox TLS handshake: {}", ec.message());
    co_return;
  }
  c->timeout = c->g.opts.idle_timeout;  // relaying already: the handshakes ran under handshake_timeout
  std::string nothing_read;
  RelayMode mode{name, port, true, false, ""};
  co_await relayHttp(*c, down, up, nothing_read, mode);
  co_await down.async_shutdown(asio::redirect_error(use_awaitable, ec));
}

void allowRecord(Conn& c, const Decision& d, const IpAddress& ip, uint16_t port) {
  c.rec.verdict = "allow";
  c.rec.rule = d.rule;
  c.rec.reason = d.reason;
  c.rec.used = toEndpoint(ip, port).address().to_string() + ":" + std::to_string(port);
}

void denyRecord(Conn& c, const Decision& d) {
  c.rec.verdict = "deny";
  c.rec.rule = d.rule;
  c.rec.reason = d.reason;
}

// Denies a connection whose first message peekFirstBytes refused; a malformed HTTP request is answered 400.
awaitable<void> refuseFirstMessage(Conn& c, const Peeked& p) {
  if (!p.bad_http) {
    denyRecord(c, Decision{Verdict::kDeny, "unrecognised-protocol", p.error});
    co_return;
  }
  denyRecord(c, Decision{Verdict::kDeny, "http-strict", p.error});
  const std::string msg = refusal(400, p.error);
  co_await writeAll(c.client, msg, c);
}

// After the decision: connect to the vetted address, then splice, relay HTTP, or intercept.
awaitable<void> connectAndServe(std::shared_ptr<Conn> c, const Decision& d, IpAddress ip, uint16_t port, bool tls,
                                std::string name, bool plain_http, std::string already_read, RelayMode mode,
                                std::string connect_reply) {
  boost::system::error_code ec;
  co_await c->upstream.async_connect(toEndpoint(ip, port), asio::redirect_error(use_awaitable, ec));
  if (ec) {
    c->rec.verdict = "error";
    c->rec.rule = d.rule;
    c->rec.reason = fmt::format("connect {}: {}", ip.str(), ec.message());
    if (!connect_reply.empty() || plain_http) {
      const std::string msg = refusal(502, c->rec.reason);
      co_await writeAll(c->client, msg, *c);
    }
    co_return;
  }
  c->upstream.set_option(tcp::no_delay(true), ec);
  allowRecord(*c, d, ip, port);
  if (!connect_reply.empty()) co_await writeAll(c->client, connect_reply, *c);
  c->startRelaying();
  if (tls && !name.empty() && c->sb->intercepts(name)) {
    c->rec.verdict = "intercept";
    c->timeout = c->g.opts.handshake_timeout;
    co_await intercept(c, name, port);
    co_return;
  }
  if (plain_http) {
    co_await relayHttp(*c, c->client, c->upstream, std::move(already_read), mode);
    co_return;
  }
  co_await splice(c);
}

}  // namespace

awaitable<void> Gateway::Impl::transparentSession(std::shared_ptr<Conn> c) {
  c->rec.mode = "transparent";
  tcp::endpoint orig;
  if (opts.original_destination) {
    auto r = opts.original_destination(c->client);
    if (!r) {
      c->rec.verdict = "error";
      c->rec.reason = r.error().message;
      co_return;
    }
    orig = *r;
  } else {
    bool v6 = c->client.local_endpoint().address().is_v6();
    auto ss = sys::originalDestination(c->client.native_handle(), v6);
    if (!ss) {
      c->rec.verdict = "error";
      c->rec.reason = ss.error().message;
      co_return;
    }
    auto ip = fromSockaddr(reinterpret_cast<const sockaddr*>(&*ss));
    uint16_t p = v6 ? ntohs(reinterpret_cast<const sockaddr_in6*>(&*ss)->sin6_port)
                    : ntohs(reinterpret_cast<const sockaddr_in*>(&*ss)->sin_port);
    orig = toEndpoint(*ip, p);
  }
  IpAddress dst = fromEndpoint(orig);
  uint16_t port = orig.port();
  c->rec.used = orig.address().to_string() + ":" + std::to_string(port);
  Peeked p = co_await peekFirstBytes(*c, port);
  if (!p.error.empty()) {
    // E10: garbage instead of a ClientHello, or a malformed one; E15: a malformed HTTP request.
    co_await refuseFirstMessage(*c, p);
    co_return;
  }
  c->rec.sni = p.sni;
  std::string host = p.tls ? p.sni : p.host;
  if (host.empty()) {
    // E10: without a name only an explicit CIDR rule can allow the address.
    IpAddress chosen;
    const std::string no_host;
    Decision d = co_await decideTarget(*c, no_host, dst, port, &chosen);
    if (!d.allowed()) {
      denyRecord(*c, d);
      if (p.http) {
        const std::string msg = refusal(403, d.reason);
        co_await writeAll(c->client, msg, *c);
      }
      co_return;
    }
    std::string none;
    RelayMode mode{"", port, false, false, ""};
    co_await connectAndServe(c, d, dst, port, p.tls, none, p.http, none, mode, none);
    co_return;
  }
  IpAddress chosen;
  Decision d = co_await decideTarget(*c, host, dst, port, &chosen);
  if (!d.allowed()) {
    denyRecord(*c, d);
    if (p.http) {
      const std::string msg = refusal(403, d.reason);
      co_await writeAll(c->client, msg, *c);
    }
    co_return;
  }
  std::string name = c->rec.name;  // normalised by decideTarget; empty for an address literal
  std::string none;
  RelayMode mode{name, port, false, false, ""};
  co_await connectAndServe(c, d, dst, port, p.tls, name, p.http, none, mode, none);
}

awaitable<void> Gateway::Impl::proxySession(std::shared_ptr<Conn> c) {
  c->rec.mode = "http-proxy";
  std::string buf;
  auto len = co_await readHead(c->client, buf, *c);
  if (!len || *len == 0) {
    if (!len) {
      denyRecord(*c, Decision{Verdict::kDeny, "http-strict", len.error().message});
      {
        const std::string msg = refusal(400, len.error().message);
        co_await writeAll(c->client, msg, *c);
      }
    }
    co_return;
  }
  auto head = http::parseRequestHead(std::string_view(buf).substr(0, *len));
  if (!head) {
    denyRecord(*c, Decision{Verdict::kDeny, "http-strict", head.error().message});
    {
      const std::string msg = refusal(400, head.error().message);
      co_await writeAll(c->client, msg, *c);
    }
    co_return;
  }
  if (head->method == "CONNECT") {
    c->rec.mode = "connect";
    auto a = http::parseAuthority(head->target, 0);
    if (!a) {
      denyRecord(*c, Decision{Verdict::kDeny, "malformed-host", a.error().message});
      {
        const std::string msg = refusal(400, a.error().message);
        co_await writeAll(c->client, msg, *c);
      }
      co_return;
    }
    if (buf.size() != *len) {
      denyRecord(*c, Decision{Verdict::kDeny, "http-strict", "bytes after CONNECT before the tunnel was granted"});
      {
        const std::string msg = refusal(400, "bytes after CONNECT");
        co_await writeAll(c->client, msg, *c);
      }
      co_return;
    }
    std::string host = a->bracketed ? "[" + a->host + "]" : a->host;
    IpAddress chosen;
    Decision d = co_await decideTarget(*c, host, std::nullopt, a->port, &chosen);
    if (!d.allowed()) {
      denyRecord(*c, d);
      {
        const std::string msg = refusal(403, d.reason);
        co_await writeAll(c->client, msg, *c);
      }
      co_return;
    }
    std::string name = c->rec.name;
    boost::system::error_code ec;
    co_await c->upstream.async_connect(toEndpoint(chosen, a->port), asio::redirect_error(use_awaitable, ec));
    if (ec) {
      c->rec.verdict = "error";
      c->rec.reason = fmt::format("connect {}: {}", chosen.str(), ec.message());
      {
        const std::string msg = refusal(502, c->rec.reason);
        co_await writeAll(c->client, msg, *c);
      }
      co_return;
    }
    c->upstream.set_option(tcp::no_delay(true), ec);
    allowRecord(*c, d, chosen, a->port);
    co_await writeAll(c->client, "HTTP/1.1 200 Connection established\r\n\r\n", *c);
    // E9: what travels through the tunnel must be for the host the tunnel was granted to.
    Peeked p = co_await peekFirstBytes(*c, a->port);
    if (!p.error.empty()) {
      co_await refuseFirstMessage(*c, p);
      co_return;
    }
    c->rec.sni = p.sni;
    if (p.tls) {
      auto sni = p.sni.empty() ? Result<std::string>("") : normalizeName(p.sni);
      bool matches = sni && (name.empty() ? sni->empty() : *sni == name);
      if (!matches) {
        denyRecord(*c, Decision{Verdict::kDeny, "sni-mismatch",
                                fmt::format("SNI '{}' is not the CONNECT host '{}'", p.sni, host)});
        co_return;
      }
      c->startRelaying();
      if (!name.empty() && c->sb->intercepts(name)) {
        c->rec.verdict = "intercept";
        c->timeout = opts.handshake_timeout;
        co_await intercept(c, name, a->port);
        co_return;
      }
      co_await splice(c);
      co_return;
    }
    c->startRelaying();
    std::string nothing_read;
    RelayMode mode{name, a->port, false, false, name.empty() ? host : ""};
    co_await relayHttp(*c, c->client, c->upstream, nothing_read, mode);
    co_return;
  }
  // Absolute-form request for plain HTTP.
  auto t = http::parseAbsoluteTarget(head->target);
  if (!t) {
    denyRecord(*c, Decision{Verdict::kDeny, "url", t.error().message});
    {
      const std::string msg = refusal(400, t.error().message);
      co_await writeAll(c->client, msg, *c);
    }
    co_return;
  }
  std::string host = t->authority.bracketed ? "[" + t->authority.host + "]" : t->authority.host;
  IpAddress chosen;
  Decision d = co_await decideTarget(*c, host, std::nullopt, t->authority.port, &chosen);
  if (!d.allowed()) {
    denyRecord(*c, d);
    {
      const std::string msg = refusal(403, d.reason);
      co_await writeAll(c->client, msg, *c);
    }
    co_return;
  }
  std::string name = c->rec.name;
  RelayMode mode{name, t->authority.port, false, true, name.empty() ? t->authority.host : ""};
  std::string no_reply;
  co_await connectAndServe(c, d, chosen, t->authority.port, false, name, true, buf, mode, no_reply);
}

Gateway::Gateway(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Gateway::~Gateway() { stop(); }

void Gateway::stop() {
  impl_->stopped = true;
  boost::system::error_code ec;
  if (impl_->transparent) impl_->transparent->close(ec);
  if (impl_->proxy) impl_->proxy->close(ec);
  if (impl_->dns) impl_->dns->close(ec);
  if (impl_->ticker) impl_->ticker->cancel();
}

uint16_t Gateway::transparentPort() const {
  return impl_->transparent ? impl_->transparent->local_endpoint().port() : 0;
}
uint16_t Gateway::proxyPort() const { return impl_->proxy ? impl_->proxy->local_endpoint().port() : 0; }
uint16_t Gateway::dnsPort() const { return impl_->dns ? impl_->dns->local_endpoint().port() : 0; }
size_t Gateway::activeConnections() const { return impl_->active; }

void Gateway::flushAudit() { impl_->flushRateDrops(); }

nlohmann::json Gateway::stats() const {
  const GatewayOptions& o = impl_->opts;
  return {{"wrong_link", impl_->wrong_link},
          {"connections",
           {{"active", impl_->active},
            {"by_sandbox", impl_->active_per_sandbox},
            {"max_connections", o.connections.max_total},
            {"max_connections_per_sandbox", o.connections.max_per_sandbox},
            {"reserved_connections", o.connections.reserve},
            {"reserved_connections_per_sandbox", o.connections.reserve_per_sandbox}}},
          {"limits",
           {{"connections_per_second", o.connection_rate.per_second},
            {"connection_burst", o.connection_rate.burst},
            {"dns_queries_per_second", o.dns_rate.per_second},
            {"dns_query_burst", o.dns_rate.burst},
            {"head_deadline_ms", o.head_deadline.count()},
            {"handshake_timeout_ms", o.handshake_timeout.count()}}}};
}

Result<std::unique_ptr<Gateway>> Gateway::create(asio::io_context& io, Registry& registry, NameCache& cache,
                                                 Audit& audit, GatewayOptions options) {
  auto impl = std::make_unique<Impl>(io, registry, cache, audit, std::move(options));
  if (impl->opts.upstream_ctx) {
    impl->upstream_ctx = impl->opts.upstream_ctx;
  } else {
    ASSIGN_OR_RETURN(impl->upstream_ctx, tls::makeUpstreamContext(impl->opts.upstream_ca_file));
  }
  auto listen = [&](const std::string& addr) -> Result<std::unique_ptr<tcp::acceptor>> {
    ASSIGN_OR_RETURN(auto ep, parseListenAddress(addr));
    boost::system::error_code ec;
    auto a = std::make_unique<tcp::acceptor>(io);
    a->open(ep.protocol(), ec);
    if (!ec) a->set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec) a->bind(ep, ec);
    if (!ec) a->listen(1024, ec);
    if (ec) return makeError(ErrorKind::kUnavailable, "listen on {}: {}", addr, ec.message());
    // Accepted connections then say which interface they arrived on (the sandbox's link, V8).
    TRY(sys::enableArrivalInfo(a->native_handle()));
    return a;
  };
  if (!impl->opts.transparent_listen.empty()) {
    ASSIGN_OR_RETURN(impl->transparent, listen(impl->opts.transparent_listen));
  }
  if (!impl->opts.proxy_listen.empty()) {
    ASSIGN_OR_RETURN(impl->proxy, listen(impl->opts.proxy_listen));
  }
  if (!impl->opts.dns_listen.empty()) {
    ASSIGN_OR_RETURN(auto ep, parseListenAddress(impl->opts.dns_listen));
    asio::ip::udp::endpoint uep(ep.address(), ep.port());
    boost::system::error_code ec;
    impl->dns = std::make_unique<asio::ip::udp::socket>(io);
    impl->dns->open(uep.protocol(), ec);
    if (!ec) impl->dns->bind(uep, ec);
    if (!ec) impl->dns->non_blocking(true, ec);
    if (ec) return makeError(ErrorKind::kUnavailable, "listen on udp {}: {}", impl->opts.dns_listen, ec.message());
    TRY(sys::enableArrivalInfo(impl->dns->native_handle()));
  }
  // The gateway's own ports are lateral targets for every sandbox (E12).
  for (auto* a : {impl->transparent.get(), impl->proxy.get()})
    if (a) {
      auto ep = a->local_endpoint();
      impl->opts.facts.gateway_listeners.push_back({fromEndpoint(ep), ep.port()});
    }
  Impl* p = impl.get();
  if (p->transparent) asio::co_spawn(io, p->acceptLoop(*p->transparent, true), asio::detached);
  if (p->proxy) asio::co_spawn(io, p->acceptLoop(*p->proxy, false), asio::detached);
  if (p->dns) asio::co_spawn(io, p->dnsLoop(), asio::detached);
  p->ticker = std::make_unique<asio::steady_timer>(io);
  asio::co_spawn(io, p->tickLoop(), asio::detached);
  return std::unique_ptr<Gateway>(new Gateway(std::move(impl)));
}

}  // namespace space::egress
