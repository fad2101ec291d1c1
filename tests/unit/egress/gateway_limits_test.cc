// The gateway's limits against floods and slow clients, on loopback (SECURITY.md E19, E20): absolute
// deadlines for what the gateway waits for before it decides, the connection caps and their reserve, and
// the per-sandbox rates for new connections and DNS queries.
#include <poll.h>
#include <sys/socket.h>

#include <future>

#include "gateway_fixture.h"

using namespace egress_test;
using namespace std::chrono_literals;

namespace {

class EgressGatewayLimits : public EgressGateway {
 protected:
  void tune(GatewayOptions& o) override {
    o.head_deadline = 1000ms;
    o.handshake_timeout = 3000ms;  // a byte every 200 ms never lets this one fire
    o.connections = {.max_total = 6, .max_per_sandbox = 3, .reserve = 2, .reserve_per_sandbox = 1};
    o.connection_rate = {1, 20};
    o.dns_rate = {1, 3};
  }
  void SetUp() override {
    EgressGateway::SetUp();
    for (auto [id, source] : {std::pair{"sb-two", "127.0.0.3/32"}, {"sb-three", "127.0.0.4/32"}}) {
      nlohmann::json sb = {
          {"id", id},
          {"sources", {source}},
          {"policy", {{"mode", "allow-list"}, {"rules", {{{"action", "allow"}, {"domain", "allowed.test"}}}}}}};
      ASSERT_TRUE(handleControl(registry_, *audit_, {{"op", "register"}, {"sandbox", sb}})["ok"].get<bool>());
    }
  }

  // Whether the gateway closed s within ms (EOF or reset); false while it holds the connection open.
  static bool closedWithin(tcp::socket& s, int ms) {
    pollfd p{s.native_handle(), POLLIN, 0};
    if (::poll(&p, 1, ms) != 1) return false;
    char c;
    return ::recv(s.native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT) <= 0;
  }

  // Sends data one byte per period through write (which returns false when the connection is gone), and
  // returns how long the gateway let that go on; nullopt when every byte went out.
  template <class WriteByte, class Cut>
  static std::optional<std::chrono::milliseconds> trickle(const std::string& data, WriteByte write, Cut cut) {
    auto t0 = std::chrono::steady_clock::now();
    for (char ch : data) {
      if (!write(ch)) break;
      std::this_thread::sleep_for(200ms);
      if (cut()) break;
    }
    auto took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
    if (!cut()) return std::nullopt;
    return took;
  }

  uint64_t denials(const std::string& rule) { return audit_->countersByReason()["deny: " + rule]; }

  nlohmann::json gatewayStats() {
    std::promise<nlohmann::json> p;
    asio::post(io_, [&] { p.set_value(gateway_->stats()); });
    return p.get_future().get();
  }

  std::vector<uint8_t> dnsQuery(uint16_t id, const std::string& label) {
    std::vector<uint8_t> m = {uint8_t(id >> 8), uint8_t(id), 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0};
    for (const std::string& l : {label, std::string("test")}) {
      m.push_back(uint8_t(l.size()));
      m.insert(m.end(), l.begin(), l.end());
    }
    m.insert(m.end(), {0, 0, 1, 0, 1});
    return m;
  }
};

}  // namespace

TEST_F(EgressGatewayLimits, AProxyHeadTrickledAByteAtATimeIsCutAtTheDeadline) {  // E20
  tcp::socket s = connectFromSandbox(gateway_->proxyPort());
  std::string head =
      "CONNECT allowed.test:" + std::to_string(upstream_.port()) + " HTTP/1.1\r\nHost: allowed.test\r\n\r\n";
  auto took = trickle(
      head,
      [&](char ch) {
        boost::system::error_code ec;
        asio::write(s, asio::buffer(&ch, 1), ec);
        return !ec;
      },
      [&] { return closedWithin(s, 0); });
  ASSERT_TRUE(took) << "the whole head went out a byte at a time: no absolute deadline";
  EXPECT_LT(*took, 2500ms);  // 1 s deadline; each byte would have renewed the 3 s handshake timeout
  EXPECT_EQ(denials("head-deadline"), 1u) << auditText();
}

TEST_F(EgressGatewayLimits, TransparentFirstBytesTrickledAreCutAtTheDeadline) {  // E20
  original_dst_ = tcp::endpoint(asio::ip::make_address("127.0.0.1"), upstream_.port());
  tcp::socket s = connectFromSandbox(gateway_->transparentPort());
  auto took = trickle(
      "GET / HTTP/1.1\r\nHost: allowed.test\r\nUser-Agent: slow\r\n\r\n",
      [&](char ch) {
        boost::system::error_code ec;
        asio::write(s, asio::buffer(&ch, 1), ec);
        return !ec;
      },
      [&] { return closedWithin(s, 0); });
  ASSERT_TRUE(took);
  EXPECT_LT(*took, 2500ms);
  EXPECT_EQ(denials("head-deadline"), 1u) << auditText();
}

TEST_F(EgressGatewayLimits, ARequestHeadOnARelayedConnectionHasItsOwnDeadline) {  // E20
  Tunnel t = interceptedTunnel();
  std::this_thread::sleep_for(1500ms);  // idle between requests is not a slow head
  bool gone = false;
  auto took = trickle(
      "GET /slow HTTP/1.1\r\nHost: allowed.test\r\nUser-Agent: a slow one\r\n\r\n",
      [&](char ch) {
        boost::system::error_code ec;
        asio::write(*t.tls, asio::buffer(&ch, 1), ec);
        gone = gone || ec;
        return !ec;
      },
      [&] { return gone; });
  ASSERT_TRUE(took);
  EXPECT_LT(*took, 2500ms);
  EXPECT_EQ(upstream_.lastRequest(), "");
  EXPECT_NE(auditText().find("a request head was not complete within 1000 ms"), std::string::npos) << auditText();
}

TEST_F(EgressGatewayLimits, ASandboxAtItsCapLeavesTheReserveToItsNeighbours) {  // E20
  std::vector<tcp::socket> held;
  for (int i = 0; i < 3; ++i) {
    held.push_back(connectFromSandbox(gateway_->proxyPort()));
    EXPECT_FALSE(closedWithin(held.back(), 150)) << i;
  }
  tcp::socket over = connectFromSandbox(gateway_->proxyPort());
  EXPECT_TRUE(closedWithin(over, 2000));
  EXPECT_EQ(denials("connection-limit"), 1u);
  // sb-two's first connection fills the shared part (6 - 2 reserved).
  held.push_back(connectFromSandbox(gateway_->proxyPort(), "127.0.0.3"));
  EXPECT_FALSE(closedWithin(held.back(), 150));
  // The reserve is for sandboxes holding fewer than 1: not for sb-two's second.
  tcp::socket second = connectFromSandbox(gateway_->proxyPort(), "127.0.0.3");
  EXPECT_TRUE(closedWithin(second, 2000));
  EXPECT_EQ(denials("node-connection-limit"), 1u);
  // sb-three holds none: its request goes through.
  tcp::socket neighbour = connectFromSandbox(gateway_->proxyPort(), "127.0.0.4");
  EXPECT_TRUE(connectReply(neighbour, "allowed.test:" + std::to_string(upstream_.port())).starts_with("HTTP/1.1 200"));
  auto stats = gatewayStats();
  EXPECT_EQ(stats["connections"]["by_sandbox"]["sb-test"], 3) << stats.dump();
  EXPECT_EQ(stats["connections"]["active"], 5) << stats.dump();
}

TEST_F(EgressGatewayLimits, NewConnectionsOverTheRateAreClosedAndCounted) {  // E19
  for (int i = 0; i < 25; ++i) {
    tcp::socket s = connectFromSandbox(gateway_->proxyPort(), "127.0.0.4");
  }  // each closed by the client at once
  for (int i = 0; i < 50 && denials("connection-rate-limit") < 4; ++i) std::this_thread::sleep_for(20ms);
  EXPECT_GE(denials("connection-rate-limit"), 4u);  // 20 in the burst, and 1/s (the loop may earn one)
  EXPECT_LE(denials("connection-rate-limit"), 5u);
  // One line written in full for the refusals of an interval, however many there were; the rest count
  // into its "repeated" line (two when an interval ended during the loop).
  size_t full = 0;
  for (const auto& l : audit_->lastLinesForTest()) {
    auto j = nlohmann::json::parse(l);
    if (j["rule"] == "connection-rate-limit" && !j.contains("repeated")) ++full;
  }
  EXPECT_GE(full, 1u);
  EXPECT_LE(full, 2u);
}

TEST_F(EgressGatewayLimits, DnsQueriesOverTheRateAreDroppedAndANeighbourIsStillAnswered) {  // E19
  asio::ip::udp::socket u(client_io_);
  u.open(asio::ip::udp::v4());
  u.bind({asio::ip::make_address("127.0.0.2"), 0});
  asio::ip::udp::endpoint gw(asio::ip::make_address("127.0.0.1"), gateway_->dnsPort());
  for (uint16_t i = 0; i < 10; ++i) u.send_to(asio::buffer(dnsQuery(i, "allowed")), gw);
  auto answers = [&](asio::ip::udp::socket& sock, int wait_ms) {
    int n = 0;
    pollfd p{sock.native_handle(), POLLIN, 0};
    std::vector<uint8_t> buf(512);
    while (::poll(&p, 1, wait_ms) == 1) {
      if (::recv(sock.native_handle(), buf.data(), buf.size(), 0) > 0) ++n;
    }
    return n;
  };
  EXPECT_EQ(answers(u, 500), 3);  // the burst; the others got no answer at all
  EXPECT_EQ(denials("dns-rate-limit"), 7u);
  asio::ip::udp::socket v(client_io_);
  v.open(asio::ip::udp::v4());
  v.bind({asio::ip::make_address("127.0.0.3"), 0});
  v.send_to(asio::buffer(dnsQuery(99, "allowed")), gw);
  EXPECT_EQ(answers(v, 500), 1);
  // The interval's end turns the six drops after the first into one line.
  std::this_thread::sleep_for(1500ms);
  std::string text = auditText();
  EXPECT_NE(text.find("\"repeated\":6"), std::string::npos) << text;
  auto stats = handleControl(registry_, *audit_, {{"op", "stats"}});
  EXPECT_EQ(stats["sandboxes"]["sb-test"]["denials"]["deny: dns-rate-limit"], 7) << stats.dump();
  EXPECT_GE(stats["audit"]["aggregated"].get<uint64_t>(), 6u) << stats.dump();  // and the repeated answers
}
