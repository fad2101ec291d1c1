// Request strictness (E15) and URL tricks (E8).
#include "egress/http_parse.h"

#include <gtest/gtest.h>

using namespace space::egress::http;

TEST(EgressHttp, ParsesAPlainRequest) {
  auto r = parseRequestHead("POST /a?b=c HTTP/1.1\r\nHost: api.test\r\nContent-Length: 5\r\nX:  y \r\n\r\n");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->method, "POST");
  EXPECT_EQ(r->target, "/a?b=c");
  EXPECT_EQ(r->framing.kind, BodyKind::kLength);
  EXPECT_EQ(r->framing.length, 5u);
  EXPECT_EQ(r->find("x")->value, "y");
  auto chunked = parseRequestHead("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n");
  ASSERT_TRUE(chunked);
  EXPECT_EQ(chunked->framing.kind, BodyKind::kChunked);
}

TEST(EgressHttp, RejectsSmuggling) {  // E15
  const char* bad[] = {
      "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: a\r\nX-A: b\r\n folded\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: a\r\nX-A: b\rc\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: a\r\nX-A: b\nX-B: c\r\n\r\n",
      "GET / HTTP/1.1\nHost: a\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: a\r\nX-A: b\x01\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: a\r\nContent-Length: +5\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
      "GET / HTTP/1.1\r\nHost : a\r\n\r\n",
      "GET / HTTP/1.1\r\n\r\n",
      "GET  / HTTP/1.1\r\nHost: a\r\n\r\n",
      "GET / HTTP/2.0\r\nHost: a\r\n\r\n",
      "GET /\x7f HTTP/1.1\r\nHost: a\r\n\r\n",
  };
  for (const char* b : bad) EXPECT_FALSE(parseRequestHead(b)) << b;
}

TEST(EgressHttp, AbsoluteTargets) {  // E8
  auto t = parseAbsoluteTarget("http://Allowed.test:8080/p?q=1");
  ASSERT_TRUE(t);
  EXPECT_EQ(t->authority.host, "Allowed.test");
  EXPECT_EQ(t->authority.port, 8080);
  EXPECT_EQ(t->origin_form, "/p?q=1");
  EXPECT_EQ(parseAbsoluteTarget("http://a.test")->origin_form, "/");
  EXPECT_EQ(parseAbsoluteTarget("http://a.test?x")->origin_form, "/?x");
  for (const char* bad :
       {"http://allowed.test@evil.test/", "http://evil.test#@allowed.test/", "http://evil.test\\@allowed.test/",
        "http://allowed.test%2eevil.test/", "http://evil.test%23@allowed.test/", "https://allowed.test/", "ftp://a/",
        "http://a.test:0/", "http://a.test:99999/", "http://[::1/", "http://a_b.test/", "http:/a.test/", "http://:80/"})
    EXPECT_FALSE(parseAbsoluteTarget(bad)) << bad;
}

TEST(EgressHttp, Authorities) {
  EXPECT_EQ(parseAuthority("a.test:443", 0)->port, 443);
  EXPECT_FALSE(parseAuthority("a.test", 0));  // CONNECT needs a port
  EXPECT_EQ(parseAuthority("a.test", 80)->port, 80);
  auto v6 = parseAuthority("[::1]:443", 0);
  ASSERT_TRUE(v6);
  EXPECT_TRUE(v6->bracketed);
  EXPECT_EQ(v6->host, "::1");
  EXPECT_FALSE(parseAuthority("[fe80::1%eth0]:443", 0));
  EXPECT_FALSE(parseAuthority("a.test:44x", 0));
}

TEST(EgressHttp, ChunkedDecoderAcrossFeeds) {
  std::string body = "4\r\nWiki\r\n5;ext=1\r\npedia\r\n0\r\nX-T: 1\r\n\r\nNEXT";
  for (size_t split = 0; split <= body.size(); ++split) {
    ChunkedDecoder d;
    std::string out;
    auto a = d.feed(body.substr(0, split), &out);
    ASSERT_TRUE(a);
    size_t used = *a;
    if (!d.done()) {
      auto b = d.feed(std::string_view(body).substr(used), &out);
      ASSERT_TRUE(b);
      used += *b;
    }
    ASSERT_TRUE(d.done());
    EXPECT_EQ(body.substr(used), "NEXT") << split;
    EXPECT_TRUE(out.starts_with("Wikipedia")) << split;
  }
  ChunkedDecoder bad;
  std::string out;
  EXPECT_FALSE(bad.feed("zz\r\n", &out));
  ChunkedDecoder bad2;
  EXPECT_FALSE(bad2.feed("3\r\nabcX", &out));
}

TEST(EgressHttp, ResponseFraming) {
  auto r = parseResponseHead("HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n", "GET");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->framing.kind, BodyKind::kLength);
  EXPECT_EQ(parseResponseHead("HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n", "HEAD")->framing.kind, BodyKind::kNone);
  EXPECT_EQ(parseResponseHead("HTTP/1.1 200 OK\r\n\r\n", "GET")->framing.kind, BodyKind::kUntilClose);
  EXPECT_EQ(parseResponseHead("HTTP/1.1 204 No Content\r\n\r\n", "GET")->framing.kind, BodyKind::kNone);
  EXPECT_FALSE(parseResponseHead("HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", "GET"));
}
