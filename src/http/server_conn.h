// Internal to src/http: one server connection's slot and deadline, shared by the connection's thread,
// the watchdog and the accept loop (which may evict it).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "http/connection_limits.h"

namespace space::http::detail {

int64_t steadyNowMs();

// {"error":{"code":..,"message":..}} built by hand: the server's own answers have fixed ASCII codes and
// messages without quotes, which keeps a JSON library out of src/http.
std::string errorBody(std::string_view code, std::string_view message);
// "10 s", "0.3 s": deadlines in the server's messages.
std::string formatSeconds(std::chrono::milliseconds d);

// Why the server cut a connection's read side (shutdown(SHUT_RD): the blocked read returns end of
// stream while the write side stays open for the 408).
enum class Cut { kNone, kTimedOut, kEvicted };

// Sync asio operations ignore SO_RCVTIMEO, so deadlines are enforced from outside: the watchdog shuts
// the socket down and the blocked read or write in the connection's thread fails.
struct Conn {
  int fd = -1;
  Slot slot;  // guarded by the server's mutex
  std::atomic<Cut> cut{Cut::kNone};

  // A read deadline (waiting on the peer's bytes): when it passes, only the read side is cut, so the
  // thread can still answer 408. The connection counts as stalled (an eviction candidate) meanwhile.
  void awaitPeer(std::chrono::milliseconds timeout) {
    int64_t now = steadyNowMs();
    waiting_since_ms = now;
    deadline = ((now + timeout.count()) << 1) | 1;
  }
  // A write deadline: when it passes, the socket is shut down both ways.
  void armWrite(std::chrono::milliseconds timeout) {
    waiting_since_ms = 0;
    deadline = (steadyNowMs() + timeout.count()) << 1;
  }
  void disarm() {
    deadline = 0;
    waiting_since_ms = 0;
  }

  // Since when the connection has been waiting on its peer; 0 while the server works or writes.
  std::atomic<int64_t> waiting_since_ms{0};
  // The deadline in milliseconds of steadyNowMs(), shifted left by one with the low bit set for a read
  // deadline: one atomic, so the watchdog never pairs a deadline with the wrong kind. 0 = none.
  std::atomic<int64_t> deadline{0};
};

}  // namespace space::http::detail
