// Admission arithmetic of the HTTP server: the unix reserve, the per-source share, the unauthenticated
// pool and the releases that give slots back.
#include "http/connection_limits.h"

#include <gtest/gtest.h>

#include <vector>

namespace space::http {
namespace {

Slot unixSlot() { return Slot{Listener::kUnix, "unix"}; }
Slot tcpSlot(const std::string& source) { return Slot{Listener::kTcp, source}; }

ConnectionLimitOptions small() {
  ConnectionLimitOptions o;
  o.max_connections = 10;
  o.unix_reserve = 3;
  o.max_per_source = 4;
  o.max_unauthenticated = 5;
  return o;
}

// Takes the slot if admitted; returns the verdict either way.
Verdict admit(ConnectionLimits& limits, Slot& slot) {
  Verdict v = limits.check(slot);
  if (v == Verdict::kAdmit) limits.take(slot);
  return v;
}

TEST(ConnectionLimits, TcpNeverTakesTheUnixReserve) {
  auto o = small();
  o.max_per_source = 100;
  o.max_unauthenticated = 100;
  ConnectionLimits limits(o);
  EXPECT_EQ(limits.tcpShare(), 7u);
  std::vector<Slot> tcp;
  for (int i = 0; i < 7; ++i) {
    tcp.push_back(tcpSlot("10.0.0." + std::to_string(i)));
    ASSERT_EQ(admit(limits, tcp.back()), Verdict::kAdmit) << i;
    limits.authenticate(tcp.back());  // authenticated: nothing may be displaced
  }
  Slot more = tcpSlot("10.0.0.99");
  EXPECT_EQ(limits.check(more), Verdict::kRefuseFull);
  // The reserve is the unix socket's, all of it.
  std::vector<Slot> unix_slots(3, unixSlot());
  for (auto& s : unix_slots) EXPECT_EQ(admit(limits, s), Verdict::kAdmit);
  EXPECT_EQ(limits.active(), 10u);
  // Full: a unix newcomer may only displace a stalled connection.
  Slot one_more = unixSlot();
  EXPECT_EQ(limits.check(one_more), Verdict::kEvictAnyStalled);
  // A TCP slot given back is TCP's again.
  limits.release(tcp[0]);
  EXPECT_EQ(limits.check(more), Verdict::kAdmit);
}

TEST(ConnectionLimits, UnixMayUseTheWholeServer) {
  ConnectionLimits limits(small());
  std::vector<Slot> slots(10, unixSlot());
  for (auto& s : slots) EXPECT_EQ(admit(limits, s), Verdict::kAdmit);
  EXPECT_EQ(limits.unixConnections(), 10u);
  // TCP finds the server full: nothing unauthenticated to displace.
  Slot t = tcpSlot("10.0.0.1");
  EXPECT_EQ(limits.check(t), Verdict::kRefuseFull);
}

TEST(ConnectionLimits, OneSourceHoldsItsShareAndNoMore) {
  ConnectionLimits limits(small());
  std::vector<Slot> mine;
  for (int i = 0; i < 4; ++i) {
    mine.push_back(tcpSlot("192.0.2.7"));
    ASSERT_EQ(admit(limits, mine.back()), Verdict::kAdmit);
  }
  Slot fifth = tcpSlot("192.0.2.7");
  EXPECT_EQ(limits.check(fifth), Verdict::kRefuseSource);
  EXPECT_STREQ(refusalReason(Verdict::kRefuseSource), "source_connection_limit");
  // Authenticated connections count for their source too.
  for (auto& s : mine) limits.authenticate(s);
  EXPECT_EQ(limits.check(fifth), Verdict::kRefuseSource);
  EXPECT_EQ(limits.fromSource("192.0.2.7"), 4u);
  // Another address is not affected.
  Slot other = tcpSlot("192.0.2.8");
  EXPECT_EQ(admit(limits, other), Verdict::kAdmit);
  limits.release(mine[1]);
  EXPECT_EQ(limits.fromSource("192.0.2.7"), 3u);
  EXPECT_EQ(admit(limits, fifth), Verdict::kAdmit);
}

TEST(ConnectionLimits, UnauthenticatedPoolIsSmallAndDisplaceable) {
  ConnectionLimits limits(small());
  std::vector<Slot> anon;
  for (int i = 0; i < 5; ++i) {
    anon.push_back(tcpSlot("198.51.100." + std::to_string(i)));
    ASSERT_EQ(admit(limits, anon.back()), Verdict::kAdmit);
  }
  EXPECT_EQ(limits.unauthenticated(), 5u);
  Slot next = tcpSlot("198.51.100.50");
  EXPECT_EQ(limits.check(next), Verdict::kEvictUnauthenticated);
  // Showing a key leaves the pool: room for one more.
  limits.authenticate(anon[0]);
  EXPECT_EQ(limits.unauthenticated(), 4u);
  EXPECT_EQ(limits.tcpConnections(), 5u);
  EXPECT_EQ(admit(limits, next), Verdict::kAdmit);
  // An authenticated connection given back leaves the pool as it was.
  limits.release(anon[0]);
  EXPECT_EQ(limits.unauthenticated(), 5u);
  EXPECT_EQ(limits.tcpConnections(), 5u);
}

TEST(ConnectionLimits, TcpShareFullDisplacesOnlyUnauthenticated) {
  auto o = small();
  o.max_per_source = 100;
  o.max_unauthenticated = 100;
  ConnectionLimits limits(o);
  std::vector<Slot> tcp(7, tcpSlot("203.0.113.1"));
  for (auto& s : tcp) ASSERT_EQ(admit(limits, s), Verdict::kAdmit);
  for (size_t i = 1; i < tcp.size(); ++i) limits.authenticate(tcp[i]);
  Slot next = tcpSlot("203.0.113.2");
  EXPECT_EQ(limits.check(next), Verdict::kEvictUnauthenticated);  // tcp[0] may make room
  limits.authenticate(tcp[0]);
  EXPECT_EQ(limits.check(next), Verdict::kRefuseFull);
}

TEST(ConnectionLimits, ReleaseIsIdempotent) {
  ConnectionLimits limits(small());
  Slot t = tcpSlot("10.1.1.1"), u = unixSlot();
  ASSERT_EQ(admit(limits, t), Verdict::kAdmit);
  ASSERT_EQ(admit(limits, u), Verdict::kAdmit);
  // An evicted connection is released when it is displaced and again when its thread ends.
  limits.release(t);
  limits.release(t);
  limits.release(u);
  limits.release(u);
  EXPECT_EQ(limits.active(), 0u);
  EXPECT_EQ(limits.unauthenticated(), 0u);
  EXPECT_EQ(limits.fromSource("10.1.1.1"), 0u);
  // Authenticating a released slot changes nothing.
  limits.authenticate(t);
  EXPECT_EQ(limits.unauthenticated(), 0u);
  Slot never = tcpSlot("10.1.1.2");
  limits.release(never);
  EXPECT_EQ(limits.active(), 0u);
}

TEST(ConnectionLimits, ReserveIsClampedToTheWhole) {
  ConnectionLimitOptions o;
  o.max_connections = 4;
  o.unix_reserve = 9;
  ConnectionLimits limits(o);
  EXPECT_EQ(limits.tcpShare(), 0u);
  Slot t = tcpSlot("10.0.0.1");
  EXPECT_EQ(limits.check(t), Verdict::kRefuseFull);
  // A zero reserve still keeps one slot for the unix socket.
  o.unix_reserve = 0;
  ConnectionLimits at_least_one(o);
  EXPECT_EQ(at_least_one.tcpShare(), 3u);
}

TEST(ConnectionLimits, DefaultsMatchTheDocumentedLimits) {
  ConnectionLimits limits{ConnectionLimitOptions{}};
  EXPECT_EQ(limits.options().max_connections, 512u);
  EXPECT_EQ(limits.options().unix_reserve, 64u);
  EXPECT_EQ(limits.tcpShare(), 448u);
  EXPECT_EQ(limits.options().max_per_source, 64u);
  EXPECT_EQ(limits.options().max_unauthenticated, 128u);
}

}  // namespace
}  // namespace space::http
