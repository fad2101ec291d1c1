// Policy matching and address classification: SECURITY.md E1, E2, E3, E7 and the default-deny list.
#include "egress/policy.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "egress/address.h"
#include "egress/names.h"

using namespace space::egress;

namespace {

IpAddress ip(const char* s) { return *parseIp(s); }

Policy policy(const char* json) {
  auto p = parsePolicy(nlohmann::json::parse(json));
  EXPECT_TRUE(p) << (p ? "" : p.error().message);
  return *p;
}

struct Env {
  HostFacts facts;
  std::vector<Cidr> test_external;
  PolicyContext ctx() { return {&facts, &test_external}; }
};

}  // namespace

TEST(EgressAddress, LooseIpv4SpellingsAreAddresses) {  // E2
  struct {
    const char* in;
    const char* want;
  } cases[] = {{"2130706433", "127.0.0.1"},
               {"0177.0.0.1", "127.0.0.1"},
               {"0x7f.1", "127.0.0.1"},
               {"127.1", "127.0.0.1"},
               {"0.0.0.0", "0.0.0.0"},
               {"0", "0.0.0.0"},
               {"0xa9.0xfe.0xa9.0xfe", "169.254.169.254"},
               {"169.254.43518", "169.254.169.254"},
               {"0x7f000001", "127.0.0.1"},
               {"10.0.0.1", "10.0.0.1"}};
  for (const auto& c : cases) {
    auto r = parseHostLiteral(c.in);
    ASSERT_TRUE(r) << c.in;
    ASSERT_TRUE(r->has_value()) << c.in;
    EXPECT_EQ((*r)->str(), c.want) << c.in;
  }
}

TEST(EgressAddress, NamesAndMalformedLiterals) {
  EXPECT_FALSE(parseHostLiteral("example.com")->has_value());
  EXPECT_FALSE(parseHostLiteral("0x.example")->has_value());
  EXPECT_FALSE(parseHostLiteral("1.2.3.4.5"));         // numeric last label, not an address
  EXPECT_FALSE(parseHostLiteral("256.1.1.1"));         // out of range
  EXPECT_FALSE(parseHostLiteral("08.1.1.1"));          // 8 is not octal
  EXPECT_FALSE(parseHostLiteral("[fe80::1%25eth0]"));  // E3: zone ids
  EXPECT_FALSE(parseHostLiteral("fe80::1%eth0"));
  EXPECT_FALSE(parseHostLiteral("[::1"));
  EXPECT_EQ((*parseHostLiteral("[::1]"))->str(), "::1");
}

TEST(EgressAddress, EmbeddedIpv4IsUnwrapped) {  // E3
  struct {
    const char* in;
    const char* v4;
  } cases[] = {{"::ffff:a9fe:a9fe", "169.254.169.254"},
               {"::ffff:127.0.0.1", "127.0.0.1"},
               {"64:ff9b::a9fe:a9fe", "169.254.169.254"},
               {"64:ff9b:1::a00:1", "10.0.0.1"},
               {"2002:a9fe:a9fe::1", "169.254.169.254"},
               {"2001:0:4136:e378:8000:63bf:5601:56fe", "169.254.169.1"},
               {"::10.0.0.1", "10.0.0.1"}};
  for (const auto& c : cases) {
    auto e = embeddedIpv4(ip(c.in));
    ASSERT_TRUE(e) << c.in;
    EXPECT_EQ(e->str(), c.v4) << c.in;
  }
  EXPECT_FALSE(embeddedIpv4(ip("2606:4700::1111")));
  EXPECT_FALSE(embeddedIpv4(ip("::1")));
}

TEST(EgressAddress, DefaultDenyList) {  // E1, E3
  Env env;
  for (const char* s : {"0.0.0.0",
                        "10.0.0.1",
                        "100.64.0.1",
                        "127.0.0.1",
                        "169.254.169.254",
                        "172.16.0.1",
                        "172.31.255.255",
                        "192.0.0.8",
                        "192.0.2.1",
                        "192.168.1.1",
                        "198.18.0.1",
                        "198.51.100.1",
                        "203.0.113.9",
                        "224.0.0.1",
                        "240.0.0.1",
                        "255.255.255.255",
                        "::",
                        "::1",
                        "fc00::1",
                        "fd12::1",
                        "fe80::1",
                        "ff02::1",
                        "2001:db8::1",
                        "100::1",
                        "fd00:ec2::254",
                        "::ffff:a9fe:a9fe",
                        "64:ff9b::a9fe:a9fe",
                        "2002:7f00:1::",
                        "::ffff:127.0.0.1"})
    EXPECT_EQ(classify(ip(s), 443, env.facts, env.test_external).cls, AddressClass::kReserved) << s;
  for (const char* s : {"1.1.1.1", "8.8.8.8", "172.32.0.1", "100.128.0.1", "2606:4700::1111", "::ffff:1.1.1.1"})
    EXPECT_EQ(classify(ip(s), 443, env.facts, env.test_external).cls, AddressClass::kPublic) << s;
}

TEST(EgressAddress, LateralTargets) {  // E12
  Env env;
  env.facts.host_addresses = {ip("203.0.114.7")};
  env.facts.sandbox_subnets = {*parseCidr("10.200.0.0/16")};
  env.facts.gateway_listeners = {{ip("0.0.0.0"), 15001}};
  env.test_external = {*parseCidr("10.0.0.0/8")};  // even the test setting does not open these
  EXPECT_EQ(classify(ip("203.0.114.7"), 80, env.facts, env.test_external).cls, AddressClass::kLateral);
  EXPECT_EQ(classify(ip("::ffff:203.0.114.7"), 80, env.facts, env.test_external).cls, AddressClass::kLateral);
  EXPECT_EQ(classify(ip("10.200.3.2"), 80, env.facts, env.test_external).cls, AddressClass::kLateral);
  EXPECT_EQ(classify(ip("1.2.3.4"), 15001, env.facts, env.test_external).cls, AddressClass::kLateral);
  EXPECT_EQ(classify(ip("10.1.2.3"), 80, env.facts, env.test_external).cls, AddressClass::kPublic);
}

TEST(EgressNames, Normalisation) {  // E7
  EXPECT_EQ(*normalizeName("API.Example.COM."), "api.example.com");
  EXPECT_EQ(*normalizeName("bücher.example"), "xn--bcher-kva.example");
  EXPECT_EQ(*normalizeName("xn--bcher-kva.example"), "xn--bcher-kva.example");
  EXPECT_NE(*normalizeName("аpple.com"), "apple.com");  // Cyrillic а: a different name
  for (const char* bad : {"", ".", "a..b", "a b", "a_b.com", "-a.com", "a\x01.com", "example.com..", "xn--zz.com"})
    EXPECT_FALSE(normalizeName(bad)) << bad;
  EXPECT_TRUE(nameMatches("*.example.com", "a.example.com"));
  EXPECT_TRUE(nameMatches("*.example.com", "a.b.example.com"));
  EXPECT_FALSE(nameMatches("*.example.com", "example.com"));
  EXPECT_FALSE(nameMatches("*.example.com", "xexample.com"));
  EXPECT_FALSE(nameMatches("allowed.test", "allowed.test.evil.test"));
  EXPECT_FALSE(nameMatches("allowed.test", "evilallowed.test"));
}

TEST(EgressPolicy, ParseRejectsJunk) {
  for (const char* bad : {R"({"mode":"open"})", R"({"rules":[{"action":"allow"}]})",
                          R"({"rules":[{"action":"allow","domain":"a.com","cidr":"1.0.0.0/8"}]})",
                          R"({"rules":[{"action":"maybe","domain":"a.com"}]})",
                          R"({"rules":[{"action":"allow","domain":"a.com","ports":[0]}]})",
                          R"({"rules":[{"action":"allow","cidr":"10.0.0.0/33"}]})", R"({"extra":1})"})
    EXPECT_FALSE(parsePolicy(nlohmann::json::parse(bad))) << bad;
  Policy p = policy(R"({"mode":"allow-list","rules":[{"action":"allow","domain":"*.Example.COM.","ports":[443]}]})");
  EXPECT_EQ(p.rules[0].domain, "*.example.com");
  EXPECT_EQ(policyToJson(p)["rules"][0]["domain"], "*.example.com");
}

TEST(EgressPolicy, DenyAllIsTheDefault) {
  Env env;
  Policy p;
  EXPECT_FALSE(decideName(p, "example.com", 443).allowed());
  EXPECT_FALSE(decideConnection(p, env.ctx(), "example.com", ip("1.1.1.1"), 443).allowed());
}

TEST(EgressPolicy, AllowListNames) {  // E7
  Env env;
  Policy p = policy(R"({"mode":"allow-list","rules":[
      {"action":"allow","domain":"allowed.test"},
      {"action":"allow","domain":"*.wild.test","ports":[443]},
      {"action":"deny","domain":"bad.wild.test"}]})");
  struct {
    const char* name;
    uint16_t port;
    bool allowed;
  } cases[] = {
      {"allowed.test", 443, true},      {"allowed.test", 80, true},       {"allowed.test.evil.test", 443, false},
      {"evilallowed.test", 443, false}, {"sub.allowed.test", 443, false}, {"wild.test", 443, false},
      {"a.wild.test", 443, true},       {"a.wild.test", 80, false},       {"bad.wild.test", 443, false},
      {"other.test", 443, false}};
  for (const auto& c : cases) {
    EXPECT_EQ(decideName(p, c.name, c.port).allowed(), c.allowed) << c.name << ":" << c.port;
    EXPECT_EQ(decideConnection(p, env.ctx(), c.name, ip("1.1.1.1"), c.port).allowed(), c.allowed) << c.name;
  }
  Decision d = decideName(p, "bad.wild.test", 443);
  EXPECT_EQ(d.rule, "deny domain bad.wild.test");
}

TEST(EgressPolicy, PrivateAddressesDeniedWhateverTheNameRulesSay) {  // E1, E4
  Env env;
  Policy p = policy(R"({"mode":"allow-all-public","rules":[{"action":"allow","domain":"allowed.test"}]})");
  for (const char* a : {"169.254.169.254", "10.0.0.1", "127.0.0.1", "::1", "::ffff:127.0.0.1", "fd00:ec2::254"}) {
    Decision d = decideConnection(p, env.ctx(), "allowed.test", ip(a), 443);
    EXPECT_FALSE(d.allowed()) << a;
    EXPECT_TRUE(d.rule.starts_with("default-deny")) << a << " " << d.rule;
  }
  EXPECT_TRUE(decideConnection(p, env.ctx(), "allowed.test", ip("1.1.1.1"), 443).allowed());
  EXPECT_FALSE(decideConnection(p, env.ctx(), "mail.test", ip("1.1.1.1"), 25).allowed());
  // allow-all-public without a name (transparent, no SNI): E10.
  EXPECT_FALSE(decideConnection(p, env.ctx(), "", ip("1.1.1.1"), 443).allowed());
}

TEST(EgressPolicy, OperatorCidrOverridesReservedButNotLateral) {
  Env env;
  env.facts.sandbox_subnets = {*parseCidr("10.200.0.0/16")};
  Policy p = policy(R"({"mode":"allow-list","rules":[{"action":"allow","cidr":"10.0.0.0/8","ports":[5432]},
                                                     {"action":"allow","cidr":"192.0.2.10","ports":[25]}]})");
  EXPECT_TRUE(decideConnection(p, env.ctx(), "", ip("10.1.2.3"), 5432).allowed());
  EXPECT_FALSE(decideConnection(p, env.ctx(), "", ip("10.1.2.3"), 5433).allowed());
  EXPECT_FALSE(decideConnection(p, env.ctx(), "", ip("10.200.0.2"), 5432).allowed());  // another sandbox
  EXPECT_TRUE(decideConnection(p, env.ctx(), "", ip("192.0.2.10"), 25).allowed());
}

TEST(EgressPolicy, TestExternalSubnetsAreExplicit) {
  Env env;
  Policy p = policy(R"({"mode":"allow-list","rules":[{"action":"allow","domain":"allowed.test"}]})");
  EXPECT_FALSE(decideConnection(p, env.ctx(), "allowed.test", ip("10.99.0.2"), 443).allowed());
  env.test_external = {*parseCidr("10.99.0.0/24")};
  EXPECT_TRUE(decideConnection(p, env.ctx(), "allowed.test", ip("10.99.0.2"), 443).allowed());
  EXPECT_FALSE(decideConnection(p, env.ctx(), "allowed.test", ip("10.99.1.2"), 443).allowed());
}

TEST(EgressPolicy, CidrDenyBeatsEverything) {
  Env env;
  Policy p = policy(R"({"mode":"allow-all-public","rules":[{"action":"deny","cidr":"1.1.1.0/24"}]})");
  EXPECT_FALSE(decideConnection(p, env.ctx(), "one.test", ip("1.1.1.1"), 443).allowed());
  EXPECT_FALSE(decideConnection(p, env.ctx(), "one.test", ip("::ffff:1.1.1.1"), 443).allowed());
  EXPECT_TRUE(decideConnection(p, env.ctx(), "one.test", ip("1.1.2.1"), 443).allowed());
}

TEST(EgressPolicy, TlsInterceptionIsAPolicyChoice) {  // E9
  EXPECT_EQ(policy(R"({"mode":"allow-list"})").tls, TlsMode::kInterceptBound);
  Policy all = policy(R"({"mode":"allow-list","tls":"intercept-all"})");
  EXPECT_EQ(all.tls, TlsMode::kInterceptAll);
  EXPECT_EQ(policyToJson(all)["tls"], "intercept-all");
  EXPECT_EQ(parsePolicy(policyToJson(all))->tls, TlsMode::kInterceptAll);
  EXPECT_EQ(policyToJson(Policy{})["tls"], "intercept-bound");
  for (const char* bad : {R"({"tls":"all"})", R"({"tls":true})", R"({"tls":"INTERCEPT-ALL"})"}) {
    auto p = parsePolicy(nlohmann::json::parse(bad));
    ASSERT_FALSE(p) << bad;
    EXPECT_NE(p.error().message.find("tls"), std::string::npos) << p.error().message;
  }
}

TEST(EgressPolicy, WarnsAboutAllowRulesForSharedCdns) {  // E9's stated limit
  Policy p = policy(R"({"mode":"allow-list","rules":[
      {"action":"allow","domain":"d111abcdef8.cloudfront.net"},
      {"action":"allow","domain":"*.azureedge.net"},
      {"action":"allow","domain":"*.net"},
      {"action":"allow","domain":"myapp.herokuapp.com","ports":[443]},
      {"action":"deny","domain":"x.fastly.net"},
      {"action":"allow","domain":"api.example.com"},
      {"action":"allow","domain":"notcloudfront.net"},
      {"action":"allow","cidr":"1.2.3.0/24"}]})");
  auto w = policyWarnings(p);
  ASSERT_EQ(w.size(), 4u) << nlohmann::json(w).dump();
  EXPECT_NE(w[0].find("d111abcdef8.cloudfront.net"), std::string::npos) << w[0];
  EXPECT_NE(w[0].find("domain fronting"), std::string::npos) << w[0];
  EXPECT_NE(w[0].find("intercept-all"), std::string::npos) << w[0];
  EXPECT_NE(w[1].find("every customer's site on the shared CDN azureedge.net"), std::string::npos) << w[1];
  EXPECT_NE(w[2].find("*.net"), std::string::npos) << w[2];
  EXPECT_NE(w[3].find("herokuapp.com"), std::string::npos) << w[3];
  // Intercepting all TLS holds Host to SNI: naming one site is then no fronting risk; wildcards still are.
  p.tls = TlsMode::kInterceptAll;
  w = policyWarnings(p);
  ASSERT_EQ(w.size(), 2u) << nlohmann::json(w).dump();
  EXPECT_NE(w[0].find("azureedge.net"), std::string::npos);
  EXPECT_TRUE(
      policyWarnings(policy(R"({"mode":"allow-list","rules":[{"action":"allow","domain":"a.test"}]})")).empty());
}

TEST(EgressPolicy, ADeniedPortSaysPortNotReservedRange) {
  Env env;
  env.test_external = {*parseCidr("10.99.0.0/24")};
  Policy p = policy(R"({"mode":"allow-list","rules":[{"action":"allow","cidr":"10.252.77.0/24","ports":[8080]},
                                                     {"action":"allow","domain":"api.test","ports":[443]},
                                                     {"action":"allow","cidr":"10.99.0.2","ports":[8080]}]})");
  Decision reserved = decideConnection(p, env.ctx(), "", ip("10.252.77.2"), 9090);
  EXPECT_FALSE(reserved.allowed());
  EXPECT_NE(reserved.reason.find("port 9090 not allowed"), std::string::npos) << reserved.reason;
  EXPECT_EQ(reserved.rule, "allow cidr 10.252.77.0/24 port 8080");
  Decision external = decideConnection(p, env.ctx(), "", ip("10.99.0.2"), 9090);
  EXPECT_NE(external.reason.find("port 9090 not allowed"), std::string::npos) << external.reason;
  Decision named = decideConnection(p, env.ctx(), "api.test", ip("1.1.1.1"), 80);
  EXPECT_NE(named.reason.find("port 80 not allowed"), std::string::npos) << named.reason;
  Decision by_name = decideName(p, "api.test", 80);
  EXPECT_NE(by_name.reason.find("port 80 not allowed"), std::string::npos) << by_name.reason;
  // Outside every rule the reason stays what it was.
  EXPECT_NE(decideConnection(p, env.ctx(), "", ip("10.1.2.3"), 9090).reason.find("reserved range"), std::string::npos);
  EXPECT_TRUE(decideConnection(p, env.ctx(), "", ip("10.252.77.2"), 8080).allowed());
}
