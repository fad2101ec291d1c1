// The gateway end to end, in one process, on loopback only: a fake upstream resolver, an upstream TLS
// server with a test CA, and clients that bind 127.0.0.2 (the registered "sandbox" source).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "egress/asio.h"
#include "egress/audit.h"
#include "egress/control.h"
#include "egress/dns_message.h"
#include "egress/proxy.h"
#include "egress/resolver.h"

using namespace space;
using namespace space::egress;
namespace asio = boost::asio;
using asio::ip::tcp;

namespace {

const std::string kPlaceholder = "space_ph_00112233445566778899aabbccddeeff";
const std::string kValue = "real-secret-value-7f3a9c";

class FakeResolver : public Resolver {
 public:
  std::map<std::string, std::vector<IpAddress>> answers;
  std::vector<std::string> asked;
  std::mutex mu;
  void resolve(const std::string& name, std::function<void(Result<Resolution>)> done) override {
    std::vector<IpAddress> a;
    {
      std::lock_guard lock(mu);
      asked.push_back(name);
      auto it = answers.find(name);
      if (it == answers.end()) {
        done(makeError(ErrorKind::kNotFound, "NXDOMAIN {}", name));
        return;
      }
      a = it->second;
    }
    done(Resolution{a, std::chrono::seconds(0)});  // TTL 0: the pin must hold anyway (E5)
  }
  std::vector<std::string> askedNames() {
    std::lock_guard lock(mu);
    return asked;
  }
};

// An HTTPS upstream that echoes the request head back in the body and the Authorization header in a
// response header: the reflecting server of E17.
class EchoUpstream {
 public:
  EchoUpstream() : ctx_(asio::ssl::context::tls_server) {
    ca_ = *tls::CertAuthority::generate("upstream-test-ca");
    auto leaf = *ca_->serverContext("allowed.test");
    SSL_CTX_up_ref(leaf.get());
    server_ctx_ = std::make_unique<asio::ssl::context>(leaf.get());
    acceptor_.open(tcp::v4());
    acceptor_.bind({asio::ip::make_address("127.0.0.1"), 0});
    acceptor_.listen();
    ca_file_ = ::testing::TempDir() + "/egress-upstream-ca.pem";
    std::ofstream(ca_file_) << ca_->certPem();
    thread_ = std::thread([this] { run(); });
  }
  ~EchoUpstream() {
    stop_ = true;
    boost::system::error_code ec;
    tcp::socket s(io_);
    s.connect(acceptor_.local_endpoint(), ec);  // wake accept()
    thread_.join();
  }
  uint16_t port() const { return acceptor_.local_endpoint().port(); }
  const std::string& caFile() const { return ca_file_; }
  std::string lastRequest() {
    std::lock_guard lock(mu_);
    return last_;
  }

 private:
  void run() {
    while (!stop_) {
      tcp::socket s(io_);
      boost::system::error_code ec;
      acceptor_.accept(s, ec);
      if (ec || stop_) return;
      asio::ssl::stream<tcp::socket&> tls(s, *server_ctx_);
      tls.handshake(asio::ssl::stream_base::server, ec);
      if (ec) continue;
      std::string buf;
      while (buf.find("\r\n\r\n") == std::string::npos) {
        char tmp[4096];
        size_t n = tls.read_some(asio::buffer(tmp), ec);
        if (ec) break;
        buf.append(tmp, n);
      }
      if (ec) continue;
      {
        std::lock_guard lock(mu_);
        last_ = buf;
      }
      std::string auth;
      if (auto p = buf.find("Authorization: "); p != std::string::npos)
        auth = buf.substr(p + 15, buf.find("\r\n", p) - p - 15);
      std::string body = "you sent:\n" + buf;
      std::string resp = "HTTP/1.1 200 OK\r\nX-Echo-Auth: " + auth +
                         "\r\nContent-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
      asio::write(tls, asio::buffer(resp), ec);
      tls.shutdown(ec);
    }
  }

  asio::io_context io_;
  tcp::acceptor acceptor_{io_};
  std::shared_ptr<tls::CertAuthority> ca_;
  asio::ssl::context ctx_;
  std::unique_ptr<asio::ssl::context> server_ctx_;
  std::string ca_file_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::string last_;
};

class EgressGateway : public ::testing::Test {
 protected:
  void SetUp() override {
    resolver_.answers["allowed.test"] = {*parseIp("127.0.0.1")};
    resolver_.answers["private.test"] = {
        *parseIp("10.0.0.1"), *parseIp("::ffff:127.0.0.9")};  // E4 (127.0.0.1 is this test's "external" upstream)
    resolver_.answers["mixed.test"] = {*parseIp("169.254.169.254"), *parseIp("127.0.0.1")};  // E6
    audit_ = *Audit::open("");
    cache_ = std::make_unique<NameCache>(resolver_);
    nlohmann::json sb = {{"id", "sb-test"},
                         {"sources", {"127.0.0.2/32"}},
                         {"policy",
                          {{"mode", "allow-list"},
                           {"rules",
                            {{{"action", "allow"}, {"domain", "allowed.test"}},
                             {{"action", "allow"}, {"domain", "private.test"}},
                             {{"action", "allow"}, {"domain", "mixed.test"}}}}}},
                         {"secrets",
                          {{{"name", "API_KEY"},
                            {"placeholder", kPlaceholder},
                            {"value", kValue},
                            {"hosts", {"allowed.test"}},
                            {"header", "Authorization"}}}}};
    auto reply = handleControl(registry_, *audit_, {{"op", "register"}, {"sandbox", sb}});
    ASSERT_TRUE(reply["ok"].get<bool>()) << reply.dump();
    sandbox_ca_ = reply["ca_cert_pem"];

    GatewayOptions o;
    o.transparent_listen = "127.0.0.1:0";
    o.proxy_listen = "127.0.0.1:0";
    o.dns_listen = "127.0.0.1:0";
    o.upstream_ca_file = upstream_.caFile();
    o.test_external_subnets = {*parseCidr("127.0.0.1/32")};
    o.handshake_timeout = std::chrono::milliseconds(3000);
    o.original_destination = [this](tcp::socket&) -> Result<tcp::endpoint> { return original_dst_; };
    auto g = Gateway::create(io_, registry_, *cache_, *audit_, o);
    ASSERT_TRUE(g) << g.error().message;
    gateway_ = std::move(*g);
    thread_ = std::thread([this] { io_.run(); });
  }
  void TearDown() override {
    // Let every session end on its own (the clients are gone), so no coroutine frame outlives its objects.
    asio::post(io_, [this] { gateway_->stop(); });
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!io_.stopped() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ASSERT_TRUE(io_.stopped()) << "gateway sessions did not wind down";
    if (thread_.joinable()) thread_.join();
  }

  // A TCP connection from the sandbox's address.
  tcp::socket connectFromSandbox(uint16_t port) {
    tcp::socket s(client_io_);
    s.open(tcp::v4());
    s.bind({asio::ip::make_address("127.0.0.2"), 0});
    s.connect({asio::ip::make_address("127.0.0.1"), port});
    return s;
  }
  template <class Stream>
  static std::string readAll(Stream& s) {
    std::string out;
    boost::system::error_code ec;
    char buf[4096];
    while (true) {
      size_t n = s.read_some(asio::buffer(buf), ec);
      if (ec) break;
      out.append(buf, n);
    }
    return out;
  }
  std::string connectReply(tcp::socket& s, const std::string& target) {
    std::string req = "CONNECT " + target + " HTTP/1.1\r\nHost: " + target + "\r\n\r\n";
    asio::write(s, asio::buffer(req));
    std::string out;
    boost::system::error_code ec;
    while (out.find("\r\n\r\n") == std::string::npos) {
      char c[1];
      if (s.read_some(asio::buffer(c), ec) == 0 || ec) break;
      out += c[0];
    }
    return out;
  }
  std::string auditText() {
    std::string all;
    for (const auto& l : audit_->lastLinesForTest()) all += l + "\n";
    return all;
  }
  std::unique_ptr<asio::ssl::context> sandboxTrust() {
    auto ctx = std::make_unique<asio::ssl::context>(asio::ssl::context::tls_client);
    ctx->add_certificate_authority(asio::buffer(sandbox_ca_));
    ctx->set_verify_mode(asio::ssl::verify_peer);
    return ctx;
  }

  // A CONNECT tunnel to allowed.test (its secret makes it intercepted) and the sandbox's TLS through it,
  // trusting only the sandbox's CA: the handshake succeeding means the gateway intercepted.
  struct Tunnel {
    std::unique_ptr<tcp::socket> sock;
    std::unique_ptr<asio::ssl::context> trust;
    std::unique_ptr<asio::ssl::stream<tcp::socket&>> tls;
  };
  Tunnel interceptedTunnel() {
    Tunnel t;
    t.sock = std::make_unique<tcp::socket>(connectFromSandbox(gateway_->proxyPort()));
    EXPECT_TRUE(connectReply(*t.sock, "allowed.test:" + std::to_string(upstream_.port())).starts_with("HTTP/1.1 200"));
    t.trust = sandboxTrust();
    t.tls = std::make_unique<asio::ssl::stream<tcp::socket&>>(*t.sock, *t.trust);
    SSL_set_tlsext_host_name(t.tls->native_handle(), "allowed.test");
    SSL_set1_host(t.tls->native_handle(), "allowed.test");
    t.tls->handshake(asio::ssl::stream_base::client);
    return t;
  }

  EchoUpstream upstream_;
  FakeResolver resolver_;
  std::unique_ptr<Audit> audit_;
  std::unique_ptr<NameCache> cache_;
  Registry registry_;
  std::string sandbox_ca_;
  asio::io_context io_;
  asio::io_context client_io_;
  std::unique_ptr<Gateway> gateway_;
  std::thread thread_;
  tcp::endpoint original_dst_;
};

}  // namespace

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
  std::string req = "POST /body-blocked HTTP/1.1\r\nHost: allowed.test\r\nContent-Length: " +
                    std::to_string(body.size()) + "\r\n\r\n" + body.substr(0, 6);
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
