#include "http/server_exchange.h"

#include <poll.h>

#include <boost/asio/write.hpp>
#include <boost/beast/websocket/rfc6455.hpp>

namespace space::http::detail {
namespace {

constexpr size_t kBodyReadBuffer = 256 * 1024;

}  // namespace

Status sendEarlyAnswer(Socket& sock, Conn& conn, const ServerOptions& opts, int status, std::string_view body) {
  bhttp::response<bhttp::string_body> res{static_cast<bhttp::status>(status), 11};
  res.set(bhttp::field::server, opts.server_name);
  res.set(bhttp::field::content_type, "application/json");
  res.body() = std::string(body);
  res.keep_alive(false);
  res.prepare_payload();
  beast::error_code ec;
  conn.armWrite(kEarlyAnswerTimeout);
  bhttp::write(sock, res, ec);
  conn.disarm();
  if (ec) return makeError(ErrorKind::kUnavailable, "writing {} answer: {}", status, ec.message());
  return ok();
}

void lingeringClose(Socket& sock, Conn& conn) {
  beast::error_code ec;
  sock.shutdown(asio::socket_base::shutdown_send, ec);
  char sink[16384];
  size_t total = 0;
  // A write deadline on purpose: it cuts both ways and does not count the connection as stalled.
  conn.armWrite(kEarlyAnswerTimeout);
  while (!ec && total < (8u << 20)) total += sock.read_some(asio::buffer(sink), ec);
  conn.disarm();
}

ResponseWriterImpl::ResponseWriterImpl(Socket& sock, std::shared_ptr<asio::io_context> ioc, RequestParser& parser,
                                       Conn& conn, const ServerOptions& opts, bool trusted, ProgressFn on_progress)
    : sock_(sock),
      ioc_(std::move(ioc)),
      parser_(parser),
      conn_(conn),
      opts_(opts),
      trusted_(trusted),
      on_progress_(std::move(on_progress)) {}

bool ResponseWriterImpl::keepAlive(int status) {
  // Over TCP a refused key ends the connection: the client gets its answer, not a slot to keep.
  if (!trusted_ && (status == 401 || status == 403)) closing_ = true;
  if (!parser_.get().keep_alive()) closing_ = true;
  return !closing_;
}

Status ResponseWriterImpl::send(int status, std::string_view content_type, std::string_view body) {
  return sendWith(status, content_type, body);
}

Status ResponseWriterImpl::sendRequestTimeout(std::string_view message) {
  closing_ = true;
  return sendWith(408, "application/json", errorBody("request_timeout", message));
}

Status ResponseWriterImpl::sendWith(int status, std::string_view content_type, std::string_view body) {
  if (status_ != 0) return makeError(ErrorKind::kInternal, "response already started");
  if (on_progress_) on_progress_();
  bhttp::response<bhttp::string_body> res{static_cast<bhttp::status>(status), 11};
  res.set(bhttp::field::server, opts_.server_name);
  res.set(bhttp::field::content_type, std::string(content_type));
  res.keep_alive(keepAlive(status));
  res.body() = std::string(body);
  res.prepare_payload();
  status_ = status;
  finished_ = true;
  beast::error_code ec;
  conn_.armWrite(opts_.write_timeout);
  bhttp::write(sock_, res, ec);
  conn_.disarm();
  if (ec) return fail(ec);
  return ok();
}

Status ResponseWriterImpl::beginStream(int status, std::string_view content_type, std::optional<uint64_t> length) {
  if (status_ != 0) return makeError(ErrorKind::kInternal, "response already started");
  if (on_progress_) on_progress_();
  bhttp::response<bhttp::empty_body> res{static_cast<bhttp::status>(status), 11};
  res.set(bhttp::field::server, opts_.server_name);
  res.set(bhttp::field::content_type, std::string(content_type));
  res.keep_alive(keepAlive(status));
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
  conn_.armWrite(opts_.write_timeout);
  bhttp::write_header(sock_, sr, ec);
  conn_.disarm();
  if (ec) return fail(ec);
  return ok();
}

Status ResponseWriterImpl::write(std::string_view data) {
  if (status_ == 0 || finished_) return makeError(ErrorKind::kInternal, "write outside a streamed response");
  if (data.empty()) return ok();
  beast::error_code ec;
  conn_.armWrite(opts_.write_timeout);
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

Status ResponseWriterImpl::end() {
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
  conn_.armWrite(opts_.write_timeout);
  asio::write(sock_, bhttp::make_chunk_last(), ec);
  conn_.disarm();
  if (ec) return fail(ec);
  return ok();
}

bool ResponseWriterImpl::isWebSocketUpgrade() const { return beast::websocket::is_upgrade(parser_.get()); }

bool ResponseWriterImpl::peerGone() {
  if (broken_) return true;
  // POLLRDHUP: the peer's FIN (a killed client's kernel sends one), which plain POLLIN cannot tell from data.
  struct pollfd p {};
  p.fd = sock_.native_handle();
  p.events = POLLRDHUP;
  return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

Result<std::unique_ptr<WebSocket>> ResponseWriterImpl::acceptWebSocket() {
  if (status_ != 0) return makeError(ErrorKind::kInternal, "response already started");
  if (!isWebSocketUpgrade()) return makeError(ErrorKind::kInvalidArgument, "this route needs a WebSocket upgrade");
  if (on_progress_) on_progress_();
  status_ = 101;
  finished_ = true;
  upgraded_ = true;
  return detail::acceptWebSocket(ioc_, std::move(sock_), parser_.get());
}

Status ResponseWriterImpl::fail(const beast::error_code& ec) {
  broken_ = true;
  return makeError(ErrorKind::kUnavailable, "writing response: {}", ec.message());
}

BodyReaderImpl::BodyReaderImpl(Socket& sock, beast::flat_buffer& buf, RequestParser& parser, Conn& conn,
                               const ServerOptions& opts, ResponseWriterImpl& resp, const RejectFn& reject,
                               ProgressFn on_progress)
    : sock_(sock),
      buf_(buf),
      parser_(parser),
      conn_(conn),
      opts_(opts),
      resp_(resp),
      reject_(reject),
      on_progress_(std::move(on_progress)) {}

Result<size_t> BodyReaderImpl::read(char* out, size_t max) {
  if (on_progress_) on_progress_();
  // Beast sizes each socket read by the buffer's free capacity (at least 512 bytes): without room, a
  // large upload arrives in 512-byte reads, one syscall each.
  if (buf_.capacity() < kBodyReadBuffer) buf_.reserve(kBodyReadBuffer);
  while (!parser_.is_done()) {
    auto& body = parser_.get().body();
    body.data = out;
    body.size = max;
    beast::error_code ec;
    conn_.awaitPeer(opts_.body_timeout);
    bhttp::read_some(sock_, buf_, parser_, ec);
    conn_.disarm();
    if (ec == bhttp::error::need_buffer) ec = {};
    if (ec) {
      Cut cut = conn_.cut;
      if (cut == Cut::kNone) return makeError(ErrorKind::kUnavailable, "reading request body: {}", ec.message());
      // The body stopped arriving (or the server needed the slot while it waited): the server answers,
      // whatever the handler would have made of the failed read.
      if (reject_) reject_(cut == Cut::kEvicted ? "evicted" : "request_timeout");
      if (!resp_.started()) {
        (void)resp_.sendRequestTimeout(
            cut == Cut::kEvicted
                ? "the request body stopped arriving while the server was full; retry"
                : fmt::format("the request body stopped arriving: nothing for {}", formatSeconds(opts_.body_timeout)));
      }
      return makeError(ErrorKind::kUnavailable, "request body stopped arriving; answered 408");
    }
    size_t n = max - body.size;
    if (n > 0) return n;
  }
  return size_t{0};
}

std::optional<uint64_t> BodyReaderImpl::contentLength() const {
  auto len = parser_.content_length();
  if (len) return *len;
  return std::nullopt;
}

}  // namespace space::http::detail
