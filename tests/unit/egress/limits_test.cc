// Token buckets and connection caps: SECURITY.md E19 (rates), E20 (a sandbox's share of connections).
#include "egress/limits.h"

#include <gtest/gtest.h>

using namespace space::egress;
using namespace std::chrono_literals;

TEST(EgressTokenBucket, BurstThenRate) {
  Rate r{10, 3};
  auto t = LimitClock::now();
  TokenBucket b(r, t);
  EXPECT_TRUE(b.take(r, t));
  EXPECT_TRUE(b.take(r, t));
  EXPECT_TRUE(b.take(r, t));
  EXPECT_FALSE(b.take(r, t));  // the burst is spent
  EXPECT_FALSE(b.take(r, t + 50ms));
  EXPECT_TRUE(b.take(r, t + 100ms));  // one token per 100 ms
  EXPECT_FALSE(b.take(r, t + 150ms));
  EXPECT_FALSE(b.full(r, t + 200ms));
  EXPECT_TRUE(b.full(r, t + 1s));
  // Refilling never goes past the burst, however long the bucket sat.
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(b.take(r, t + 1h));
  EXPECT_FALSE(b.take(r, t + 1h));
}

TEST(EgressTokenBucket, ATimeGoingBackwardsGivesNothing) {
  Rate r{10, 1};
  auto t = LimitClock::now();
  TokenBucket b(r, t + 1s);
  EXPECT_TRUE(b.take(r, t + 1s));
  EXPECT_FALSE(b.take(r, t));
}

TEST(EgressBucketsBySandbox, OneBucketEachAndRefilledOnesAreForgotten) {
  BucketsBySandbox buckets(Rate{1, 2});
  auto t = LimitClock::now();
  EXPECT_TRUE(buckets.take("a", t));
  EXPECT_TRUE(buckets.take("a", t));
  EXPECT_FALSE(buckets.take("a", t));
  EXPECT_TRUE(buckets.take("b", t));  // b's flood is not a's, and the other way round
  EXPECT_EQ(buckets.size(), 2u);
  buckets.evictFull(t + 1500ms);  // b refilled, a not yet
  EXPECT_EQ(buckets.size(), 1u);
  EXPECT_FALSE(buckets.take("a", t + 500ms));
  buckets.evictFull(t + 10s);
  EXPECT_EQ(buckets.size(), 0u);
}

TEST(EgressConnectionCaps, ASandboxAtItsCapIsToldSoFirst) {
  ConnectionCaps caps{.max_total = 100, .max_per_sandbox = 10, .reserve = 20, .reserve_per_sandbox = 2};
  EXPECT_EQ(checkConnectionCaps(caps, 0, 9), CapRefusal::kNone);
  EXPECT_EQ(checkConnectionCaps(caps, 0, 10), CapRefusal::kSandbox);
  EXPECT_EQ(checkConnectionCaps(caps, 100, 10), CapRefusal::kSandbox);  // its own cap before the node's
  EXPECT_EQ(checkConnectionCaps(caps, 100, 0), CapRefusal::kNode);
}

TEST(EgressConnectionCaps, TheReserveIsForSandboxesHoldingFew) {  // E20
  ConnectionCaps caps{.max_total = 100, .max_per_sandbox = 10, .reserve = 20, .reserve_per_sandbox = 2};
  // Below the reserve anyone up to its cap.
  EXPECT_EQ(checkConnectionCaps(caps, 79, 9), CapRefusal::kNone);
  // In the reserve: only sandboxes holding fewer than 2.
  EXPECT_EQ(checkConnectionCaps(caps, 80, 2), CapRefusal::kNode);
  EXPECT_EQ(checkConnectionCaps(caps, 80, 1), CapRefusal::kNone);
  EXPECT_EQ(checkConnectionCaps(caps, 99, 0), CapRefusal::kNone);
  EXPECT_EQ(checkConnectionCaps(caps, 100, 0), CapRefusal::kNode);
  // Eight sandboxes at their cap of 10 leave the reserve to the ninth and tenth.
  size_t total = 0;
  for (int sb = 0; sb < 8; ++sb)
    for (size_t held = 0; checkConnectionCaps(caps, total, held) == CapRefusal::kNone; ++held) ++total;
  EXPECT_EQ(total, 80u);
  EXPECT_EQ(checkConnectionCaps(caps, total, 0), CapRefusal::kNone);
  EXPECT_EQ(checkConnectionCaps(caps, total, 1), CapRefusal::kNone);
}
