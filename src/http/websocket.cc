// WebSocket connections for the PTY: async Beast on the connection's own io_context, run by one thread,
// because a Beast stream allows one reader and one writer only when both run on the same executor.
#include <boost/asio/post.hpp>
#include <boost/beast/websocket.hpp>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <nlohmann/json.hpp>

#include "http/beast_detail.h"
#include "http/client.h"

namespace space::http::detail {
namespace {

namespace ws = beast::websocket;

class WebSocketImpl : public WebSocket, public std::enable_shared_from_this<WebSocketImpl> {
 public:
  WebSocketImpl(std::shared_ptr<asio::io_context> ioc, Socket&& sock) : ioc_(std::move(ioc)), ws_(std::move(sock)) {
    ws_.read_message_max(1 << 20);
  }

  ws::stream<Socket>& stream() { return ws_; }

  Status run(const OnMessage& on_message) override {
    on_message_ = &on_message;
    startRead();
    ioc_->restart();
    ioc_->run();
    on_message_ = nullptr;
    {
      std::lock_guard lock(room_mu_);
      ended_ = true;
    }
    room_cv_.notify_all();
    // After our own close, however the read side ended (closed, cancelled, EOF) the session ended cleanly.
    if (read_error_ && read_error_ != ws::error::closed && !closed_) {
      return makeError(ErrorKind::kUnavailable, "websocket: {}", read_error_.message());
    }
    return ok();
  }

  void sendBinary(std::string data) override { enqueue(true, std::move(data)); }
  void sendText(std::string data) override { enqueue(false, std::move(data)); }

  void waitForRoom(size_t max_bytes) override {
    std::unique_lock lock(room_mu_);
    room_cv_.wait(lock, [&] { return ended_ || queued_bytes_ <= max_bytes; });
  }

  void close() override {
    asio::post(*ioc_, [this] {
      close_requested_ = true;
      if (!writing_) doClose();
    });
  }

 private:
  void startRead() {
    ws_.async_read(rbuf_, [this](beast::error_code ec, size_t) {
      if (ec) {
        read_error_ = ec;
        // Whatever ended the reading side (peer close, reset), nothing more can be delivered.
        dropQueue();
        return;
      }
      std::string data = beast::buffers_to_string(rbuf_.data());
      rbuf_.consume(rbuf_.size());
      if (on_message_) (*on_message_)(ws_.got_binary(), std::move(data));
      startRead();
    });
  }

  void enqueue(bool binary, std::string data) {
    {
      std::lock_guard lock(room_mu_);
      queued_bytes_ += data.size();
    }
    asio::post(*ioc_, [this, binary, data = std::move(data)]() mutable {
      if (read_error_ || closed_) return released(data.size());
      queue_.emplace_back(binary, std::move(data));
      if (!writing_) writeNext();
    });
  }

  void writeNext() {
    if (queue_.empty()) {
      writing_ = false;
      if (close_requested_) doClose();
      return;
    }
    writing_ = true;
    ws_.binary(queue_.front().first);
    ws_.async_write(asio::buffer(queue_.front().second), [this](beast::error_code ec, size_t) {
      released(queue_.front().second.size());
      queue_.pop_front();
      writing_ = false;
      if (ec) {
        dropQueue();
        beast::error_code ignored;
        beast::get_lowest_layer(ws_).close(ignored);  // the read side then ends too
        return;
      }
      writeNext();
    });
  }

  void released(size_t bytes) {
    {
      std::lock_guard lock(room_mu_);
      queued_bytes_ -= std::min(bytes, queued_bytes_);
    }
    room_cv_.notify_all();
  }

  // The message being written stays until its write completes: Beast still reads from its buffer.
  void dropQueue() {
    size_t keep = writing_ && !queue_.empty() ? 1 : 0;
    while (queue_.size() > keep) {
      released(queue_.back().second.size());
      queue_.pop_back();
    }
  }

  void doClose() {
    if (closed_ || read_error_) {
      beast::error_code ignored;
      beast::get_lowest_layer(ws_).close(ignored);
      return;
    }
    closed_ = true;
    ws_.async_close(ws::close_code::normal, [this](beast::error_code ec) {
      if (ec) {
        beast::error_code ignored;
        beast::get_lowest_layer(ws_).close(ignored);
      }
    });
  }

  std::shared_ptr<asio::io_context> ioc_;
  ws::stream<Socket> ws_;
  beast::flat_buffer rbuf_;
  const OnMessage* on_message_ = nullptr;
  std::deque<std::pair<bool, std::string>> queue_;
  bool writing_ = false, close_requested_ = false, closed_ = false;
  beast::error_code read_error_;
  std::mutex room_mu_;
  std::condition_variable room_cv_;
  size_t queued_bytes_ = 0;  // enqueued and not yet written or dropped
  bool ended_ = false;       // run() returned: nothing queued will be written any more
};

}  // namespace

Result<std::unique_ptr<WebSocket>> acceptWebSocket(std::shared_ptr<asio::io_context> ioc, Socket&& sock,
                                                   const bhttp::request<bhttp::buffer_body>& req) {
  auto impl = std::make_unique<WebSocketImpl>(std::move(ioc), std::move(sock));
  beast::error_code ec;
  impl->stream().set_option(
      ws::stream_base::decorator([](ws::response_type& res) { res.set(bhttp::field::server, "spaced"); }));
  impl->stream().accept(req, ec);
  if (ec) return makeError(ErrorKind::kInvalidArgument, "websocket handshake: {}", ec.message());
  return std::unique_ptr<WebSocket>(std::move(impl));
}

Result<std::unique_ptr<WebSocket>> connectWebSocket(std::shared_ptr<asio::io_context> ioc, Socket&& sock,
                                                    const std::string& host, const std::string& target,
                                                    const std::string& bearer) {
  auto impl = std::make_unique<WebSocketImpl>(ioc, std::move(sock));
  impl->stream().set_option(ws::stream_base::decorator([bearer](ws::request_type& req) {
    req.set(bhttp::field::user_agent, "space-cli");
    if (!bearer.empty()) req.set(bhttp::field::authorization, "Bearer " + bearer);
  }));
  ws::response_type res;
  beast::error_code ec;
  // The asynchronous handshake: Boost 1.74's synchronous one leaves `res` empty when the server declines
  // the upgrade, and the daemon's status and message (404 "execve ...: No such file") would be lost.
  impl->stream().async_handshake(res, host, target, [&ec](beast::error_code e) { ec = e; });
  ioc->restart();
  ioc->run();
  if (ec) {
    // The daemon answers a refused upgrade with its usual JSON error; pass its message on.
    if (ec == ws::error::upgrade_declined && res.result_int() != 101) {
      Error e{errorKindFromStatus(res.result_int()), 0, errorMessageFromBody(res.body())};
      // What was not found and why it failed, as for any other answer (the CLI picks its hint by them).
      auto j = nlohmann::json::parse(res.body(), nullptr, false);
      if (j.is_object() && j.contains("error") && j["error"].is_object()) {
        e.resource = j["error"].value("resource", "");
        e.reason = j["error"].value("reason", "");
      }
      return tl::unexpected(std::move(e));
    }
    return makeError(ErrorKind::kUnavailable, "websocket handshake failed: {}", ec.message());
  }
  return std::unique_ptr<WebSocket>(std::move(impl));
}

}  // namespace space::http::detail
