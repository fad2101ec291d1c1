// The Beast-based HTTP/1.1 server. Synchronous I/O on one thread per connection: simple to reason about,
// and the number of threads is capped by max_connections.
#include "http/server.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <limits>
#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <set>
#include <thread>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/websocket/rfc6455.hpp>

#include "http/beast_detail.h"
#include "http/url.h"

namespace space::http {

using namespace detail;
using Clock = std::chrono::steady_clock;
namespace {

int64_t nowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now().time_since_epoch()).count();
}

std::string errorBody(std::string_view code, std::string_view message) {
  // Built by hand: these two strings are fixed ASCII, and this keeps JSON headers out of the server.
  return fmt::format(R"({{"error":{{"code":"{}","message":"{}"}}}})", code, message);
}

// Deadline of one connection, enforced by the watchdog with shutdown(2): the blocked read or write in the
// connection's thread then fails and the thread ends. Sync asio ops ignore SO_RCVTIMEO, hence this.
struct Conn {
  int fd = -1;
  std::atomic<int64_t> deadline_ms{0};  // 0 = none
  void arm(std::chrono::seconds d) { deadline_ms = nowMs() + std::chrono::duration_cast<std::chrono::milliseconds>(d).count(); }
  void disarm() { deadline_ms = 0; }
};

std::string peerName(asio::local::stream_protocol::socket&) { return "unix"; }
std::string peerName(asio::ip::tcp::socket& s) {
  beast::error_code ec;
  auto ep = s.remote_endpoint(ec);
  return ec ? std::string("tcp") : fmt::format("{}:{}", ep.address().to_string(), ep.port());
}

// After answering early (413, 404 on an upload), closing with unread request bytes would make TCP send
// a reset that can destroy the answer before the client reads it. Half-close, then discard a bounded
// amount of what the client is still sending.
void lingeringClose(Socket& sock, Conn& conn) {
  beast::error_code ec;
  sock.shutdown(asio::socket_base::shutdown_send, ec);
  char sink[16384];
  size_t total = 0;
  conn.arm(std::chrono::seconds(2));
  while (!ec && total < (8u << 20)) total += sock.read_some(asio::buffer(sink), ec);
  conn.disarm();
}

constexpr size_t kBodyReadBuffer = 256 * 1024;
constexpr uint64_t kDrainableBody = 64 * 1024;

class BodyReaderImpl : public BodyReader {
 public:
  BodyReaderImpl(Socket& sock, beast::flat_buffer& buf, bhttp::request_parser<bhttp::buffer_body>& parser,
                 Conn& conn, std::chrono::seconds timeout)
      : sock_(sock), buf_(buf), parser_(parser), conn_(conn), timeout_(timeout) {}

  Result<size_t> read(char* out, size_t max) override {
    // Beast sizes each socket read by the buffer's free capacity (at least 512 bytes): without room,
    // a large upload arrives in 512-byte reads, one syscall each.
    if (buf_.capacity() < kBodyReadBuffer) buf_.reserve(kBodyReadBuffer);
    while (!parser_.is_done()) {
      auto& body = parser_.get().body();
      body.data = out;
      body.size = max;
      beast::error_code ec;
      conn_.arm(timeout_);
      bhttp::read_some(sock_, buf_, parser_, ec);
      conn_.disarm();
      if (ec == bhttp::error::need_buffer) ec = {};
      if (ec) return makeError(ErrorKind::kUnavailable, "reading request body: {}", ec.message());
      size_t n = max - body.size;
      if (n > 0) return n;
    }
    return size_t{0};
  }
  std::optional<uint64_t> contentLength() const override {
    auto len = parser_.content_length();
    if (len) return *len;
    return std::nullopt;
  }
  bool done() const { return parser_.is_done(); }

 private:
  Socket& sock_;
  beast::flat_buffer& buf_;
  bhttp::request_parser<bhttp::buffer_body>& parser_;
  Conn& conn_;
  std::chrono::seconds timeout_;
};

class ResponseWriterImpl : public ResponseWriter {
 public:
  ResponseWriterImpl(Socket& sock, std::shared_ptr<asio::io_context> ioc,
                     bhttp::request_parser<bhttp::buffer_body>& parser, Conn& conn, const ServerOptions& opts)
      : sock_(sock), ioc_(std::move(ioc)), parser_(parser), conn_(conn), opts_(opts) {}

  Status send(int status, std::string_view content_type, std::string_view body) override {
    if (status_ != 0) return makeError(ErrorKind::kInternal, "response already started");
    bhttp::response<bhttp::string_body> res{static_cast<bhttp::status>(status), 11};
    res.set(bhttp::field::server, opts_.server_name);
    res.set(bhttp::field::content_type, std::string(content_type));
    res.keep_alive(parser_.get().keep_alive());
    res.body() = std::string(body);
    res.prepare_payload();
    status_ = status;
    finished_ = true;
    beast::error_code ec;
    conn_.arm(opts_.io_timeout);
    bhttp::write(sock_, res, ec);
    conn_.disarm();
    if (ec) return fail(ec);
    return ok();
  }

  Status beginStream(int status, std::string_view content_type, std::optional<uint64_t> length) override {
    if (status_ != 0) return makeError(ErrorKind::kInternal, "response already started");
    bhttp::response<bhttp::empty_body> res{static_cast<bhttp::status>(status), 11};
    res.set(bhttp::field::server, opts_.server_name);
    res.set(bhttp::field::content_type, std::string(content_type));
    res.keep_alive(parser_.get().keep_alive());
    if (length) {
      res.content_length(*length);
    } else {
      res.chunked(true);
    }
    chunked_ = !length;
    remaining_ = length.value_or(0);
    status_ = status;
    bhttp::response_serializer<bhttp::empty_body> sr{res};
    beast::error_code ec;
    conn_.arm(opts_.io_timeout);
    bhttp::write_header(sock_, sr, ec);
    conn_.disarm();
    if (ec) return fail(ec);
    return ok();
  }

  Status write(std::string_view data) override {
    if (status_ == 0 || finished_) return makeError(ErrorKind::kInternal, "write outside a streamed response");
    if (data.empty()) return ok();
    beast::error_code ec;
    conn_.arm(opts_.io_timeout);
    if (chunked_) {
      asio::write(sock_, bhttp::make_chunk(asio::buffer(data.data(), data.size())), ec);
    } else {
      if (data.size() > remaining_) {
        conn_.disarm();
        return makeError(ErrorKind::kInternal, "response body longer than its Content-Length");
      }
      remaining_ -= data.size();
      asio::write(sock_, asio::buffer(data.data(), data.size()), ec);
    }
    conn_.disarm();
    if (ec) return fail(ec);
    return ok();
  }

  Status end() override {
    if (status_ == 0 || finished_) return makeError(ErrorKind::kInternal, "end outside a streamed response");
    finished_ = true;
    if (!chunked_) {
      if (remaining_ != 0) {
        broken_ = true;  // the peer would wait for the missing bytes; only closing tells it
        return makeError(ErrorKind::kInternal, "response body shorter than its Content-Length");
      }
      return ok();
    }
    beast::error_code ec;
    conn_.arm(opts_.io_timeout);
    asio::write(sock_, bhttp::make_chunk_last(), ec);
    conn_.disarm();
    if (ec) return fail(ec);
    return ok();
  }

  bool started() const override { return status_ != 0; }
  int status() const override { return status_; }
  bool isWebSocketUpgrade() const override { return beast::websocket::is_upgrade(parser_.get()); }

  Result<std::unique_ptr<WebSocket>> acceptWebSocket() override {
    if (status_ != 0) return makeError(ErrorKind::kInternal, "response already started");
    if (!isWebSocketUpgrade()) return makeError(ErrorKind::kInvalidArgument, "this route needs a WebSocket upgrade");
    status_ = 101;
    finished_ = true;
    upgraded_ = true;
    return detail::acceptWebSocket(ioc_, std::move(sock_), parser_.get());
  }

  bool finished() const { return finished_; }
  bool broken() const { return broken_; }
  bool upgraded() const { return upgraded_; }

 private:
  Status fail(const beast::error_code& ec) {
    broken_ = true;
    return makeError(ErrorKind::kUnavailable, "writing response: {}", ec.message());
  }

  Socket& sock_;
  std::shared_ptr<asio::io_context> ioc_;
  bhttp::request_parser<bhttp::buffer_body>& parser_;
  Conn& conn_;
  const ServerOptions& opts_;
  int status_ = 0;
  bool chunked_ = false, finished_ = false, broken_ = false, upgraded_ = false;
  uint64_t remaining_ = 0;
};

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
  size_t active = 0;
  std::atomic<bool> stopping{false};
  bool drained = false;  // run() gave up waiting for connections; guarded by mu

  void reject(const std::string& reason) {
    if (on_reject) on_reject(reason);
  }

  template <class Acceptor>
  void acceptLoop(Acceptor& acceptor, bool trusted) {
    acceptor.async_accept([this, &acceptor, trusted](beast::error_code ec, typename Acceptor::protocol_type::socket s) {
      if (ec == asio::error::operation_aborted || stopping) return;
      if (!ec) onAccepted(std::move(s), trusted);
      acceptLoop(acceptor, trusted);
    });
  }

  template <class Sock>
  void onAccepted(Sock s, bool trusted) {
    beast::error_code ec;
    std::string peer = peerName(s);
    {
      std::lock_guard lock(mu);
      if (active >= opts.max_connections) {
        std::string body = errorBody("unavailable", "too many connections; retry later");
        std::string busy = fmt::format(
            "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\n"
            "Content-Length: {}\r\n\r\n{}",
            body.size(), body);
        // Non-blocking so a peer that does not read cannot stall the accept loop.
        s.non_blocking(true, ec);
        asio::write(s, asio::buffer(busy), ec);
        reject("connection_limit");
        return;
      }
      ++active;
    }
    generic_proto proto(s.local_endpoint(ec).protocol());
    int fd = s.release(ec);
    if (ec) {
      std::lock_guard lock(mu);
      --active;
      return;
    }
    std::thread([this, fd, proto, trusted, peer] { serve(fd, proto, trusted, peer); }).detach();
  }
  void serve(int fd, generic_proto proto, bool trusted, std::string peer);
  void watchdog();
};

void Server::Impl::serve(int fd, generic_proto proto, bool trusted, std::string peer) {
  auto ioc = std::make_shared<asio::io_context>();
  Socket sock(*ioc);
  beast::error_code ec;
  sock.assign(proto, fd, ec);
  Conn conn;
  conn.fd = fd;
  {
    std::lock_guard lock(mu);
    conns.insert(&conn);
  }
  beast::flat_buffer buf;
  bool upgraded = false;
  while (!stopping && !ec) {
    bhttp::request_parser<bhttp::buffer_body> parser;
    parser.header_limit(static_cast<uint32_t>(opts.header_limit));
    // JSON routes limit themselves; uploads are unlimited by design. Not boost::none: Beast 1.74 compares
    // an empty optional limit as "exceeded" for bodies with a Content-Length.
    parser.body_limit(std::numeric_limits<std::uint64_t>::max());
    conn.arm(opts.header_timeout);
    bhttp::read_header(sock, buf, parser, ec);
    conn.disarm();
    if (ec == bhttp::error::end_of_stream || ec == asio::error::eof || ec == asio::error::connection_reset) break;
    if (ec) {
      bool limit = ec == bhttp::error::header_limit || ec == bhttp::error::buffer_overflow;
      bool timeout = ec == asio::error::broken_pipe || ec == asio::error::shut_down || ec == asio::error::bad_descriptor;
      if (timeout || buf.size() == 0) {
        reject("timeout_or_disconnect");
        break;
      }
      int status = limit ? 431 : 400;
      reject(limit ? "header_too_large" : "malformed_http");
      bhttp::response<bhttp::string_body> res{static_cast<bhttp::status>(status), 11};
      res.set(bhttp::field::content_type, "application/json");
      res.body() = limit ? errorBody("header_too_large", "request head exceeds 16 KiB")
                         : errorBody("invalid_argument", "malformed HTTP request");
      res.keep_alive(false);
      res.prepare_payload();
      conn.arm(opts.io_timeout);
      bhttp::write(sock, res, ec);
      break;
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
    BodyReaderImpl body(sock, buf, parser, conn, opts.io_timeout);
    ResponseWriterImpl resp(sock, ioc, parser, conn, opts);
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
        conn.arm(opts.io_timeout);
        bhttp::write(sock, cont, ec);
        conn.disarm();
        if (ec) break;
      }
      handler(req, body, resp);
    }
    if (resp.upgraded()) {
      upgraded = true;
      break;
    }
    if (!resp.started()) {
      (void)resp.send(500, "application/json", errorBody("internal", "the handler sent no response"));
    }
    // A small body the handler had no use for (`{}` on POST .../pause) is read and dropped, so the
    // connection stays usable. A response cut short, or a large body left unread, leaves the byte
    // stream out of step: close.
    if (!resp.broken() && resp.finished() && !body.done() && body.contentLength() &&
        *body.contentLength() <= kDrainableBody) {
      char sink[4096];
      for (;;) {
        auto n = body.read(sink, sizeof sink);
        if (!n || *n == 0) break;
      }
    }
    if (!resp.broken() && resp.finished() && !body.done()) {
      lingeringClose(sock, conn);
      break;
    }
    if (resp.broken() || !resp.finished() || !head.keep_alive()) break;
  }
  {
    std::lock_guard lock(mu);
    conns.erase(&conn);
  }
  if (!upgraded) {
    sock.shutdown(asio::socket_base::shutdown_both, ec);
    sock.close(ec);
  }
  std::lock_guard lock(mu);
  --active;
  cv.notify_all();
}

void Server::Impl::watchdog() {
  std::unique_lock lock(mu);
  while (!drained) {
    cv.wait_for(lock, std::chrono::milliseconds(500));
    int64_t now = nowMs();
    for (Conn* c : conns) {
      int64_t d = c->deadline_ms;
      // shutdown(2) rather than close(2): the fd stays owned by its thread, so it cannot be reused under it.
      if (d != 0 && now > d) ::shutdown(c->fd, SHUT_RDWR);
    }
  }
}

Server::Server(Handler handler, ServerOptions options, RejectFn on_reject) : impl_(std::make_unique<Impl>()) {
  impl_->handler = std::move(handler);
  impl_->opts = std::move(options);
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
  if (colon == std::string::npos) return makeError(ErrorKind::kInvalidArgument, "--listen '{}': expected HOST:PORT", host_port);
  std::string host = host_port.substr(0, colon), port = host_port.substr(colon + 1);
  if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  if (host.empty()) host = "0.0.0.0";
  beast::error_code ec;
  tcp::resolver resolver(impl_->accept_ioc);
  auto results = resolver.resolve(host, port, tcp::resolver::passive, ec);
  if (ec || results.empty()) return makeError(ErrorKind::kInvalidArgument, "--listen '{}': {}", host_port, ec.message());
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
  std::thread dog([this] { impl_->watchdog(); });
  if (impl_->unix_acceptor) impl_->acceptLoop(*impl_->unix_acceptor, true);
  if (impl_->tcp_acceptor) impl_->acceptLoop(*impl_->tcp_acceptor, false);
  auto guard = asio::make_work_guard(impl_->accept_ioc);
  impl_->accept_ioc.run();
  beast::error_code ec;
  if (impl_->unix_acceptor) impl_->unix_acceptor->close(ec);
  if (impl_->tcp_acceptor) impl_->tcp_acceptor->close(ec);
  {
    std::unique_lock lock(impl_->mu);
    impl_->cv.notify_all();
    if (!impl_->cv.wait_for(lock, drain_timeout, [&] { return impl_->active == 0; })) {
      // Long streams (logs -f, PTYs) do not end by themselves: cut them, then give their threads a moment.
      for (Conn* c : impl_->conns) ::shutdown(c->fd, SHUT_RDWR);
      impl_->cv.wait_for(lock, std::chrono::seconds(2), [&] { return impl_->active == 0; });
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
  return impl_->active;
}

}  // namespace space::http
