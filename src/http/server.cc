// The Beast-based HTTP/1.1 server. Synchronous I/O on one thread per connection: simple to reason about,
// and the number of threads is capped by the connection limits. The accept loop decides admission
// (http/connection_limits.h), a watchdog enforces deadlines, each connection's thread serves its
// requests (the exchange itself is in server_exchange.cc).
#include "http/server.h"

#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <condition_variable>
#include <filesystem>
#include <limits>
#include <mutex>
#include <set>
#include <system_error>
#include <thread>

#include "common/unique_fd.h"
#include "http/beast_detail.h"
#include "http/server_conn.h"
#include "http/server_exchange.h"
#include "http/url.h"

namespace space::http {

using namespace detail;
namespace {

// How often the watchdog looks at deadlines; a deadline is late by at most this much.
constexpr std::chrono::milliseconds kWatchdogTick{100};
// Accepting again at once after EMFILE would spin: the pending connection stays queued.
constexpr std::chrono::milliseconds kAcceptBackoff{100};
// Descriptors the daemon needs besides its connections (sandboxes, agents, the store, cgroups).
constexpr rlim_t kDaemonDescriptors = 4096;
constexpr uint64_t kDrainableBody = 64 * 1024;

std::string peerName(asio::local::stream_protocol::socket&) { return "unix"; }
std::string peerName(asio::ip::tcp::socket& s) {
  beast::error_code ec;
  auto ep = s.remote_endpoint(ec);
  return ec ? std::string("tcp") : fmt::format("{}:{}", ep.address().to_string(), ep.port());
}

// The per-source share is counted by address: an IPv4 client of a dual-stack listener counts as its
// IPv4 address, whichever form the kernel reports.
std::string sourceAddress(asio::local::stream_protocol::socket&) { return "unix"; }
std::string sourceAddress(asio::ip::tcp::socket& s) {
  beast::error_code ec;
  auto ep = s.remote_endpoint(ec);
  if (ec) return "unknown";
  auto addr = ep.address();
  if (addr.is_v6() && addr.to_v6().is_v4_mapped()) {
    return asio::ip::make_address_v4(asio::ip::v4_mapped, addr.to_v6()).to_string();
  }
  return addr.to_string();
}

bool outOfResources(const beast::error_code& ec) {
  return ec == asio::error::no_descriptors || ec == asio::error::no_buffer_space || ec == asio::error::no_memory ||
         (ec.category() == boost::system::system_category() && ec.value() == ENFILE);
}

// Every connection holds a descriptor, a PTY or exec stream a second one towards its agent, and the
// daemon needs its own. Under systemd the soft limit starts at 1024, which the slots alone could exhaust:
// raise it as far as needed, never above the hard limit. Best effort: if it stays low, accept backs off on
// EMFILE instead of spinning. Jail sandboxes set their own limit (runtime nofile) and do not inherit this.
void raiseDescriptorLimit(size_t connections) {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0) return;
  rlim_t want = static_cast<rlim_t>(connections) * 2 + kDaemonDescriptors;
  if (lim.rlim_cur >= want) return;
  lim.rlim_cur = lim.rlim_max == RLIM_INFINITY ? want : std::min(want, lim.rlim_max);
  (void)::setrlimit(RLIMIT_NOFILE, &lim);
}

}  // namespace

struct Server::Impl {
  using generic_proto = asio::generic::stream_protocol;
  Handler handler;
  ServerOptions opts;
  RejectFn on_reject;
  asio::io_context accept_ioc;
  std::unique_ptr<asio::local::stream_protocol::acceptor> unix_acceptor;
  std::unique_ptr<asio::ip::tcp::acceptor> tcp_acceptor;
  std::string unix_path;

  mutable std::mutex mu;
  std::condition_variable cv;
  std::set<Conn*> conns;
  ConnectionLimits limits{ConnectionLimitOptions{}};
  size_t threads = 0;  // connection threads still running, evicted ones included
  std::atomic<bool> stopping{false};
  bool drained = false;  // run() gave up waiting for connections; guarded by mu

  void reject(const std::string& reason) {
    if (on_reject) on_reject(reason);
  }

  template <class Acceptor>
  void acceptLoop(Acceptor& acceptor, Listener listener) {
    acceptor.async_accept(
        [this, &acceptor, listener](beast::error_code ec, typename Acceptor::protocol_type::socket s) {
          if (ec == asio::error::operation_aborted || stopping) return;
          if (!ec) {
            onAccepted(std::move(s), listener);
          } else if (outOfResources(ec)) {
            reject("accept_failed");
            auto timer = std::make_shared<asio::steady_timer>(accept_ioc, kAcceptBackoff);
            timer->async_wait([this, &acceptor, listener, timer](beast::error_code) {
              if (!stopping) acceptLoop(acceptor, listener);
            });
            return;
          }
          acceptLoop(acceptor, listener);
        });
  }

  // Under mu. Takes a slot for the newcomer, displacing a stalled connection where the limits allow.
  Verdict admitLocked(Slot& slot) {
    for (int attempt = 0; attempt < 2; ++attempt) {
      Verdict v = limits.check(slot);
      if (v == Verdict::kAdmit) {
        limits.take(slot);
        return v;
      }
      if (v != Verdict::kEvictAnyStalled && v != Verdict::kEvictUnauthenticated) return v;
      Conn* victim = longestStalledLocked(v == Verdict::kEvictUnauthenticated);
      if (!victim) return Verdict::kRefuseFull;
      evictLocked(*victim);
    }
    return Verdict::kRefuseFull;
  }

  // The connection that has waited longest on its peer (a head or body that is not arriving).
  Conn* longestStalledLocked(bool unauthenticated_tcp_only) {
    Conn* best = nullptr;
    int64_t best_since = std::numeric_limits<int64_t>::max();
    for (Conn* c : conns) {
      if (!c->slot.held) continue;  // already leaving
      if (unauthenticated_tcp_only && (c->slot.listener != Listener::kTcp || c->slot.authenticated)) continue;
      int64_t since = c->waiting_since_ms;
      if (since != 0 && since < best_since) {
        best = c;
        best_since = since;
      }
    }
    return best;
  }

  // The victim's slot is free at once; its thread sees the cut read side, answers 408 if a request had
  // begun, and ends. shutdown(2) rather than close(2): the fd stays owned by its thread.
  void evictLocked(Conn& victim) {
    Cut none = Cut::kNone;
    victim.cut.compare_exchange_strong(none, Cut::kEvicted);
    limits.release(victim.slot);
    ::shutdown(victim.fd, SHUT_RD);
  }

  template <class Sock>
  void refuse(Sock& s, Verdict v) {
    std::string body =
        errorBody("unavailable", v == Verdict::kRefuseSource ? "too many connections from this address; retry later"
                                                             : "too many connections; retry later");
    std::string busy = fmt::format(
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
        "Connection: close\r\nContent-Length: {}\r\n\r\n{}",
        body.size(), body);
    // Non-blocking so a peer that does not read cannot stall the accept loop.
    beast::error_code ec;
    s.non_blocking(true, ec);
    asio::write(s, asio::buffer(busy), ec);
    reject(refusalReason(v));
  }

  template <class Sock>
  void onAccepted(Sock s, Listener listener) {
    beast::error_code ec;
    auto conn = std::make_unique<Conn>();
    conn->slot.listener = listener;
    conn->slot.source = sourceAddress(s);
    std::string peer = peerName(s);
    generic_proto proto(s.local_endpoint(ec).protocol());
    std::lock_guard lock(mu);
    if (Verdict v = admitLocked(conn->slot); v != Verdict::kAdmit) {
      refuse(s, v);
      return;
    }
    conn->fd = s.release(ec);
    if (ec) {
      limits.release(conn->slot);
      return;
    }
    // It waits for its head from now on, so it can be displaced like any stalled connection.
    conn->waiting_since_ms = steadyNowMs();
    Conn* raw = conn.get();
    conns.insert(raw);
    ++threads;
    try {
      // The thread owns the connection; conn gives it up only once the thread exists.
      std::thread t([this, raw, proto, peer] { serve(std::unique_ptr<Conn>(raw), proto, peer); });
      conn.release();
      t.detach();
    } catch (const std::system_error&) {
      // Out of threads: the slot and the descriptor go back, the peer sees the connection close.
      conns.erase(raw);
      --threads;
      limits.release(raw->slot);
      UniqueFd closing(raw->fd);
      reject("thread_limit");
    }
  }

  void serve(std::unique_ptr<Conn> conn, generic_proto proto, std::string peer);
  void serveRequests(Socket& sock, const std::shared_ptr<asio::io_context>& ioc, Conn& conn, const std::string& peer,
                     bool& upgraded);
  // The request head did not come: answer what can be answered, count it.
  void answerHeadFailure(Socket& sock, Conn& conn, const beast::error_code& ec, size_t buffered);
  void watchdog();
};

void Server::Impl::serve(std::unique_ptr<Conn> conn, generic_proto proto, std::string peer) {
  auto ioc = std::make_shared<asio::io_context>();
  Socket sock(*ioc);
  beast::error_code ec;
  sock.assign(proto, conn->fd, ec);
  if (ec) {
    UniqueFd unowned(conn->fd);  // the socket did not take it
  }
  bool upgraded = false;
  if (!ec) serveRequests(sock, ioc, *conn, peer, upgraded);
  {
    std::lock_guard lock(mu);
    conns.erase(conn.get());
  }
  if (!upgraded) {
    sock.shutdown(asio::socket_base::shutdown_both, ec);
    sock.close(ec);
  }
  std::lock_guard lock(mu);
  limits.release(conn->slot);
  --threads;
  cv.notify_all();
}

void Server::Impl::answerHeadFailure(Socket& sock, Conn& conn, const beast::error_code& ec, size_t buffered) {
  if (Cut cut = conn.cut; cut != Cut::kNone) {
    // Nothing arrived: an idle keep-alive connection or a silent peer; no request to answer.
    if (buffered == 0) {
      reject(cut == Cut::kEvicted ? "evicted" : "idle_timeout");
      return;
    }
    reject(cut == Cut::kEvicted ? "evicted" : "request_timeout");
    (void)sendEarlyAnswer(
        sock, conn, opts, 408,
        errorBody("request_timeout",
                  cut == Cut::kEvicted
                      ? "the request head stopped arriving while the server was full; retry"
                      : fmt::format("the request head did not arrive within {}", formatSeconds(opts.head_timeout))));
    return;
  }
  if (ec == bhttp::error::end_of_stream || ec == asio::error::eof || ec == asio::error::connection_reset) return;
  if (buffered == 0) {
    reject("timeout_or_disconnect");
    return;
  }
  bool limit = ec == bhttp::error::header_limit || ec == bhttp::error::buffer_overflow;
  reject(limit ? "header_too_large" : "malformed_http");
  (void)sendEarlyAnswer(sock, conn, opts, limit ? 431 : 400,
                        limit ? errorBody("header_too_large", "request head exceeds 16 KiB")
                              : errorBody("invalid_argument", "malformed HTTP request"));
}

void Server::Impl::serveRequests(Socket& sock, const std::shared_ptr<asio::io_context>& ioc, Conn& conn,
                                 const std::string& peer, bool& upgraded) {
  // The listener never changes after accept; the rest of the slot is guarded by mu.
  const bool trusted = conn.slot.listener == Listener::kUnix;
  bool counted_authenticated = trusted;
  beast::flat_buffer buf;
  beast::error_code ec;
  while (!stopping) {
    RequestParser parser;
    parser.header_limit(static_cast<uint32_t>(opts.header_limit));
    // JSON routes limit themselves; uploads are unlimited by design. Not boost::none: Beast 1.74 compares
    // an empty optional limit as "exceeded" for bodies with a Content-Length.
    parser.body_limit(std::numeric_limits<std::uint64_t>::max());
    conn.awaitPeer(opts.head_timeout);
    bhttp::read_header(sock, buf, parser, ec);
    conn.disarm();
    if (ec) {
      answerHeadFailure(sock, conn, ec, buf.size());
      return;
    }
    auto& head = parser.get();
    Request req;
    req.method = std::string(head.method_string());
    req.target = std::string(head.target());
    req.trusted = trusted;
    req.peer = peer;
    for (const auto& field : head) {
      std::string name(field.name_string());
      std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
      req.headers[name] = std::string(field.value());
    }
    // Once the handler accepted the request's key, the connection leaves the unauthenticated pool.
    auto on_progress = [&] {
      if (counted_authenticated || !req.authenticated) return;
      counted_authenticated = true;
      std::lock_guard lock(mu);
      limits.authenticate(conn.slot);
    };
    ResponseWriterImpl resp(sock, ioc, parser, conn, opts, trusted, on_progress);
    BodyReaderImpl body(sock, buf, parser, conn, opts, resp, on_reject, on_progress);
    auto target = parseTarget(req.target);
    if (!target) {
      reject("bad_target");
      (void)resp.send(400, "application/json", errorBody("invalid_argument", "malformed request target"));
    } else {
      req.path = std::move(target->path);
      req.query = std::move(target->query);
      if (auto expect = req.header("expect"); expect && beast::iequals(*expect, "100-continue")) {
        // curl waits for this before sending a large upload.
        bhttp::response<bhttp::empty_body> cont{bhttp::status::continue_, 11};
        conn.armWrite(opts.write_timeout);
        bhttp::write(sock, cont, ec);
        conn.disarm();
        if (ec) return;
      }
      handler(req, body, resp);
    }
    if (resp.upgraded()) {
      upgraded = true;
      return;
    }
    // The server cut the connection (a deadline, an eviction): whatever was answered, it ends here.
    if (conn.cut != Cut::kNone) return;
    if (!resp.started()) {
      (void)resp.send(500, "application/json", errorBody("internal", "the handler sent no response"));
    }
    if (resp.broken() || !resp.finished()) return;
    if (resp.closing()) {
      if (!body.done()) lingeringClose(sock, conn);
      return;
    }
    // A small body the handler had no use for (`{}` on POST .../pause) is read and dropped, so the
    // connection stays usable. A large body left unread leaves the byte stream out of step: close.
    if (!body.done() && body.contentLength() && *body.contentLength() <= kDrainableBody) {
      char sink[4096];
      for (;;) {
        auto n = body.read(sink, sizeof sink);
        if (!n || *n == 0) break;
      }
      if (conn.cut != Cut::kNone) return;
    }
    if (!body.done()) {
      lingeringClose(sock, conn);
      return;
    }
  }
}

void Server::Impl::watchdog() {
  std::unique_lock lock(mu);
  while (!drained) {
    cv.wait_for(lock, kWatchdogTick);
    int64_t now = steadyNowMs();
    for (Conn* c : conns) {
      int64_t d = c->deadline;
      if (d == 0 || now <= (d >> 1)) continue;
      // shutdown(2) rather than close(2): the fd stays owned by its thread, so it cannot be reused under it.
      if (d & 1) {
        // A read deadline: cut the read side only, so that the thread can still answer 408.
        Cut none = Cut::kNone;
        c->cut.compare_exchange_strong(none, Cut::kTimedOut);
        c->deadline.compare_exchange_strong(d, 0);
        ::shutdown(c->fd, SHUT_RD);
      } else {
        ::shutdown(c->fd, SHUT_RDWR);
      }
    }
  }
}

Server::Server(Handler handler, ServerOptions options, RejectFn on_reject) : impl_(std::make_unique<Impl>()) {
  impl_->handler = std::move(handler);
  impl_->opts = std::move(options);
  impl_->limits = ConnectionLimits(impl_->opts.limits);
  impl_->on_reject = std::move(on_reject);
}

Server::~Server() {
  if (!impl_->unix_path.empty()) ::unlink(impl_->unix_path.c_str());
}

Status Server::listenUnix(const std::string& path) {
  namespace fs = std::filesystem;
  using asio::local::stream_protocol;
  std::error_code fec;
  fs::path parent = fs::path(path).parent_path();
  if (!parent.empty()) fs::create_directories(parent, fec);
  if (fec) return makeError(ErrorKind::kInternal, "create directory {}: {}", parent.string(), fec.message());
  if (fs::exists(fs::symlink_status(path, fec))) {
    stream_protocol::socket probe(impl_->accept_ioc);
    beast::error_code ec;
    probe.connect(stream_protocol::endpoint(path), ec);
    if (!ec) return makeError(ErrorKind::kConflict, "another daemon answers on {}; stop it first", path);
    fs::remove(path, fec);
    if (fec) return makeError(ErrorKind::kInternal, "remove stale socket {}: {}", path, fec.message());
  }
  beast::error_code ec;
  auto acc = std::make_unique<stream_protocol::acceptor>(impl_->accept_ioc);
  acc->open(stream_protocol(), ec);
  // The socket must never be reachable with wider permissions, not even between bind and chmod.
  mode_t old = ::umask(0117);
  if (!ec) acc->bind(stream_protocol::endpoint(path), ec);
  ::umask(old);
  if (!ec) acc->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return makeError(ErrorKind::kInternal, "listen on {}: {}", path, ec.message());
  if (::chmod(path.c_str(), 0660) != 0) return sysError(errno, "chmod {}", path);
  impl_->unix_path = path;
  impl_->unix_acceptor = std::move(acc);
  return ok();
}

Status Server::listenTcp(const std::string& host_port) {
  using asio::ip::tcp;
  size_t colon = host_port.rfind(':');
  if (colon == std::string::npos)
    return makeError(ErrorKind::kInvalidArgument, "--listen '{}': expected HOST:PORT", host_port);
  std::string host = host_port.substr(0, colon), port = host_port.substr(colon + 1);
  if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  if (host.empty()) host = "0.0.0.0";
  beast::error_code ec;
  tcp::resolver resolver(impl_->accept_ioc);
  auto results = resolver.resolve(host, port, tcp::resolver::passive, ec);
  if (ec || results.empty())
    return makeError(ErrorKind::kInvalidArgument, "--listen '{}': {}", host_port, ec.message());
  auto ep = results.begin()->endpoint();
  auto acc = std::make_unique<tcp::acceptor>(impl_->accept_ioc);
  acc->open(ep.protocol(), ec);
  if (!ec) acc->set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acc->bind(ep, ec);
  if (!ec) acc->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return makeError(ErrorKind::kUnavailable, "listen on {}: {}", host_port, ec.message());
  impl_->tcp_acceptor = std::move(acc);
  return ok();
}

uint16_t Server::tcpPort() const {
  if (!impl_->tcp_acceptor) return 0;
  beast::error_code ec;
  return impl_->tcp_acceptor->local_endpoint(ec).port();
}

void Server::run(std::chrono::seconds drain_timeout) {
  raiseDescriptorLimit(impl_->opts.limits.max_connections);
  std::thread dog([this] { impl_->watchdog(); });
  if (impl_->unix_acceptor) impl_->acceptLoop(*impl_->unix_acceptor, Listener::kUnix);
  if (impl_->tcp_acceptor) impl_->acceptLoop(*impl_->tcp_acceptor, Listener::kTcp);
  auto guard = asio::make_work_guard(impl_->accept_ioc);
  impl_->accept_ioc.run();
  beast::error_code ec;
  if (impl_->unix_acceptor) impl_->unix_acceptor->close(ec);
  if (impl_->tcp_acceptor) impl_->tcp_acceptor->close(ec);
  {
    std::unique_lock lock(impl_->mu);
    impl_->cv.notify_all();
    if (!impl_->cv.wait_for(lock, drain_timeout, [&] { return impl_->threads == 0; })) {
      // Long streams (logs -f, PTYs) do not end by themselves: cut them, then give their threads a moment.
      for (Conn* c : impl_->conns) ::shutdown(c->fd, SHUT_RDWR);
      impl_->cv.wait_for(lock, std::chrono::seconds(2), [&] { return impl_->threads == 0; });
    }
  }
  {
    std::lock_guard lock(impl_->mu);
    impl_->drained = true;
    impl_->cv.notify_all();
  }
  dog.join();
}

void Server::stop() {
  impl_->stopping = true;
  impl_->accept_ioc.stop();
  impl_->cv.notify_all();
}

size_t Server::activeConnections() const {
  std::lock_guard lock(impl_->mu);
  return impl_->limits.active();
}

}  // namespace space::http
