// The HTTP/1.1 relay used wherever the gateway sees plaintext requests: plain HTTP (transparent or explicit)
// and intercepted TLS. Every request head is parsed strictly (E15), its Host is held to the connection's
// name (E9), placeholders are refused outside their declared header and host (E13), secrets are injected
// only when intercepting, and real values are redacted from responses, across read boundaries (E17).
// Redirects are relayed, never followed (E14): each request is judged on its own Host.
#pragma once

#include "egress/http_parse.h"
#include "egress/names.h"
#include "egress/proxy_impl.h"
#include "egress/redaction.h"
#include "egress/secrets.h"

namespace space::egress {

struct RelayMode {
  std::string name;  // the connection's normalised name; "" for an address-only connection
  uint16_t port = 0;
  bool inject = false;    // intercepted TLS to a bound host
  bool absolute = false;  // explicit proxy: requests carry absolute-form targets for name:port
  std::string literal;    // the address as written when name is empty (explicit proxy to an IP)
};

struct PlaceholderInBody {
  size_t secret;
};

// How much of a request body the relay holds back (with the head) until it has been scanned.
constexpr uint64_t kHeldBody = 64 * 1024;

template <class S>
awaitable<size_t> readMore(S& s, std::string& buf, Conn& c) {
  char tmp[16384];
  size_t n = co_await s.async_read_some(asio::buffer(tmp), use_awaitable);
  buf.append(tmp, n);
  c.touch();
  co_return n;
}

template <class S>
awaitable<void> writeAll(S& s, std::string_view data, Conn& c) {
  if (data.empty()) co_return;
  co_await asio::async_write(s, asio::buffer(data.data(), data.size()), use_awaitable);
  c.touch();
}

// Reads a head into buf (which may already hold bytes). Returns its length, 0 on a clean EOF before any byte.
// sandbox_request: a request head on a relayed connection, which must be complete within head_deadline of
// its first byte (E20); the wait for that first byte is idle time.
template <class S>
awaitable<Result<size_t>> readHead(S& s, std::string& buf, Conn& c, bool sandbox_request = false) {
  while (true) {
    if (sandbox_request && !buf.empty()) c.armHeadDeadline();
    auto end = http::findHeadEnd(buf);
    if (!end) co_return tl::unexpected(end.error());
    if (*end != std::string_view::npos) {
      if (sandbox_request) c.disarmHeadDeadline();
      co_return *end;
    }
    boost::system::error_code ec;
    char tmp[16384];
    size_t n = co_await s.async_read_some(asio::buffer(tmp), asio::redirect_error(use_awaitable, ec));
    if (ec) {
      if (buf.empty()) co_return size_t{0};
      co_return makeError(ErrorKind::kInvalidArgument, "connection ended inside a head");
    }
    buf.append(tmp, n);
    c.touch();
  }
}

// Streams one body framed as f from src (buf holds bytes already read) to sink(raw, decoded).
template <class S, class Sink>
awaitable<void> pumpBody(S& src, std::string& buf, http::Framing f, Conn& c, Sink&& sink) {
  using http::BodyKind;
  if (f.kind == BodyKind::kNone) co_return;
  if (f.kind == BodyKind::kLength) {
    uint64_t remaining = f.length;
    while (remaining) {
      if (buf.empty()) co_await readMore(src, buf, c);
      size_t take = std::min<uint64_t>(remaining, buf.size());
      std::string chunk = buf.substr(0, take);
      buf.erase(0, take);
      remaining -= take;
      co_await sink(std::string_view(chunk), std::string_view(chunk));
    }
    co_return;
  }
  if (f.kind == BodyKind::kChunked) {
    http::ChunkedDecoder dec;
    while (!dec.done()) {
      if (buf.empty()) co_await readMore(src, buf, c);
      std::string decoded;
      auto used = dec.feed(buf, &decoded);
      if (!used) throw std::runtime_error(used.error().message);
      std::string raw = buf.substr(0, *used);
      buf.erase(0, *used);
      co_await sink(std::string_view(raw), std::string_view(decoded));
    }
    co_return;
  }
  // Until close: everything to EOF.
  while (true) {
    if (!buf.empty()) {
      std::string chunk;
      chunk.swap(buf);
      co_await sink(std::string_view(chunk), std::string_view(chunk));
    }
    boost::system::error_code ec;
    char tmp[16384];
    size_t n = co_await src.async_read_some(asio::buffer(tmp), asio::redirect_error(use_awaitable, ec));
    if (ec) co_return;
    buf.append(tmp, n);
    c.touch();
  }
}

inline void auditRequest(Conn& c, const std::string& verdict, const std::string& rule, const std::string& reason,
                         const http::RequestHead* head, const std::vector<std::string>& secrets, uint64_t up,
                         uint64_t down, Clock::time_point t0) {
  AuditRecord r = c.rec;
  r.kind = "request";
  r.verdict = verdict;
  r.rule = rule;
  r.reason = reason;
  if (head) {
    r.method = head->method;
    std::string_view path = head->target;
    r.path = std::string(path.substr(0, path.find('?')));
  }
  r.secrets = secrets;
  r.bytes_up = up;
  r.bytes_down = down;
  r.duration_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  c.g.audit.write(r);
}

// Relays requests from client to upstream until either side closes. cbuf: bytes already read from client.
template <class C, class U>
awaitable<void> relayHttp(Conn& c, C& client, U& upstream, std::string cbuf, RelayMode mode) {
  const auto& secrets = c.sb->secrets;
  std::string ubuf;
  while (true) {
    auto t0 = Clock::now();
    auto head_len = co_await readHead(client, cbuf, c, true);
    if (head_len && *head_len == 0) co_return;
    // Arguments are views: GCC 12 destroys class-type temporaries in a co_await expression twice, so no
    // call below passes a std::string temporary to a coroutine.
    auto fail = [&](int status, std::string_view rule, std::string_view reason,
                    const http::RequestHead* h) -> awaitable<void> {
      auditRequest(c, "deny", std::string(rule), std::string(reason), h, {}, 0, 0, t0);
      const std::string msg = refusal(status, reason);
      co_await writeAll(client, msg, c);
    };
    if (!head_len && !c.expired_rule.empty()) {  // the watchdog cut a trickled head (E20)
      auditRequest(c, "deny", c.expired_rule, c.expired_reason, nullptr, {}, 0, 0, t0);
      co_return;
    }
    if (!head_len) {
      co_await fail(400, "http-strict", head_len.error().message, nullptr);
      co_return;
    }
    auto parsed = http::parseRequestHead(std::string_view(cbuf).substr(0, *head_len));
    cbuf.erase(0, *head_len);
    if (!parsed) {
      co_await fail(400, "http-strict", parsed.error().message, nullptr);
      co_return;
    }
    http::RequestHead head = std::move(*parsed);
    if (head.method == "CONNECT" || head.find("Upgrade")) {
      co_await fail(405, "http-strict", "CONNECT and protocol upgrades are not relayed here", &head);
      co_return;
    }
    if (mode.absolute) {
      auto t = http::parseAbsoluteTarget(head.target);
      bool same = false;
      if (t && t->authority.port == mode.port) {
        if (mode.name.empty()) {
          same = t->authority.host == mode.literal;
        } else {
          auto n = normalizeName(t->authority.host);
          same = n && *n == mode.name;
        }
      }
      if (!same) {
        co_await fail(400, "explicit-proxy", "one connection serves one host; open another for a new host", &head);
        co_return;
      }
      head.target = t->origin_form;
    } else if (head.target.empty() || head.target[0] != '/') {
      co_await fail(400, "http-strict", "request target must be origin-form", &head);
      co_return;
    }
    // Host must name the connection's host (E9: SNI == Host under interception).
    if (const http::Header* h = head.find("Host"); h && !mode.name.empty()) {
      auto a = http::parseAuthority(h->value, mode.port);
      auto n = a ? normalizeName(a->host) : Result<std::string>(tl::unexpected(a.error()));
      if (!n || *n != mode.name || a->port != mode.port) {
        const std::string why = fmt::format("Host does not match {}", mode.name);
        co_await fail(403, "host-mismatch", why, &head);
        co_return;
      }
    } else if (!h && head.minor_version == 1) {
      co_await fail(400, "http-strict", "missing Host", &head);
      co_return;
    }
    head.remove("Proxy-Authorization");
    head.remove("Proxy-Connection");
    bool expect_continue = false;
    if (const http::Header* e = head.find("Expect")) {
      expect_continue = true;
      (void)e;
      head.remove("Expect");
    }
    std::vector<std::string> injected;
    if (mode.inject) {
      head.set("Accept-Encoding", "identity");  // the value must be visible to be redacted from responses
      auto inj = applySecrets(head, mode.name, secrets);
      if (!inj) {
        co_await fail(403, "placeholder", inj.error().message, &head);
        co_return;
      }
      injected = inj->injected;
    } else if (auto i = findPlaceholder(head.serialize(), secrets)) {
      const std::string why =
          fmt::format("placeholder of secret {} outside an intercepted request to its host", secrets[*i].name);
      co_await fail(403, "placeholder", why, &head);
      co_return;
    }
    if (expect_continue) co_await writeAll(client, "HTTP/1.1 100 Continue\r\n\r\n", c);
    // The head and the first kHeldBody bytes of the body wait until those bytes are scanned: a request
    // refused for its body (E13) reaches the upstream only if its body is larger than that.
    std::string held = head.serialize();
    bool flushed = false;
    uint64_t up = 0, down = 0;
    PlaceholderScanner scanner(secrets);
    std::optional<size_t> blocked;
    try {
      co_await pumpBody(client, cbuf, head.framing, c,
                        [&](std::string_view raw, std::string_view decoded) -> awaitable<void> {
                          if (auto i = scanner.feed(decoded)) throw PlaceholderInBody{*i};
                          up += raw.size();
                          if (flushed) {
                            co_await writeAll(upstream, raw, c);
                            co_return;
                          }
                          held.append(raw);
                          if (up <= kHeldBody) co_return;
                          flushed = true;
                          co_await writeAll(upstream, held, c);
                          held.clear();
                        });
    } catch (const PlaceholderInBody& p) {
      blocked = p.secret;
    }
    if (!blocked && !flushed) co_await writeAll(upstream, held, c);
    if (blocked) {
      // Nothing reached the upstream unless the body was large; then it saw an incomplete body and is cut
      // off. The sandbox gets the refusal.
      boost::system::error_code ec;
      c.upstream.close(ec);
      const std::string why = fmt::format("placeholder of secret {} in the request body", secrets[*blocked].name);
      co_await fail(403, "placeholder", why, &head);
      co_return;
    }
    // The response: interim 1xx heads first, then the final one.
    http::ResponseHead resp;
    while (true) {
      auto rlen = co_await readHead(upstream, ubuf, c);
      if (!rlen || *rlen == 0) {
        co_await fail(502, "upstream", "upstream closed or sent a malformed response", &head);
        co_return;
      }
      auto r = http::parseResponseHead(std::string_view(ubuf).substr(0, *rlen), head.method);
      ubuf.erase(0, *rlen);
      if (!r) {
        co_await fail(502, "upstream", r.error().message, &head);
        co_return;
      }
      resp = std::move(*r);
      redactResponseHead(resp, secrets);
      if (resp.status / 100 != 1 || resp.status == 101) break;
      const std::string interim = resp.serialize();
      co_await writeAll(client, interim, c);
    }
    if (resp.status == 101) {
      co_await fail(502, "http-strict", "protocol switch refused", &head);
      co_return;
    }
    ValueRedactor redactor(secrets);
    bool has_body = resp.framing.kind != http::BodyKind::kNone;
    bool reframe = has_body && !redactor.empty();
    bool close_after =
        head.minor_version == 0 || resp.minor_version == 0 || resp.framing.kind == http::BodyKind::kUntilClose;
    for (const auto* h : {head.find("Connection"), resp.find("Connection")})
      if (h && h->value.find("close") != std::string::npos) close_after = true;
    bool chunk_out = false;
    if (reframe) {
      // Redaction may change the body's length: the body is re-framed.
      resp.remove("Content-Length");
      resp.remove("Transfer-Encoding");
      if (head.minor_version == 1 && resp.minor_version == 1) {
        resp.set("Transfer-Encoding", "chunked");
        chunk_out = true;
      } else {
        close_after = true;
      }
    }
    if (close_after) resp.set("Connection", "close");
    std::string response_head = resp.serialize();
    http::Framing rest = resp.framing;
    if (!reframe && rest.kind == http::BodyKind::kLength && !ubuf.empty()) {
      // The part of the body already read goes out with the head: one write, one packet for a small answer.
      size_t take = size_t(std::min<uint64_t>(rest.length, ubuf.size()));
      response_head.append(ubuf, 0, take);
      ubuf.erase(0, take);
      rest.length -= take;
      down += take;
    }
    co_await writeAll(client, response_head, c);
    co_await pumpBody(upstream, ubuf, rest, c, [&](std::string_view raw, std::string_view decoded) -> awaitable<void> {
      if (!reframe) {
        down += raw.size();
        co_await writeAll(client, raw, c);
        co_return;
      }
      std::string out = redactor.feed(decoded);
      if (out.empty()) co_return;
      down += out.size();
      if (chunk_out) out = fmt::format("{:x}\r\n{}\r\n", out.size(), out);
      co_await writeAll(client, out, c);
    });
    if (reframe) {
      std::string out = redactor.finish();
      down += out.size();
      if (chunk_out) {
        if (!out.empty()) {
          out = fmt::format("{:x}\r\n{}\r\n", out.size(), out);
          co_await writeAll(client, out, c);
        }
        co_await writeAll(client, "0\r\n\r\n", c);
      } else {
        co_await writeAll(client, out, c);
      }
    }
    c.rec.bytes_up += up;
    c.rec.bytes_down += down;
    auditRequest(c, mode.inject ? "intercept" : "allow", c.rec.rule, "relayed", &head, injected, up, down, t0);
    if (close_after) co_return;
  }
}

}  // namespace space::egress
