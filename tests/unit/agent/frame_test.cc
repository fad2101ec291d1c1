#include "agent/protocol/frame.h"

#include <gtest/gtest.h>

#include <random>

#include "agent/protocol/message.h"

namespace space::protocol {
namespace {

TEST(FrameTest, RoundTripInAnyChunking) {
  std::vector<Frame> frames = {
      {FrameType::kHello, 0, R"({"version":1})"},
      {FrameType::kDataOut, 7, std::string(100000, 'x')},
      {FrameType::kCredit, 7, encodeCredit(12345)},
      {FrameType::kEofIn, 9, ""},
  };
  std::string wire;
  for (const auto& f : frames) encodeFrame(f, wire);
  for (size_t chunk : {size_t{1}, size_t{3}, size_t{9}, size_t{4096}, wire.size()}) {
    Decoder d;
    std::vector<Frame> got;
    for (size_t i = 0; i < wire.size(); i += chunk) {
      d.feed(std::string_view(wire).substr(i, chunk));
      for (;;) {
        auto f = d.next();
        ASSERT_TRUE(f.has_value());
        if (!*f) break;
        got.push_back(std::move(**f));
      }
    }
    ASSERT_EQ(got.size(), frames.size()) << "chunk " << chunk;
    for (size_t i = 0; i < frames.size(); ++i) {
      EXPECT_EQ(got[i].type, frames[i].type);
      EXPECT_EQ(got[i].channel, frames[i].channel);
      EXPECT_EQ(got[i].payload, frames[i].payload);
    }
    EXPECT_EQ(d.buffered(), 0u);
  }
  EXPECT_EQ(*decodeCredit(encodeCredit(12345)), 12345u);
}

TEST(FrameTest, HeaderLayoutIsLittleEndian) {
  std::string w = encodeFrame(Frame{FrameType::kControl, 0x01020304, "ab"});
  ASSERT_EQ(w.size(), kHeaderSize + 2);
  EXPECT_EQ(w.substr(0, 4), std::string("\x02\x00\x00\x00", 4));
  EXPECT_EQ(w[4], 2);
  EXPECT_EQ(w.substr(5, 4), std::string("\x04\x03\x02\x01", 4));
}

TEST(FrameTest, UnknownTypeFailsAndStaysFailed) {
  Decoder d;
  std::string w = encodeFrame(Frame{FrameType::kControl, 1, "{}"});
  w[4] = 99;
  d.feed(w);
  EXPECT_FALSE(d.next().has_value());
  d.feed(encodeFrame(Frame{FrameType::kControl, 1, "{}"}));
  EXPECT_FALSE(d.next().has_value());
}

TEST(FrameTest, OversizedLengthIsRejectedWithoutBuffering) {
  Decoder d;
  char header[kHeaderSize];
  encodeHeader(FrameType::kDataIn, 1, kMaxPayload + 1, header);
  d.feed(std::string_view(header, kHeaderSize));
  auto r = d.next();
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().kind, ErrorKind::kInvalidArgument);
}

TEST(FrameTest, BadCreditPayload) {
  EXPECT_FALSE(decodeCredit("abc").has_value());
  EXPECT_FALSE(decodeCredit("abcde").has_value());
}

TEST(FrameTest, RandomBytesNeverCrash) {
  std::mt19937 rng(42);
  for (int round = 0; round < 2000; ++round) {
    std::string junk(rng() % 64, '\0');
    for (auto& c : junk) c = static_cast<char>(rng());
    Decoder d(4096);
    d.feed(junk);
    for (int i = 0; i < 16; ++i) {
      auto f = d.next();
      if (!f || !*f) break;
      (void)parseControl((*f)->payload);
    }
  }
}

TEST(MessageTest, ParseControlAcceptsObjectsOnly) {
  EXPECT_TRUE(parseControl(R"({"op":"ping"})").has_value());
  EXPECT_FALSE(parseControl("[1,2]").has_value());
  EXPECT_FALSE(parseControl("42").has_value());
  EXPECT_FALSE(parseControl("{\"op\":").has_value());
  EXPECT_FALSE(parseControl("").has_value());
  EXPECT_FALSE(parseControl(std::string("\xff\xfe", 2)).has_value());
}

TEST(MessageTest, DeepNestingRefused) {
  std::string deep = "{\"a\":" + std::string(100, '[') + std::string(100, ']') + "}";
  EXPECT_FALSE(parseControl(deep).has_value());
  std::string in_string = "{\"a\":\"" + std::string(100, '[') + "\"}";
  EXPECT_TRUE(parseControl(in_string).has_value());
}

TEST(MessageTest, ErrorEventRoundTrip) {
  Error e{ErrorKind::kNotFound, 2, "open /x: No such file or directory"};
  Error back = errorFromEvent(errorEvent(e));
  EXPECT_EQ(back.kind, ErrorKind::kNotFound);
  EXPECT_EQ(back.sys_errno, 2);
  EXPECT_EQ(back.message, e.message);
  EXPECT_EQ(errorFromEvent({{"event", "error"}, {"kind", "bogus"}}).kind, ErrorKind::kInternal);
}

TEST(MessageTest, TypedAccessorsDoNotThrow) {
  auto msg = *parseControl(R"({"s":1,"i":"x","b":"y"})");
  EXPECT_FALSE(getString(msg, "s").has_value());
  EXPECT_FALSE(getInt(msg, "i").has_value());
  EXPECT_FALSE(getString(msg, "missing").has_value());
  EXPECT_EQ(optInt(msg, "i", 7), 7);
  EXPECT_TRUE(optBool(msg, "b", true));
}

}  // namespace
}  // namespace space::protocol
