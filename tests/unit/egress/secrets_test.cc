// Placeholder handling (E13) and response redaction across boundaries (E17).
#include "egress/secrets.h"

#include <gtest/gtest.h>

using namespace space::egress;

namespace {

const std::string kPlaceholder = "space_ph_0123456789abcdef0123456789abcdef";
const std::string kValue = "sk-live-REAL-SECRET-VALUE-42";

std::vector<SecretBinding> secrets(std::string format = "") {
  SecretBinding b;
  b.name = "API_KEY";
  b.placeholder = kPlaceholder;
  b.value = kValue;
  b.hosts = {"api.allowed.test"};
  b.header = "Authorization";
  b.format = format;
  EXPECT_TRUE(validateBinding(b));
  return {b};
}

std::string b64(const std::string& s) {
  static const char* t = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < s.size(); i += 3) {
    uint32_t v = uint8_t(s[i]) << 16 | uint8_t(s[i + 1]) << 8 | uint8_t(s[i + 2]);
    for (int k = 18; k >= 0; k -= 6) out += t[(v >> k) & 63];
  }
  if (i + 1 == s.size()) {
    uint32_t v = uint8_t(s[i]) << 16;
    out += t[(v >> 18) & 63];
    out += t[(v >> 12) & 63];
    out += "==";
  } else if (i + 2 == s.size()) {
    uint32_t v = uint8_t(s[i]) << 16 | uint8_t(s[i + 1]) << 8;
    out += t[(v >> 18) & 63];
    out += t[(v >> 12) & 63];
    out += t[(v >> 6) & 63];
    out += "=";
  }
  return out;
}

space::egress::http::RequestHead head(const std::string& text) {
  auto r = space::egress::http::parseRequestHead(text);
  EXPECT_TRUE(r) << text;
  return *r;
}

}  // namespace

TEST(EgressSecrets, FindsPlaceholderInEveryDisguise) {  // E13
  auto s = secrets();
  std::string pct;
  for (char c : kPlaceholder) pct += fmt::format("%{:02X}", uint8_t(c));
  std::string mixed =
      kPlaceholder.substr(0, 5) + "%" + fmt::format("{:02x}", uint8_t(kPlaceholder[5])) + kPlaceholder.substr(6);
  for (const std::string& text : {kPlaceholder, "x=" + kPlaceholder + "&y", pct, mixed,
                                  "Basic " + b64("user:" + kPlaceholder), "Basic " + b64("u:" + kPlaceholder),
                                  "Basic " + b64("us:" + kPlaceholder), "{\"k\":\"" + b64(kPlaceholder) + "\"}",
                                  std::string("SPACE_PH_0123456789ABCDEF0123456789ABCDEF"), "%25" + pct.substr(1)})
    EXPECT_TRUE(findPlaceholder(text, s)) << text;
  EXPECT_FALSE(findPlaceholder("nothing to see " + kPlaceholder.substr(0, 20), s));
}

TEST(EgressSecrets, ScannerFindsMatchesAcrossFeeds) {
  auto s = secrets();
  std::string body = "prefix " + b64("a:" + kPlaceholder) + " suffix";
  for (size_t split = 1; split < body.size(); ++split) {
    PlaceholderScanner sc(s);
    bool hit = sc.feed(body.substr(0, split)).has_value();
    hit = sc.feed(body.substr(split)).has_value() || hit;
    EXPECT_TRUE(hit) << split;
  }
}

TEST(EgressSecrets, InjectsOnlyInTheDeclaredHeaderOfTheBoundHost) {
  auto s = secrets();
  auto h = head("GET / HTTP/1.1\r\nHost: api.allowed.test\r\nAuthorization: Bearer " + kPlaceholder + "\r\n\r\n");
  auto r = applySecrets(h, "api.allowed.test", s);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(h.find("Authorization")->value, "Bearer " + kValue);
  EXPECT_EQ(r->injected, std::vector<std::string>{"API_KEY"});
}

TEST(EgressSecrets, FormatSetsTheHeaderOutright) {
  auto s = secrets("Bearer {}");
  auto h = head("GET / HTTP/1.1\r\nHost: api.allowed.test\r\nAuthorization: whatever\r\n\r\n");
  ASSERT_TRUE(applySecrets(h, "api.allowed.test", s));
  EXPECT_EQ(h.find("Authorization")->value, "Bearer " + kValue);
  auto other = head("GET / HTTP/1.1\r\nHost: other.test\r\n\r\n");
  ASSERT_TRUE(applySecrets(other, "other.test", s));
  EXPECT_FALSE(other.find("Authorization"));  // E14: another host never gets it
}

TEST(EgressSecrets, RefusesPlaceholdersElsewhere) {  // E13
  auto s = secrets();
  const std::string host = "api.allowed.test";
  struct {
    std::string request;
    std::string to;
  } cases[] = {
      {"GET / HTTP/1.1\r\nHost: evil.test\r\nAuthorization: Bearer " + kPlaceholder + "\r\n\r\n", "evil.test"},
      {"GET /?k=" + kPlaceholder + " HTTP/1.1\r\nHost: " + host + "\r\n\r\n", host},
      {"GET / HTTP/1.1\r\nHost: " + host + "\r\nUser-Agent: " + kPlaceholder + "\r\n\r\n", host},
      {"GET / HTTP/1.1\r\nHost: " + host + "\r\nAuthorization: Basic " + b64("u:" + kPlaceholder) + "\r\n\r\n", host},
      {"GET /%73pace_ph HTTP/1.1\r\nHost: " + host + "\r\nX: %73" + kPlaceholder.substr(1) + "\r\n\r\n", host},
  };
  for (const auto& c : cases) {
    auto h = head(c.request);
    EXPECT_FALSE(applySecrets(h, c.to, s)) << c.request;
  }
}

TEST(EgressSecrets, RedactsValuesAcrossEveryBoundary) {  // E17
  auto s = secrets();
  std::string body = "{\"echo\":\"Bearer " + kValue + "\",\"again\":\"" + kValue + kValue + "\",\"part\":\"sk-live\"}";
  std::string want = "{\"echo\":\"Bearer " + kPlaceholder + "\",\"again\":\"" + kPlaceholder + kPlaceholder +
                     "\",\"part\":\"sk-live\"}";
  for (size_t a = 0; a <= body.size(); a += 3)
    for (size_t b = a; b <= body.size(); b += 7) {
      ValueRedactor r(s);
      std::string out = r.feed(body.substr(0, a));
      out += r.feed(body.substr(a, b - a));
      out += r.feed(body.substr(b));
      out += r.finish();
      ASSERT_EQ(out, want) << a << "," << b;
    }
  space::egress::http::ResponseHead h;
  h.headers = {{"X-Echo", "Bearer " + kValue}};
  redactResponseHead(h, s);
  EXPECT_EQ(h.headers[0].value, "Bearer " + kPlaceholder);
}

TEST(EgressSecrets, ValidatesBindings) {
  SecretBinding b = secrets()[0];
  b.placeholder = "short";
  EXPECT_FALSE(validateBinding(b));
  b = secrets()[0];
  b.value = "a\r\nInjected: 1";
  EXPECT_FALSE(validateBinding(b));
  b = secrets()[0];
  b.format = "Bearer";
  EXPECT_FALSE(validateBinding(b));
}
