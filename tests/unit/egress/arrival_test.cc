// The arrival check (SECURITY.md V8): a sandbox's source address counts only when it arrived on the link
// registered for it. On loopback every packet arrives on "lo", so a sandbox registered on "lo" is
// served, and one registered on any other link is an unknown sender, for DNS (IP_PKTINFO) and for TCP
// (IP_PKTOPTIONS of the accepted connection) alike.
#include <net/if.h>

#include <future>

#include "gateway_fixture.h"

namespace egress_test {
namespace {

TEST(EgressRegistry, SenderNeedsItsLink) {
  Registry reg;
  auto audit = *Audit::open("");
  nlohmann::json on_lo = {{"id", "a"}, {"sources", {"10.200.0.4/30"}}, {"link", "lo"}};
  nlohmann::json elsewhere = {{"id", "b"}, {"sources", {"10.200.0.8/30"}}, {"link", "spcnosuchlink"}};
  nlohmann::json unlinked = {{"id", "c"}, {"sources", {"10.200.0.12/30"}}};
  for (const auto& sb : {on_lo, elsewhere, unlinked})
    ASSERT_TRUE(handleControl(reg, *audit, {{"op", "register"}, {"sandbox", sb}})["ok"].get<bool>()) << sb.dump();
  int lo = int(if_nametoindex("lo"));
  ASSERT_GT(lo, 0);
  auto a = reg.sender(*parseIp("10.200.0.6"), lo);
  ASSERT_TRUE(a.sb);
  EXPECT_EQ(a.sb->id, "a");
  auto wrong = reg.sender(*parseIp("10.200.0.6"), lo + 100000);  // a's address, another interface
  EXPECT_FALSE(wrong.sb);
  EXPECT_TRUE(wrong.wrong_link);
  EXPECT_TRUE(reg.sender(*parseIp("10.200.0.6"), 0).wrong_link) << "an unknown arrival matches no link";
  EXPECT_TRUE(reg.sender(*parseIp("10.200.0.10"), lo).wrong_link) << "b's link does not exist";
  EXPECT_EQ(reg.sender(*parseIp("10.200.0.14"), 0).sb->id, "c") << "no link registered: the source decides";
  auto stranger = reg.sender(*parseIp("10.200.0.20"), lo);
  EXPECT_FALSE(stranger.sb);
  EXPECT_FALSE(stranger.wrong_link);
  auto got = handleControl(reg, *audit, {{"op", "get"}, {"id", "a"}});
  EXPECT_EQ(got["link"], "lo");
}

TEST(EgressRegistry, LinkMustBeAnInterfaceName) {
  Registry reg;
  auto audit = *Audit::open("");
  for (const nlohmann::json& link : {nlohmann::json(""), nlohmann::json("a/b"), nlohmann::json("x y"),
                                     nlohmann::json("sixteen-bytes-xx"), nlohmann::json(7)}) {
    nlohmann::json sb = {{"id", "a"}, {"sources", {"10.200.0.4/30"}}, {"link", link}};
    auto reply = handleControl(reg, *audit, {{"op", "register"}, {"sandbox", sb}});
    EXPECT_FALSE(reply["ok"].get<bool>()) << link.dump();
  }
}

class EgressArrival : public EgressGateway {
 protected:
  void SetUp() override {
    EgressGateway::SetUp();
    // 127.0.0.3 on its own link (lo, where loopback packets arrive); 127.0.0.4 claims a link that is not
    // where its packets arrive: a neighbour's address sent from the wrong link.
    for (const auto& [id, src, link] :
         {std::tuple{"sb-lo", "127.0.0.3/32", "lo"}, std::tuple{"sb-neighbour", "127.0.0.4/32", "spcnosuchlink"}}) {
      nlohmann::json sb = {{"id", id}, {"sources", {src}}, {"link", link}};
      auto reply = handleControl(registry_, *audit_, {{"op", "register"}, {"sandbox", sb}});
      ASSERT_TRUE(reply["ok"].get<bool>()) << reply.dump();
    }
  }
  // One DNS query from `source`; the answer's rcode, or -1 when no answer came within a second.
  int dnsFrom(const char* source) {
    asio::ip::udp::socket u(client_io_);
    u.open(asio::ip::udp::v4());
    u.bind({asio::ip::make_address(source), 0});
    timeval tv{1, 0};
    setsockopt(u.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    std::vector<uint8_t> m = {0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0};
    for (std::string l : {"allowed", "test"}) {
      m.push_back(uint8_t(l.size()));
      m.insert(m.end(), l.begin(), l.end());
    }
    m.insert(m.end(), {0, 0, 1, 0, 1});
    u.send_to(asio::buffer(m), asio::ip::udp::endpoint(asio::ip::make_address("127.0.0.1"), gateway_->dnsPort()));
    uint8_t out[512];
    ssize_t n = recv(u.native_handle(), out, sizeof out, 0);
    return n >= 4 ? out[3] & 0x0f : -1;
  }
  nlohmann::json stats() {
    std::promise<nlohmann::json> p;
    asio::post(io_, [&] { p.set_value(gateway_->stats()); });
    return p.get_future().get();
  }
  std::vector<nlohmann::json> auditLines() {
    std::vector<nlohmann::json> out;
    for (const auto& l : audit_->lastLinesForTest()) out.push_back(nlohmann::json::parse(l));
    return out;
  }
};

TEST_F(EgressArrival, DnsFromTheRightLinkIsAnswered) {
  EXPECT_EQ(dnsFrom("127.0.0.3"), dns::kNxDomain);  // answered (its policy allows nothing)
  EXPECT_EQ(stats()["wrong_link"], 0);
}

TEST_F(EgressArrival, DnsFromTheWrongLinkIsNobodys) {
  EXPECT_EQ(dnsFrom("127.0.0.4"), -1) << "no answer to a wrong-link query";
  EXPECT_EQ(stats()["wrong_link"], 1);
  bool seen = false;
  for (const auto& l : auditLines()) {
    if (l.value("kind", "") != "control") EXPECT_NE(l.value("sandbox", ""), "sb-neighbour") << l.dump();
    if (l.value("rule", "") == "wrong-link" && l.value("kind", "") == "dns") {
      seen = true;
      EXPECT_EQ(l.value("source", ""), "127.0.0.4");
      EXPECT_NE(l.value("reason", "").find("interface lo"), std::string::npos) << l.dump();
    }
  }
  EXPECT_TRUE(seen) << auditText();
}

TEST_F(EgressArrival, TcpFromTheWrongLinkIsNobodys) {
  auto s = connectFromSandbox(gateway_->proxyPort(), "127.0.0.4");
  asio::write(s, asio::buffer(std::string("CONNECT allowed.test:443 HTTP/1.1\r\nHost: allowed.test\r\n\r\n")));
  EXPECT_EQ(readAll(s), "") << "closed at accept";
  auto right = connectFromSandbox(gateway_->proxyPort(), "127.0.0.3");
  EXPECT_TRUE(connectReply(right, "allowed.test:443").starts_with("HTTP/1.1 403")) << "served (and denied by policy)";
  EXPECT_EQ(stats()["wrong_link"], 1);
  bool seen = false;
  for (const auto& l : auditLines()) {
    if (l.value("kind", "") != "control") EXPECT_NE(l.value("sandbox", ""), "sb-neighbour") << l.dump();
    seen = seen || (l.value("rule", "") == "wrong-link" && l.value("kind", "") == "connect");
  }
  EXPECT_TRUE(seen) << auditText();
}

}  // namespace
}  // namespace egress_test
