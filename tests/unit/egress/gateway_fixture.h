// The gateway in one process, on loopback only, for the gateway's unit tests: a fake upstream resolver,
// an upstream TLS server with a test CA, and clients that bind 127.0.0.2 (the registered "sandbox" source).
#pragma once

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

namespace egress_test {

using namespace space;
using namespace space::egress;
namespace asio = boost::asio;
using asio::ip::tcp;

inline const std::string kPlaceholder = "space_ph_00112233445566778899aabbccddeeff";
inline const std::string kValue = "real-secret-value-7f3a9c";

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
    tune(o);
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

  // A fixture's changes to the gateway's options.
  virtual void tune(GatewayOptions&) {}

  // A TCP connection from the sandbox's address (or another source).
  tcp::socket connectFromSandbox(uint16_t port, const char* source = "127.0.0.2") {
    tcp::socket s(client_io_);
    s.open(tcp::v4());
    s.bind({asio::ip::make_address(source), 0});
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

}  // namespace egress_test
