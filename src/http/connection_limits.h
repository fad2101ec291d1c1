// Admission of connections to the HTTP server: which listener and which source may take a slot, and
// when a stalled connection must make room. Pure accounting, no sockets and no locking (the server calls
// it under its own mutex), so the arithmetic is tested by itself.
//
// The threat (SECURITY.md E21): anyone who can reach the TCP listener could open connections until the
// server was full, and the unix socket, the operator's way in, was refused with them. Hence:
//  - the unix socket has a reserve of slots TCP can never take, and may take a stalled connection's slot
//    when every slot is held;
//  - one TCP source address holds at most max_per_source connections;
//  - TCP connections that have not shown a valid key yet share a small pool; when it is full, the one
//    that has waited longest for its peer makes room (a real client sends its head within milliseconds,
//    so only connections that hold a slot without using it are displaced).
#pragma once

#include <cstddef>
#include <map>
#include <string>

namespace space::http {

struct ConnectionLimitOptions {
  size_t max_connections = 512;      // slots (one thread each) of all listeners together
  size_t unix_reserve = 64;          // of those, the slots only the unix socket may take
  size_t max_per_source = 64;        // TCP connections from one source address
  size_t max_unauthenticated = 128;  // TCP connections that have not shown a valid key yet
};

enum class Listener { kUnix, kTcp };

// What one connection holds. The server keeps it with the connection and passes it back on release.
struct Slot {
  Listener listener = Listener::kUnix;
  std::string source;          // TCP: the peer's address without the port
  bool authenticated = false;  // TCP: a request on it showed a valid key (unix: always)
  bool held = false;           // counted in the totals; release() makes it false
};

enum class Verdict {
  kAdmit,
  // Every slot is held: a unix newcomer may take the slot of the connection that waited longest on its
  // peer (any listener).
  kEvictAnyStalled,
  // The TCP share or the unauthenticated pool is full: the unauthenticated TCP connection that waited
  // longest on its peer may make room.
  kEvictUnauthenticated,
  kRefuseFull,    // nothing may be displaced
  kRefuseSource,  // this source holds its share; never displaces others
};

// The rejection metric's reason for a refusal.
const char* refusalReason(Verdict v);

class ConnectionLimits {
 public:
  explicit ConnectionLimits(ConnectionLimitOptions options);

  // Whether slot (not yet held) may be taken now.
  Verdict check(const Slot& slot) const;
  // Counts slot as held; only after check() said kAdmit.
  void take(Slot& slot);
  // The connection showed a valid key: it leaves the unauthenticated pool (it still counts for its
  // source). No effect on a released or unix slot.
  void authenticate(Slot& slot);
  // Idempotent: an evicted connection's slot is released at eviction and again when its thread ends.
  void release(Slot& slot);

  size_t active() const { return unix_ + tcp_; }
  size_t unixConnections() const { return unix_; }
  size_t tcpConnections() const { return tcp_; }
  size_t unauthenticated() const { return unauthenticated_; }
  size_t fromSource(const std::string& source) const;
  // Slots TCP may hold at most: all but the unix reserve.
  size_t tcpShare() const;
  const ConnectionLimitOptions& options() const { return options_; }

 private:
  ConnectionLimitOptions options_;
  size_t unix_ = 0, tcp_ = 0, unauthenticated_ = 0;
  std::map<std::string, size_t> per_source_;  // only sources with connections
};

}  // namespace space::http
