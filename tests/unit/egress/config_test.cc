// space-egress's config file: the flood and slow-client limits (SECURITY.md E19, E20) and their checks.
#include "egress/config.h"

#include <gtest/gtest.h>

using namespace space::egress;

TEST(EgressConfig, LimitDefaults) {
  auto c = parseConfig(nlohmann::json::object());
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->audit.max_bytes, uint64_t(64) << 20);
  EXPECT_EQ(c->connections.max_total, 4096u);
  EXPECT_EQ(c->connections.max_per_sandbox, 256u);
  EXPECT_EQ(c->connections.reserve, 512u);
  EXPECT_EQ(c->connections.reserve_per_sandbox, 16u);
  EXPECT_EQ(c->head_deadline.count(), 10000);
  EXPECT_GT(c->dns_rate.per_second, 0);
  EXPECT_GT(c->connection_rate.per_second, 0);
}

TEST(EgressConfig, LimitsAreRead) {
  auto c = parseConfig({{"audit_log_max_bytes", 1 << 20},
                        {"audit_lines_per_second", 5},
                        {"audit_line_burst", 10},
                        {"audit_interval_ms", 500},
                        {"max_connections", 100},
                        {"max_connections_per_sandbox", 10},
                        {"reserved_connections", 20},
                        {"reserved_connections_per_sandbox", 2},
                        {"connections_per_second", 7},
                        {"connection_burst", 14},
                        {"dns_queries_per_second", 3},
                        {"dns_query_burst", 6},
                        {"head_deadline_ms", 3000}});
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->audit.max_bytes, 1u << 20);
  EXPECT_EQ(c->audit.lines_per_sandbox.per_second, 5);
  EXPECT_EQ(c->audit.lines_per_sandbox.burst, 10);
  EXPECT_EQ(c->audit.interval.count(), 500);
  EXPECT_EQ(c->connections.max_total, 100u);
  EXPECT_EQ(c->connections.max_per_sandbox, 10u);
  EXPECT_EQ(c->connections.reserve, 20u);
  EXPECT_EQ(c->connections.reserve_per_sandbox, 2u);
  EXPECT_EQ(c->connection_rate.per_second, 7);
  EXPECT_EQ(c->connection_rate.burst, 14);
  EXPECT_EQ(c->dns_rate.per_second, 3);
  EXPECT_EQ(c->dns_rate.burst, 6);
  EXPECT_EQ(c->head_deadline.count(), 3000);
}

TEST(EgressConfig, LimitsThatSwitchAProtectionOffAreRefused) {
  for (nlohmann::json bad : {nlohmann::json{{"dns_queries_per_second", 0}},
                             {{"connection_burst", 0.5}},
                             {{"audit_lines_per_second", -1}},
                             {{"audit_log_max_bytes", 1000}},
                             {{"audit_interval_ms", 0}},
                             {{"max_connections", 0}},
                             {{"reserved_connections", 4096}},
                             {{"head_deadline_ms", 0}},
                             {{"head_deadline_ms", "10s"}}}) {
    auto c = parseConfig(bad);
    EXPECT_FALSE(c) << bad.dump();
  }
  auto uncapped = parseConfig({{"audit_log_max_bytes", 0}});
  EXPECT_TRUE(uncapped);
  // Without its own setting the reserve follows max_connections (an eighth).
  auto small = parseConfig({{"max_connections", 256}, {"max_connections_per_sandbox", 8}});
  ASSERT_TRUE(small) << small.error().message;
  EXPECT_EQ(small->connections.reserve, 32u);
}

TEST(EgressConfig, ConfinementIsReadAndChecked) {  // E18
  EXPECT_FALSE(parseConfig(nlohmann::json::object())->confine.enabled) << "absent: unconfined (and said so at start)";
  nlohmann::json j = {{"confine",
                       {{"uid", 268369920},
                        {"gid", 268369920},
                        {"root_dir", "/var/lib/space/egress/root"},
                        {"seccomp_policy", "/usr/share/space/seccomp/egress.json"}}}};
  auto c = parseConfig(j);
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_TRUE(c->confine.enabled);
  EXPECT_EQ(c->confine.uid, 268369920u);
  EXPECT_EQ(c->confine.root_dir, "/var/lib/space/egress/root");
  for (const auto& [key, bad] : {std::pair<std::string, nlohmann::json>{"uid", 0},
                                 {"gid", 0},
                                 {"root_dir", "relative"},
                                 {"seccomp_policy", ""},
                                 {"extra", 1}}) {
    nlohmann::json b = j;
    b["confine"][key] = bad;
    EXPECT_FALSE(parseConfig(b)) << key;
  }
}
