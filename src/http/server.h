// HTTP/1.1 server for spaced: a unix socket (trusted by its file permissions) and optionally TCP.
// One thread per connection, capped, with the slots shared out by http/connection_limits.h (a reserve for
// the unix socket, a share per TCP source, a small pool for connections that have not shown a key). A
// watchdog enforces deadlines so that a slow or silent peer (slowloris) cannot hold a thread: a request
// whose head or body stops arriving is answered 408 and closed. Handlers see only the Beast-free types
// of message.h.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "common/result.h"
#include "http/connection_limits.h"
#include "http/message.h"

namespace space::http {

struct ServerOptions {
  ConnectionLimitOptions limits;
  size_t header_limit = 16 * 1024;
  // Absolute, from when the server starts waiting for a request (a new connection, or the end of the
  // previous response): keep-alive idle time and the whole request head together.
  std::chrono::milliseconds head_timeout{10'000};
  // Inactivity: one read of the request body that receives nothing.
  std::chrono::milliseconds body_timeout{20'000};
  // One stalled response write.
  std::chrono::milliseconds write_timeout{120'000};
  std::string server_name = "spaced";
};

using Handler = std::function<void(Request&, BodyReader&, ResponseWriter&)>;
// Called for connections and requests refused by the server itself: "header_too_large", "malformed_http",
// "connection_limit", "source_connection_limit", "request_timeout" (408), "evicted" (displaced to make
// room), "idle_timeout", "thread_limit", "accept_failed".
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
  void stop();                       // thread-safe
  size_t activeConnections() const;  // connections holding a slot

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace space::http
