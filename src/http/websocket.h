// Beast-free WebSocket connection shared by spaced (PTY route) and the CLI (space shell).
#pragma once

#include <functional>
#include <string>

#include "common/result.h"

namespace space::http {

class WebSocket {
 public:
  virtual ~WebSocket() = default;
  using OnMessage = std::function<void(bool binary, std::string data)>;
  // Runs the connection on the calling thread until it closes; on_message runs on this thread. Returns
  // ok on a clean close.
  virtual Status run(const OnMessage& on_message) = 0;
  // Thread-safe; queued and written in order by run().
  virtual void sendBinary(std::string data) = 0;
  virtual void sendText(std::string data) = 0;
  // Thread-safe; blocks while more than max_bytes wait to be written (a slow peer), and returns at once
  // once the connection has ended. Without it, a producer faster than the peer grows the queue unbounded.
  virtual void waitForRoom(size_t max_bytes) = 0;
  // Thread-safe; flushes the queued messages, then performs the closing handshake.
  virtual void close() = 0;
};

}  // namespace space::http
