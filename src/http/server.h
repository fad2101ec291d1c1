// HTTP/1.1 server for spaced: a unix socket (trusted by its file permissions) and optionally TCP.
// One thread per connection, capped; a watchdog shuts down sockets whose deadline passed so that a slow
// or silent peer (slowloris) cannot hold a thread. Handlers see only the Beast-free types of message.h.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "common/result.h"
#include "http/message.h"

namespace space::http {

struct ServerOptions {
  size_t max_connections = 512;
  size_t header_limit = 16 * 1024;
  std::chrono::seconds header_timeout{30};  // the whole request head, and keep-alive idle time
  std::chrono::seconds io_timeout{120};     // one stalled body read or response write
  std::string server_name = "spaced";
};

using Handler = std::function<void(Request&, BodyReader&, ResponseWriter&)>;
// Called for requests refused before any handler saw them ("header_too_large", "malformed_http",
// "connection_limit", "timeout").
using RejectFn = std::function<void(const std::string& reason)>;

class Server {
 public:
  Server(Handler handler, ServerOptions options, RejectFn on_reject = {});
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Creates the parent directory, replaces a stale socket file (only when nothing answers on it) and
  // leaves the socket mode 0660.
  Status listenUnix(const std::string& path);
  // "HOST:PORT"; port 0 picks a free one (see tcpPort()).
  Status listenTcp(const std::string& host_port);
  uint16_t tcpPort() const;

  // Serves until stop(); then stops accepting, lets running requests finish for up to drain_timeout,
  // and returns.
  void run(std::chrono::seconds drain_timeout = std::chrono::seconds(10));
  void stop();  // thread-safe
  size_t activeConnections() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace space::http
