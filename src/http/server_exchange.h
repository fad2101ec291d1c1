// Internal to src/http: one request/response exchange on a server connection, as the handler sees it
// (BodyReader, ResponseWriter over the socket), and the server's own early answers.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "http/beast_detail.h"
#include "http/message.h"
#include "http/server.h"
#include "http/server_conn.h"

namespace space::http::detail {

using RequestParser = bhttp::request_parser<bhttp::buffer_body>;

// Called before the exchange waits on the socket (a body read, a response): the connection may leave
// the unauthenticated pool once the handler marked the request authenticated.
using ProgressFn = std::function<void()>;

// Bounded time to deliver the server's own short answers (408, 400, 431, lingering close).
inline constexpr std::chrono::milliseconds kEarlyAnswerTimeout{2000};

// A complete response written by the server itself (no handler), always with Connection: close.
Status sendEarlyAnswer(Socket& sock, Conn& conn, const ServerOptions& opts, int status, std::string_view body);

// After answering early (413, 404 on an upload, 401 to a body), closing with unread request bytes would
// make TCP send a reset that can destroy the answer before the client reads it. Half-close, then discard
// a bounded amount of what the client is still sending.
void lingeringClose(Socket& sock, Conn& conn);

class ResponseWriterImpl : public ResponseWriter {
 public:
  ResponseWriterImpl(Socket& sock, std::shared_ptr<asio::io_context> ioc, RequestParser& parser, Conn& conn,
                     const ServerOptions& opts, bool trusted, ProgressFn on_progress);

  Status send(int status, std::string_view content_type, std::string_view body) override;
  Status beginStream(int status, std::string_view content_type, std::optional<uint64_t> length) override;
  Status write(std::string_view data) override;
  Status end() override;
  bool started() const override { return status_ != 0; }
  int status() const override { return status_; }
  bool isWebSocketUpgrade() const override;
  bool peerGone() override;
  Result<std::unique_ptr<WebSocket>> acceptWebSocket() override;

  // The server's 408 when the body stopped arriving; ends the connection.
  Status sendRequestTimeout(std::string_view message);

  bool finished() const { return finished_; }
  bool broken() const { return broken_; }
  bool upgraded() const { return upgraded_; }
  // The response said Connection: close (the client asked, or a TCP request failed authentication).
  bool closing() const { return closing_; }

 private:
  bool keepAlive(int status);
  Status sendWith(int status, std::string_view content_type, std::string_view body);
  Status fail(const beast::error_code& ec);

  Socket& sock_;
  std::shared_ptr<asio::io_context> ioc_;
  RequestParser& parser_;
  Conn& conn_;
  const ServerOptions& opts_;
  bool trusted_;
  ProgressFn on_progress_;
  int status_ = 0;
  bool chunked_ = false, finished_ = false, broken_ = false, upgraded_ = false, closing_ = false;
  uint64_t remaining_ = 0;
};

class BodyReaderImpl : public BodyReader {
 public:
  BodyReaderImpl(Socket& sock, beast::flat_buffer& buf, RequestParser& parser, Conn& conn, const ServerOptions& opts,
                 ResponseWriterImpl& resp, const RejectFn& reject, ProgressFn on_progress);

  Result<size_t> read(char* out, size_t max) override;
  std::optional<uint64_t> contentLength() const override;
  bool done() const { return parser_.is_done(); }

 private:
  Socket& sock_;
  beast::flat_buffer& buf_;
  RequestParser& parser_;
  Conn& conn_;
  const ServerOptions& opts_;
  ResponseWriterImpl& resp_;
  const RejectFn& reject_;
  ProgressFn on_progress_;
};

}  // namespace space::http::detail
