// space net: the rule forms people type, --remove/--reset, what a mode change says, the audit table.
#include <gtest/gtest.h>

#include "cli/commands.h"

namespace space::cli {
namespace {

using nlohmann::json;

json rule(const std::string& text) {
  auto r = ruleFromText("allow", text);
  EXPECT_TRUE(r) << text << ": " << (r ? "" : r.error().message);
  return r ? *r : json();
}

TEST(NetRuleText, CidrWithAPort) {
  EXPECT_EQ(rule("10.252.77.0/24:8080"), json::parse(R"({"action":"allow","cidr":"10.252.77.0/24","ports":[8080]})"));
  EXPECT_EQ(rule("10.252.77.0/24"), json::parse(R"({"action":"allow","cidr":"10.252.77.0/24"})"));
}

TEST(NetRuleText, AnAddressIsAHostCidr) {
  EXPECT_EQ(rule("10.252.77.2"), json::parse(R"({"action":"allow","cidr":"10.252.77.2/32"})"));
  EXPECT_EQ(rule("10.252.77.2:80,443"), json::parse(R"({"action":"allow","cidr":"10.252.77.2/32","ports":[80,443]})"));
  EXPECT_EQ(rule("2001:db8::1"), json::parse(R"({"action":"allow","cidr":"2001:db8::1/128"})"));
  EXPECT_EQ(rule("[2001:db8::1]:443"), json::parse(R"({"action":"allow","cidr":"2001:db8::1/128","ports":[443]})"));
}

TEST(NetRuleText, BracketedIpv6WithPrefixAndPort) {
  EXPECT_EQ(rule("[2001:db8::]/32:443"), json::parse(R"({"action":"allow","cidr":"2001:db8::/32","ports":[443]})"));
  EXPECT_EQ(rule("[2001:db8::]/32"), json::parse(R"({"action":"allow","cidr":"2001:db8::/32"})"));
  EXPECT_EQ(rule("fc00::/7"), json::parse(R"({"action":"allow","cidr":"fc00::/7"})"));
  EXPECT_EQ(rule("fc00::/7:22"), json::parse(R"({"action":"allow","cidr":"fc00::/7","ports":[22]})"));
}

TEST(NetRuleText, Names) {
  EXPECT_EQ(rule("api.example.com"), json::parse(R"({"action":"allow","domain":"api.example.com"})"));
  EXPECT_EQ(rule("*.example.com:443"), json::parse(R"({"action":"allow","domain":"*.example.com","ports":[443]})"));
}

TEST(NetRuleText, BadPortsAndBracketsAreNamed) {
  for (const char* bad :
       {"10.0.0.0/24:", "10.0.0.0/24:0", "a.test:70000", "a.test:80,", "[2001:db8::1", "[::1]x", ":80", ""}) {
    auto r = ruleFromText("allow", bad);
    EXPECT_FALSE(r) << bad;
    if (!r && *bad) EXPECT_NE(r.error().message.find(bad), std::string::npos) << r.error().message;
  }
}

json base() {
  return json::parse(R"({"mode":"allow-list","rules":[
    {"action":"allow","domain":"api.example.com","ports":[443]},
    {"action":"allow","cidr":"10.252.77.0/24","ports":[8080]},
    {"action":"deny","domain":"bad.example.com"}]})");
}

TEST(NetPolicy, RemoveTakesOutTheRulesForATarget) {
  auto p = networkPolicy(NetOptions{.remove = {"10.252.77.0/24:8080", "API.example.com."}}, base());
  ASSERT_TRUE(p) << p.error().message;
  ASSERT_EQ((*p)["rules"].size(), 1u);
  EXPECT_EQ((*p)["rules"][0]["domain"], "bad.example.com");
  EXPECT_EQ((*p)["mode"], "allow-list");
  // Without a port every port's rule goes; with another port none matches.
  EXPECT_TRUE(networkPolicy(NetOptions{.remove = {"10.252.77.0/24"}}, base()));
  auto miss = networkPolicy(NetOptions{.remove = {"10.252.77.0/24:9090"}}, base());
  ASSERT_FALSE(miss);
  EXPECT_NE(miss.error().message.find("no rule matches"), std::string::npos) << miss.error().message;
  EXPECT_NE(miss.error().message.find("10.252.77.0/24:8080"), std::string::npos) << miss.error().message;
}

TEST(NetPolicy, ResetDropsEverythingThenAdds) {
  auto p = networkPolicy(NetOptions{.reset = true}, base());
  ASSERT_TRUE(p);
  EXPECT_EQ(*p, json::parse(R"({"mode":"deny-all","rules":[]})"));
  auto q = networkPolicy(NetOptions{.allow = {"10.252.77.2:22"}, .reset = true}, base());
  ASSERT_TRUE(q);
  EXPECT_EQ((*q)["mode"], "allow-list");
  ASSERT_EQ((*q)["rules"].size(), 1u);
  EXPECT_EQ((*q)["rules"][0]["cidr"], "10.252.77.2/32");
}

TEST(NetPolicy, ModeChangeSaysWhatHappensToTheRules) {
  auto deny_all = json::parse(R"({"mode":"deny-all","rules":[{"action":"allow","domain":"a.test"}]})");
  EXPECT_NE(modeChangeNote("allow-list", deny_all).find("1 rules are kept"), std::string::npos);
  EXPECT_EQ(modeChangeNote("deny-all", deny_all), "");
  auto pub = base();
  pub["mode"] = "allow-all-public";
  EXPECT_NE(modeChangeNote("allow-list", pub).find("1 deny rules still block"), std::string::npos);
  auto empty_list = json::parse(R"({"mode":"allow-list","rules":[]})");
  EXPECT_NE(modeChangeNote("deny-all", empty_list).find("nothing is reachable"), std::string::npos);
}

TEST(NetLog, AuditLineBecomesARow) {
  auto row = auditRow(json::parse(R"({"time":"2024-05-01T12:34:56.789Z","kind":"connect","sandbox":"sb-1",
    "verdict":"deny","rule":"allow cidr 10.252.77.0/24 port 8080","reason":"port 9090 not allowed",
    "used":"10.252.77.2:9090"})"));
  EXPECT_EQ(row, (std::vector<std::string>{"12:34:56", "connect", "deny", "10.252.77.2:9090",
                                           "allow cidr 10.252.77.0/24 port 8080", "port 9090 not allowed"}));
  auto named = auditRow(json::parse(R"({"kind":"dns","verdict":"allow","name":"a.test","rule":"r","reason":"x"})"));
  EXPECT_EQ(named[3], "a.test");
}

}  // namespace
}  // namespace space::cli
