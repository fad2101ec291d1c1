#include "egress/client_hello.h"

#include <gtest/gtest.h>
#include <openssl/ssl.h>

#include <string>
#include <vector>

using namespace space::egress;

namespace {

// The first flight of a real OpenSSL client, captured from a memory BIO.
std::vector<uint8_t> realClientHello(const char* sni) {
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  SSL* ssl = SSL_new(ctx);
  BIO* rbio = BIO_new(BIO_s_mem());
  BIO* wbio = BIO_new(BIO_s_mem());
  SSL_set_bio(ssl, rbio, wbio);
  if (sni) SSL_set_tlsext_host_name(ssl, sni);
  SSL_connect(ssl);
  std::vector<uint8_t> out(BIO_ctrl_pending(wbio));
  BIO_read(wbio, out.data(), int(out.size()));
  SSL_free(ssl);
  SSL_CTX_free(ctx);
  return out;
}

}  // namespace

TEST(EgressClientHello, ReadsSniFromARealClient) {
  auto bytes = realClientHello("Allowed.Test");
  ASSERT_TRUE(tls::looksLikeTls(bytes));
  auto r = tls::parseClientHello(bytes);
  ASSERT_TRUE(r) << r.error().message;
  ASSERT_EQ(r->state, tls::ParseState::kDone);
  EXPECT_EQ(r->hello.server_name.value_or(""), "Allowed.Test");
}

TEST(EgressClientHello, NoSni) {
  auto r = tls::parseClientHello(realClientHello(nullptr));
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->hello.server_name);
}

TEST(EgressClientHello, NeedsMoreUntilComplete) {
  auto bytes = realClientHello("allowed.test");
  for (size_t n : {size_t(0), size_t(3), size_t(5), size_t(40), bytes.size() - 1}) {
    auto r = tls::parseClientHello(std::span<const uint8_t>(bytes.data(), n));
    ASSERT_TRUE(r) << n;
    EXPECT_EQ(r->state, tls::ParseState::kNeedMore) << n;
  }
}

TEST(EgressClientHello, SplitAcrossRecords) {
  auto one = realClientHello("allowed.test");
  size_t body = one.size() - 5, first = body / 2;
  std::vector<uint8_t> two = {0x16, 0x03, 0x01, uint8_t(first >> 8), uint8_t(first)};
  two.insert(two.end(), one.begin() + 5, one.begin() + 5 + first);
  size_t second = body - first;
  two.insert(two.end(), {0x16, 0x03, 0x01, uint8_t(second >> 8), uint8_t(second)});
  two.insert(two.end(), one.begin() + 5 + first, one.end());
  auto r = tls::parseClientHello(two);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->hello.server_name.value_or(""), "allowed.test");
}

TEST(EgressClientHello, RejectsGarbageAndTampering) {  // E10
  std::string http = "GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n";
  EXPECT_FALSE(
      tls::parseClientHello(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(http.data()), http.size())));
  auto bytes = realClientHello("allowed.test");
  auto wrong_type = bytes;
  wrong_type[5] = 2;  // ServerHello
  EXPECT_FALSE(tls::parseClientHello(wrong_type));
  auto bad_len = bytes;
  bad_len[8] ^= 0x01;  // handshake length no longer matches the body
  auto r = tls::parseClientHello(bad_len);
  EXPECT_TRUE(!r || r->state == tls::ParseState::kNeedMore);
  auto zero = bytes;
  zero[3] = 0;
  zero[4] = 0;
  EXPECT_FALSE(tls::parseClientHello(zero));
}
