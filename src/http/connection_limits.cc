#include "http/connection_limits.h"

#include <algorithm>

namespace space::http {

const char* refusalReason(Verdict v) {
  switch (v) {
    case Verdict::kRefuseSource:
      return "source_connection_limit";
    case Verdict::kAdmit:
      return "";
    default:
      return "connection_limit";
  }
}

ConnectionLimits::ConnectionLimits(ConnectionLimitOptions options) : options_(options) {
  // A reserve larger than the whole would leave TCP a negative share; at least one slot stays the unix
  // socket's, whatever the options say, since that is the point of the reserve.
  options_.max_connections = std::max<size_t>(options_.max_connections, 1);
  options_.unix_reserve = std::clamp<size_t>(options_.unix_reserve, 1, options_.max_connections);
}

size_t ConnectionLimits::tcpShare() const { return options_.max_connections - options_.unix_reserve; }

size_t ConnectionLimits::fromSource(const std::string& source) const {
  auto it = per_source_.find(source);
  return it == per_source_.end() ? 0 : it->second;
}

Verdict ConnectionLimits::check(const Slot& slot) const {
  bool full = active() >= options_.max_connections;
  if (slot.listener == Listener::kUnix) return full ? Verdict::kEvictAnyStalled : Verdict::kAdmit;
  // The source's own share first: a source at its limit gets nothing, not even by displacing others.
  if (fromSource(slot.source) >= options_.max_per_source) return Verdict::kRefuseSource;
  bool tcp_full = full || tcp_ >= tcpShare();
  if (tcp_full || unauthenticated_ >= options_.max_unauthenticated) {
    return unauthenticated_ > 0 ? Verdict::kEvictUnauthenticated : Verdict::kRefuseFull;
  }
  return Verdict::kAdmit;
}

void ConnectionLimits::take(Slot& slot) {
  if (slot.held) return;
  slot.held = true;
  if (slot.listener == Listener::kUnix) {
    slot.authenticated = true;  // file permissions are the authentication
    ++unix_;
    return;
  }
  slot.authenticated = false;
  ++tcp_;
  ++unauthenticated_;
  ++per_source_[slot.source];
}

void ConnectionLimits::authenticate(Slot& slot) {
  if (!slot.held || slot.authenticated) return;
  slot.authenticated = true;
  --unauthenticated_;
}

void ConnectionLimits::release(Slot& slot) {
  if (!slot.held) return;
  slot.held = false;
  if (slot.listener == Listener::kUnix) {
    --unix_;
    return;
  }
  --tcp_;
  if (!slot.authenticated) --unauthenticated_;
  auto it = per_source_.find(slot.source);
  if (it != per_source_.end() && --it->second == 0) per_source_.erase(it);
}

}  // namespace space::http
