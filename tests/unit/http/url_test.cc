// Request-target parsing: decoding, repeated keys, bad escapes, endpoints.
#include "http/url.h"

#include <gtest/gtest.h>

#include <vector>

#include "http/base64.h"

namespace space::http {
namespace {

TEST(Url, ParsesPathAndQuery) {
  auto t = parseTarget("/v1/sandboxes?label=a%3Db&label=c=d&state=running&flag");
  ASSERT_TRUE(t);
  EXPECT_EQ(t->path, "/v1/sandboxes");
  ASSERT_EQ(t->query.size(), 4u);
  EXPECT_EQ(t->query[0].second, "a=b");
  EXPECT_EQ(t->query[1].second, "c=d");
  EXPECT_EQ(t->query[3].first, "flag");
  EXPECT_EQ(parseTarget("/files?path=/a+b%20c")->query[0].second, "/a b c");
}

TEST(Url, RejectsBadInput) {
  EXPECT_FALSE(parseTarget("relative"));
  EXPECT_FALSE(parseTarget(""));
  EXPECT_FALSE(parseTarget("/a%2"));
  EXPECT_FALSE(parseTarget("/a%zz"));
  EXPECT_FALSE(parseTarget("/a?path=%00"));
  std::string many = "/?";
  for (int i = 0; i < 100; ++i) many += "a=1&";
  EXPECT_FALSE(parseTarget(many));
}

TEST(Url, RoundTripsEncoding) {
  std::string raw = "/root/a b&c=d%e";
  auto t = parseTarget("/x?path=" + percentEncode(raw));
  ASSERT_TRUE(t);
  EXPECT_EQ(t->query[0].second, raw);
}

TEST(Url, Endpoints) {
  auto u = parseEndpoint("unix:///run/space/spaced.sock");
  ASSERT_TRUE(u);
  EXPECT_TRUE(u->is_unix);
  EXPECT_EQ(u->path, "/run/space/spaced.sock");
  auto h = parseEndpoint("http://10.0.0.5:7070/");
  ASSERT_TRUE(h);
  EXPECT_FALSE(h->is_unix);
  EXPECT_EQ(h->host, "10.0.0.5");
  EXPECT_EQ(h->port, "7070");
  EXPECT_FALSE(parseEndpoint("ftp://x"));
  EXPECT_FALSE(parseEndpoint("http://nohost"));
  EXPECT_FALSE(parseEndpoint("unix://relative"));
}

TEST(Base64, RoundTrip) {
  for (const std::string& s : std::vector<std::string>{"", "a", "ab", "abc", "abcd", std::string("\0\xff\x10", 3)}) {
    EXPECT_EQ(*base64Decode(base64Encode(s)), s);
  }
  EXPECT_EQ(base64Encode("hello\n"), "aGVsbG8K");
  EXPECT_FALSE(base64Decode("a!b"));
}

}  // namespace
}  // namespace space::http
