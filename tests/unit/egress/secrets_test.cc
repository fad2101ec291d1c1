// Placeholder handling (E13) and response redaction across boundaries (E17).
#include "egress/secrets.h"

#include <gtest/gtest.h>

#include "egress/redaction.h"

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

// ------------------------------------------------------------------------------------ encoded echoes (E17)

namespace {

// A value with reserved URL characters and a space, so that "percent-encode only what must be" differs
// from the value as is.
const std::string kReservedValue = "sk/live+REAL=SECRET&x y~42:ok";

std::vector<SecretBinding> reservedSecrets() {
  auto s = secrets();
  s[0].value = kReservedValue;
  EXPECT_TRUE(validateBinding(s[0]));
  return s;
}

std::string b64url(const std::string& s, bool pad) {
  std::string out = b64(s);
  for (char& c : out) c = c == '+' ? '-' : c == '/' ? '_' : c;
  if (!pad) out.erase(out.find_last_not_of('=') + 1);
  return out;
}

std::string unb64(const std::string& s) {
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : s) {
    int v = c >= 'A' && c <= 'Z'   ? c - 'A'
            : c >= 'a' && c <= 'z' ? c - 'a' + 26
            : c >= '0' && c <= '9' ? c - '0' + 52
            : c == '+' || c == '-' ? 62
            : c == '/' || c == '_' ? 63
                                   : -1;
    if (v < 0) break;
    acc = acc << 6 | uint32_t(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += char((acc >> bits) & 0xff);
    }
  }
  return out;
}

std::string hex(const std::string& s, bool upper) {
  std::string out;
  for (char c : s) out += upper ? fmt::format("{:02X}", uint8_t(c)) : fmt::format("{:02x}", uint8_t(c));
  return out;
}

std::string percentAll(const std::string& s, bool upper) {
  std::string out;
  for (char c : s) out += upper ? fmt::format("%{:02X}", uint8_t(c)) : fmt::format("%{:02x}", uint8_t(c));
  return out;
}

// What Python's urllib.parse.quote(s, safe="") and quote_plus do: only bytes outside the unreserved set.
std::string percentReserved(const std::string& s, bool plus_for_space) {
  std::string out;
  for (char c : s) {
    if (isalnum(uint8_t(c)) || c == '-' || c == '.' || c == '_' || c == '~')
      out += c;
    else if (c == ' ' && plus_for_space)
      out += '+';
    else
      out += fmt::format("%{:02X}", uint8_t(c));
  }
  return out;
}

// Redacts text fed in three pieces cut at a and b.
std::string redactSplit(const std::vector<SecretBinding>& s, const std::string& text, size_t a, size_t b) {
  ValueRedactor r(s);
  std::string out = r.feed(text.substr(0, a));
  out += r.feed(text.substr(a, b - a));
  out += r.feed(text.substr(b));
  return out + r.finish();
}

}  // namespace

TEST(EgressRedaction, Base64AtEveryAlignmentMasksExactlyTheValue) {
  auto s = reservedSecrets();
  const std::string mask(kReservedValue.size(), '*');
  // The value at offset 0, 1 and 2 of a 3-byte group, and followed by 0, 1 or 2 bytes of the last group.
  for (const std::string prefix : {"", "B", "Be", "Authorization: Bearer ", "{\"Authorization\": \"Bearer "})
    for (const std::string suffix : {"", "\"", "\"}", "\", \"Host\": \"secret.test\"}"}) {
      const std::string blob = prefix + kReservedValue + suffix;
      for (const std::string& encoded : {b64(blob), b64url(blob, true), b64url(blob, false)}) {
        std::string text = "{\"echo\": \"" + encoded + "\"}";
        std::string out = ValueRedactor(s).redactAll(text);
        ASSERT_EQ(out.size(), text.size()) << text;
        std::string inner = out.substr(10, encoded.size());
        // Everything around the value decodes as it did; the value's bytes, edges included, are masks.
        EXPECT_EQ(unb64(inner), prefix + mask + suffix) << "prefix '" << prefix << "' suffix '" << suffix << "'";
        EXPECT_EQ(out.substr(0, 10) + out.substr(10 + encoded.size()), "{\"echo\": \"\"}");
      }
    }
}

TEST(EgressRedaction, HexAndPercentFormsBecomeThePlaceholder) {
  auto s = reservedSecrets();
  struct {
    std::string form, want;
  } cases[] = {
      {hex(kReservedValue, false), hex(kPlaceholder, false)},
      {hex(kReservedValue, true), hex(kPlaceholder, true)},
      {percentAll(kReservedValue, true), kPlaceholder},
      {percentAll(kReservedValue, false), kPlaceholder},
      {percentReserved(kReservedValue, false), kPlaceholder},
      {percentReserved(kReservedValue, true), kPlaceholder},
      {kReservedValue, kPlaceholder},
  };
  for (const auto& c : cases) {
    std::string text = "X-Echo: [" + c.form + "]";
    EXPECT_EQ(ValueRedactor(s).redactAll(text), "X-Echo: [" + c.want + "]") << c.form;
  }
}

TEST(EgressRedaction, EveryFormIsFoundAcrossEveryFeedBoundary) {
  auto s = reservedSecrets();
  const std::string blob = "Authorization: Bearer " + kReservedValue;
  std::string body = "{\"b64\":\"" + b64(blob) + "\",\"hex\":\"" + hex(kReservedValue, false) + "\",\"pct\":\"" +
                     percentReserved(kReservedValue, true) + "\",\"raw\":\"" + kReservedValue + "\"}";
  std::string whole = ValueRedactor(s).redactAll(body);
  ASSERT_EQ(whole.find(kReservedValue), std::string::npos) << whole;
  for (size_t a = 0; a <= body.size(); a += 5)
    for (size_t b = a; b <= body.size(); b += 11) ASSERT_EQ(redactSplit(s, body, a, b), whole) << a << "," << b;
  // Characters 32.. of the blob encode the value's bytes 2.. ("Authorization: Bearer " is 22 bytes).
  for (const std::string& leaked :
       {b64(blob).substr(32, 16), hex(kReservedValue, false), percentReserved(kReservedValue, true), kReservedValue})
    EXPECT_EQ(whole.find(leaked), std::string::npos) << leaked;
}

TEST(EgressRedaction, ResponseHeadersAreRedactedInEveryForm) {
  auto s = reservedSecrets();
  space::egress::http::ResponseHead h;
  h.headers = {{"X-Echo-B64", b64("Bearer " + kReservedValue)},
               {"X-Echo-Hex", hex(kReservedValue, true)},
               {"X-Echo-Url", "https://a.test/?k=" + percentReserved(kReservedValue, false)}};
  redactResponseHead(h, s);
  EXPECT_EQ(unb64(h.headers[0].value), "Bearer " + std::string(kReservedValue.size(), '*'));
  EXPECT_EQ(h.headers[1].value, hex(kPlaceholder, true));
  EXPECT_EQ(h.headers[2].value, "https://a.test/?k=" + kPlaceholder);
}

TEST(EgressRedaction, LeavesOtherDataAlone) {
  auto s = reservedSecrets();
  // Near misses: a prefix of the value, the base64 of another value, hex of part of it.
  for (const std::string& text :
       {kReservedValue.substr(0, 20), b64("Bearer sk/live+REAL=SECRET&x y~43:ok"), hex(kReservedValue.substr(1), false),
        std::string("plain text with %2F and 0123456789abcdef"), b64(std::string(200, 'z'))})
    EXPECT_EQ(ValueRedactor(s).redactAll(text), text) << text;
}

// ------------------------------------------------------------------------ restriction to methods and paths

TEST(EgressSecrets, RestrictionLimitsInjectionToMethodsAndPathPrefixes) {
  auto s = secrets();
  s[0].methods = {"GET", "POST"};
  s[0].path_prefixes = {"/v1/"};
  ASSERT_TRUE(validateBinding(s[0]));
  const std::string host = "api.allowed.test";
  auto request = [&](const std::string& line) {
    return head(line + " HTTP/1.1\r\nHost: " + host + "\r\nAuthorization: Bearer " + kPlaceholder + "\r\n\r\n");
  };
  for (const char* inside : {"GET /v1/models", "POST /v1/chat?x=1", "GET /v1/", "GET /v1/a/b.json"}) {
    auto h = request(inside);
    auto r = applySecrets(h, host, s);
    ASSERT_TRUE(r) << inside << ": " << r.error().message;
    EXPECT_EQ(h.find("Authorization")->value, "Bearer " + kValue) << inside;
  }
  for (const char* outside :
       {"DELETE /v1/models", "get /v1/models", "GET /admin", "GET /v1", "GET /v2/v1/", "GET /v1/../admin",
        "GET /v1/%2e%2e/admin", "GET /v1/%2E%2e/admin", "GET /v1/..;/admin", "GET /v1/.%2e/admin", "GET /v1%2f../admin",
        "GET /v1/\\../admin", "GET /v1/./x", "OPTIONS *"}) {
    auto h = request(outside);
    auto r = applySecrets(h, host, s);
    ASSERT_FALSE(r) << outside;
    EXPECT_NE(r.error().message.find("outside its methods GET,POST; paths /v1/"), std::string::npos)
        << r.error().message;
    EXPECT_EQ(h.find("Authorization")->value, "Bearer " + kPlaceholder) << outside;
  }
}

TEST(EgressSecrets, RestrictedFormatSecretIsNotSetOutsideItsRequests) {
  auto s = secrets("Bearer {}");
  s[0].methods = {"GET"};
  auto inside = head("GET /x HTTP/1.1\r\nHost: api.allowed.test\r\n\r\n");
  ASSERT_TRUE(applySecrets(inside, "api.allowed.test", s));
  EXPECT_EQ(inside.find("Authorization")->value, "Bearer " + kValue);
  auto outside = head("POST /x HTTP/1.1\r\nHost: api.allowed.test\r\nContent-Length: 0\r\n\r\n");
  auto r = applySecrets(outside, "api.allowed.test", s);
  ASSERT_TRUE(r);  // nothing to refuse: it carries no placeholder, and gets no credential
  EXPECT_FALSE(outside.find("Authorization"));
  EXPECT_TRUE(r->injected.empty());
}

TEST(EgressSecrets, ValidatesRestrictions) {
  for (const std::vector<std::string>& bad :
       std::vector<std::vector<std::string>>{{"get"}, {""}, {"GET POST"}, {"G3T"}, {std::string(21, 'A')}}) {
    SecretBinding b = secrets()[0];
    b.methods = bad;
    EXPECT_FALSE(validateBinding(b)) << bad[0];
  }
  for (const char* bad : {"v1/", "", "/v1/../", "/v1/?x", "/v1/#", "/v1 /", "/v1/%2e", "/a\\b", "/./"}) {
    SecretBinding b = secrets()[0];
    b.path_prefixes = {bad};
    auto st = validateBinding(b);
    ASSERT_FALSE(st) << bad;
    EXPECT_NE(st.error().message.find("path prefix"), std::string::npos) << st.error().message;
  }
  SecretBinding b = secrets()[0];
  b.methods = {"GET", "PATCH"};
  b.path_prefixes = {"/v1/", "/upload"};
  EXPECT_TRUE(validateBinding(b));
  EXPECT_EQ(b.describeRestriction(), "methods GET,PATCH; paths /v1/,/upload");
}
