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

TEST(NetworkParse, SecretTakesMethodsAndPathPrefixes) {
  auto s = parseSetSecret(
      R"({"name": "K", "value": "v", "hosts": ["a.test"], "methods": ["GET", "POST"], "path_prefixes": ["/v1/"]})");
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_EQ(s->methods, (std::vector<std::string>{"GET", "POST"}));
  EXPECT_EQ(s->path_prefixes, std::vector<std::string>{"/v1/"});
  auto none = parseSetSecret(R"({"name": "K", "value": "v", "hosts": ["a.test"]})");
  ASSERT_TRUE(none);
  EXPECT_TRUE(none->methods.empty() && none->path_prefixes.empty());
  for (const char* bad : {R"({"name": "K", "value": "v", "hosts": ["a.test"], "methods": "GET"})",
                          R"({"name": "K", "value": "v", "hosts": ["a.test"], "path_prefixes": [1]})"}) {
    auto r = parseSetSecret(bad);
    ASSERT_FALSE(r) << bad;
    EXPECT_NE(
        r.error().message.find(std::string(bad).find("methods") != std::string::npos ? "methods" : "path_prefixes"),
        std::string::npos)
        << r.error().message;
  }
}

TEST(NetworkParse, PolicyTakesTlsAndWarnsAboutSharedCdns) {
  auto p = parseNetworkPolicy(nlohmann::json::parse(
      R"({"mode": "allow-list", "tls": "intercept-all", "rules": [{"action": "allow", "domain": "*.cloudfront.net"}]})"));
  ASSERT_TRUE(p) << p.error().message;
  EXPECT_EQ((*p)["tls"], "intercept-all");
  auto w = networkWarnings(*p);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_NE(w[0].find("cloudfront.net"), std::string::npos) << w[0];
  EXPECT_EQ((*parseNetworkPolicy(nlohmann::json::object()))["tls"], "intercept-bound");
  auto bad = parseNetworkPolicy(nlohmann::json::parse(R"({"tls": "sometimes"})"));
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("intercept-bound, intercept-all"), std::string::npos) << bad.error().message;
  EXPECT_TRUE(networkWarnings(*parseNetworkPolicy(nlohmann::json::parse(
                                  R"({"mode": "allow-list", "rules": [{"action": "allow", "domain": "api.test"}]})")))
                  .empty());
}

TEST(NetworkParse, AnAddressGivenAsADomainIsAHostRule) {
  auto p = parseNetworkPolicy(nlohmann::json::parse(
      R"({"mode": "allow-list", "rules": [{"action": "allow", "domain": "10.252.77.2", "ports": [8080]},
                                          {"action": "allow", "domain": "2001:db8::1"},
                                          {"action": "allow", "cidr": "10.252.77.9"}]})"));
  ASSERT_TRUE(p) << p.error().message;
  EXPECT_EQ((*p)["rules"][0],
            nlohmann::json::parse(R"({"action": "allow", "cidr": "10.252.77.2/32", "ports": [8080]})"));
  EXPECT_EQ((*p)["rules"][1]["cidr"], "2001:db8::1/128");
  EXPECT_EQ((*p)["rules"][2]["cidr"], "10.252.77.9/32");
}

TEST(NetworkParse, CidrWithAPortInsideIsRejectedWithTheText) {
  auto p =
      parseNetworkPolicy(nlohmann::json::parse(R"({"rules": [{"action": "allow", "cidr": "10.252.77.0/24:8080"}]})"));
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
  EXPECT_FALSE(
      core::DaemonConfig::fromJson(nlohmann::json::parse(R"({"egress_test_external_subnets": "10.0.0.0/8"})"), {}));

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

TEST(EgressDaemonConfig, TheGatewayRunsAsItsOwnUid) {  // E18
  EXPECT_EQ(core::DaemonConfig{}.egress_uid, core::kDefaultEgressUid);
  EXPECT_LT(core::kDefaultEgressUid, 0x10000000u) << "below the sandbox uid blocks";
  EXPECT_FALSE(core::DaemonConfig::fromJson(nlohmann::json::parse(R"({"egress_uid": 0})"), {}));
  EXPECT_FALSE(core::DaemonConfig::fromJson(nlohmann::json::parse(R"({"egress_gid": 268435456})"), {}))
      << "inside the sandbox uid blocks";
  auto c = core::DaemonConfig::fromJson(nlohmann::json::parse(R"({"egress_uid": 5000, "egress_gid": 5001})"), {});
  ASSERT_TRUE(c) << c.error().message;
  core::EgressSettings s;
  s.state_dir = "/var/lib/space";
  s.uid = c->egress_uid;
  s.gid = c->egress_gid;
  s.seccomp_policy = "/usr/share/space/seccomp/egress.json";
  auto j = core::egressConfigJson(s);
  EXPECT_EQ(j["confine"]["uid"], 5000);
  EXPECT_EQ(j["confine"]["gid"], 5001);
  EXPECT_EQ(j["confine"]["root_dir"], "/var/lib/space/egress/root");
  EXPECT_EQ(j["confine"]["seccomp_policy"], "/usr/share/space/seccomp/egress.json");
  EXPECT_EQ(j["audit_log"], "/var/lib/space/egress/audit/audit.jsonl") << "a directory of its own, for its uid";
}

}  // namespace
}  // namespace space::api
