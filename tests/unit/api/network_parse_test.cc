#include <gtest/gtest.h>

#include "api/routes/routes.h"
#include "core/config.h"
#include "core/egress_supervisor.h"

namespace space::api {
namespace {

TEST(NetworkParse, PolicyIsValidatedAndNormalised) {
  auto p = parseNetworkPolicy(nlohmann::json::parse(
      R"({"mode": "allow-list", "rules": [{"action": "allow", "domain": "API.Example.COM.", "ports": [443]}]})"));
  ASSERT_TRUE(p) << p.error().message;
  EXPECT_EQ((*p)["mode"], "allow-list");
  EXPECT_EQ((*p)["rules"][0]["domain"], "api.example.com");
  auto empty = parseNetworkPolicy(nlohmann::json::object());
  ASSERT_TRUE(empty);
  EXPECT_EQ((*empty)["mode"], "deny-all");
  EXPECT_FALSE(parseNetworkPolicy(nlohmann::json::parse(R"({"mode": "open"})")));
  EXPECT_FALSE(parseNetworkPolicy(nlohmann::json::parse(R"({"mod": "deny-all"})")));
  EXPECT_FALSE(parseNetworkPolicy(nlohmann::json::parse(R"({"rules": [{"action": "allow"}]})")));
  EXPECT_FALSE(parseNetworkPolicy(nlohmann::json::parse(R"([1])")));
}

TEST(NetworkParse, CreateTakesNetworkAndSecrets) {
  auto c = parseCreateSandbox(R"({"network": {"mode": "allow-all-public"}, "secrets": ["OPENAI_KEY"]})", 1ull << 34);
  ASSERT_TRUE(c) << c.error().message;
  ASSERT_TRUE(c->network);
  EXPECT_EQ((*c->network)["mode"], "allow-all-public");
  EXPECT_EQ(c->secrets, std::vector<std::string>{"OPENAI_KEY"});
  EXPECT_FALSE(parseCreateSandbox(R"({"secrets": ["1BAD"]})", 1ull << 34));
  EXPECT_FALSE(parseCreateSandbox(R"({"secrets": ["K"], "env": {"K": "v"}})", 1ull << 34));
  EXPECT_FALSE(parseCreateSandbox(R"({"network": {"mode": "x"}})", 1ull << 34));
}

TEST(NetworkParse, SecretNeedsNameValueAndHosts) {
  auto s = parseSetSecret(R"({"name": "K", "value": "v", "hosts": ["a.test"], "format": "Bearer {}"})");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->header, "Authorization");
  EXPECT_EQ(s->format, "Bearer {}");
  EXPECT_FALSE(parseSetSecret(R"({"name": "K", "hosts": ["a.test"]})"));
  EXPECT_FALSE(parseSetSecret(R"({"name": "K", "value": "v"})"));
  EXPECT_FALSE(parseSetSecret(R"({"value": "v", "hosts": ["a.test"]})"));
  EXPECT_FALSE(parseSetSecret(R"({"name": "K", "value": "v", "hosts": ["a.test"], "secret": 1})"));
}

TEST(NetworkParse, AnAddressGivenAsADomainIsAHostRule) {
  auto p = parseNetworkPolicy(nlohmann::json::parse(
      R"({"mode": "allow-list", "rules": [{"action": "allow", "domain": "10.252.77.2", "ports": [8080]},
                                          {"action": "allow", "domain": "2001:db8::1"},
                                          {"action": "allow", "cidr": "10.252.77.9"}]})"));
  ASSERT_TRUE(p) << p.error().message;
  EXPECT_EQ((*p)["rules"][0], nlohmann::json::parse(R"({"action": "allow", "cidr": "10.252.77.2/32", "ports": [8080]})"));
  EXPECT_EQ((*p)["rules"][1]["cidr"], "2001:db8::1/128");
  EXPECT_EQ((*p)["rules"][2]["cidr"], "10.252.77.9/32");
}

TEST(NetworkParse, CidrWithAPortInsideIsRejectedWithTheText) {
  auto p = parseNetworkPolicy(nlohmann::json::parse(R"({"rules": [{"action": "allow", "cidr": "10.252.77.0/24:8080"}]})"));
  ASSERT_FALSE(p);
  EXPECT_NE(p.error().message.find("10.252.77.0/24:8080"), std::string::npos) << p.error().message;
}

TEST(EgressConfig, SwitchAndTestSubnetsComeFromTheConfigFile) {
  auto c = core::DaemonConfig::fromJson(
      nlohmann::json::parse(R"({"egress": false, "egress_test_external_subnets": ["10.251.0.0/24"]})"), {});
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->egress, "off");
  EXPECT_EQ(c->egress_test_external_subnets, std::vector<std::string>{"10.251.0.0/24"});
  EXPECT_EQ(core::DaemonConfig{}.egress, "auto");
  EXPECT_FALSE(core::DaemonConfig::fromJson(nlohmann::json::parse(R"({"egress": "maybe"})"), {}));
  EXPECT_FALSE(core::DaemonConfig::fromJson(nlohmann::json::parse(R"({"egress_test_external_subnets": "10.0.0.0/8"})"), {}));

  core::EgressSettings s;
  s.state_dir = "/var/lib/space";
  s.pool = "10.200.0.0/16";
  s.test_external_subnets = c->egress_test_external_subnets;
  auto j = core::egressConfigJson(s);
  EXPECT_EQ(j["test_external_subnets"][0], "10.251.0.0/24");
  EXPECT_EQ(j["control_socket"], "/var/lib/space/egress/control.sock");
  EXPECT_EQ(j["sandbox_pools"][0], "10.200.0.0/16");
  EXPECT_FALSE(core::egressConfigJson(core::EgressSettings{}).contains("test_external_subnets"));
}

}  // namespace
}  // namespace space::api
