#include "core/egress_binding.h"

#include <gtest/gtest.h>

#include "fake_runtime.h"

namespace space::core {
namespace {

using testing::FakeNode;

TEST(EgressBindingTest, ASecretIsSealedInTheStoreAndNeverListedWithItsValue) {
  FakeNode node;
  EgressBinding egress(node.ctx);
  SetSecret cmd;
  cmd.name = "GITHUB_TOKEN";
  cmd.value = "ghp_plaintext_value";
  cmd.hosts = {"API.github.com"};
  auto rec = egress.setSecret(cmd);
  ASSERT_TRUE(rec) << rec.error().message;
  EXPECT_TRUE(rec->sealed_value.empty());
  EXPECT_EQ(rec->hosts, std::vector<std::string>{"api.github.com"});

  auto stored = node.store->getSecret("GITHUB_TOKEN");
  ASSERT_TRUE(stored);
  EXPECT_EQ(stored->sealed_value.find("ghp_plaintext_value"), std::string::npos);
  auto box = egress.secretBox();
  ASSERT_TRUE(box);
  EXPECT_EQ((*box)->unseal(stored->sealed_value, "GITHUB_TOKEN").value_or(""), "ghp_plaintext_value");

  auto listed = egress.listSecrets();
  ASSERT_TRUE(listed);
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_TRUE(listed->front().sealed_value.empty());
  ASSERT_TRUE(egress.removeSecret("GITHUB_TOKEN"));
  EXPECT_TRUE(egress.listSecrets()->empty());
}

TEST(EgressBindingTest, ASecretNeedsAnEnvironmentNameAValueAndAHost) {
  FakeNode node;
  EgressBinding egress(node.ctx);
  SetSecret cmd;
  cmd.name = "1BAD";
  cmd.value = "v";
  cmd.hosts = {"example.com"};
  auto bad_name = egress.setSecret(cmd);
  ASSERT_FALSE(bad_name);
  EXPECT_EQ(bad_name.error().kind, ErrorKind::kInvalidArgument);
  EXPECT_NE(bad_name.error().message.find("environment variable"), std::string::npos);
  cmd.name = "GOOD";
  cmd.hosts.clear();
  auto no_host = egress.setSecret(cmd);
  ASSERT_FALSE(no_host);
  EXPECT_NE(no_host.error().message.find("at least one host"), std::string::npos);
  EXPECT_TRUE(node.store->listSecrets()->empty());
}

TEST(EgressBindingTest, WithTheGatewayOffANetworkRequestIsRefusedWithTheReason) {
  FakeNode node;
  EgressBinding egress(node.ctx);
  egress.setOffReason("nftables is missing");
  EXPECT_FALSE(egress.on());
  EXPECT_FALSE(egress.explicitProxyPort());
  EXPECT_EQ(egress.info(), (nlohmann::json{{"on", false}, {"reason", "nftables is missing"}}));

  CreateSandbox plain;
  EXPECT_TRUE(egress.checkRequest(plain, "jail"));
  CreateSandbox wants = plain;
  wants.network = nlohmann::json{{"mode", "allow-all"}};
  auto st = egress.checkRequest(wants, "jail");
  ASSERT_FALSE(st);
  EXPECT_EQ(st.error().kind, ErrorKind::kUnsupported);
  EXPECT_NE(st.error().message.find("nftables is missing"), std::string::npos);
  EXPECT_TRUE(egress.stopGateway());
}

TEST(EgressBindingTest, ASandboxWithoutANetworkHasNoPolicyAndAPooledOneIsNotFound) {
  FakeNode node;
  EgressBinding egress(node.ctx);
  store::SandboxRecord rec;
  rec.id = "sb-plain";
  rec.runtime = "jail";
  rec.state = store::SandboxState::kRunning;
  ASSERT_TRUE(node.store->insertSandbox(rec));
  auto net = egress.getNetwork("sb-plain");
  ASSERT_FALSE(net);
  EXPECT_EQ(net.error().kind, ErrorKind::kUnsupported);
  EXPECT_NE(net.error().message.find("sandbox sb-plain has no network"), std::string::npos);
  auto set = egress.setNetwork("sb-plain", nlohmann::json{{"mode", "deny-all"}});
  ASSERT_FALSE(set);
  EXPECT_EQ(set.error().kind, ErrorKind::kUnsupported);

  rec.id = "sb-pooled";
  rec.pooled = true;
  rec.uid_slot = 1;
  ASSERT_TRUE(node.store->insertSandbox(rec));
  auto pooled = egress.getNetwork("sb-pooled");
  ASSERT_FALSE(pooled);
  EXPECT_EQ(pooled.error().kind, ErrorKind::kNotFound);
}

}  // namespace
}  // namespace space::core
