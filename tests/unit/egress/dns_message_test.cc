#include "egress/dns_message.h"

#include <gtest/gtest.h>

using namespace space::egress;

namespace {

std::vector<uint8_t> query(const std::vector<std::string>& labels, uint16_t qtype, bool edns = false) {
  std::vector<uint8_t> m = {0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, uint8_t(edns ? 1 : 0)};
  for (const auto& l : labels) {
    m.push_back(uint8_t(l.size()));
    m.insert(m.end(), l.begin(), l.end());
  }
  m.push_back(0);
  m.insert(m.end(), {uint8_t(qtype >> 8), uint8_t(qtype), 0, 1});
  if (edns) m.insert(m.end(), {0, 0, 41, 0x10, 0, 0, 0, 0, 0, 0, 0});
  return m;
}

}  // namespace

TEST(EgressDns, ParsesAStandardQuery) {
  auto q = dns::parseQuery(query({"Allowed", "test"}, dns::kA, true));
  ASSERT_TRUE(q) << q.error().message;
  EXPECT_EQ(q->id, 0x1234);
  EXPECT_EQ(q->name, "Allowed.test");
  EXPECT_EQ(q->qtype, dns::kA);
  EXPECT_TRUE(q->recursion_desired);
}

TEST(EgressDns, RejectsMalformed) {
  auto good = query({"a", "test"}, dns::kA);
  EXPECT_FALSE(dns::parseQuery(std::vector<uint8_t>(good.begin(), good.begin() + 11)));
  auto trailing = good;
  trailing.push_back(0);
  EXPECT_FALSE(dns::parseQuery(trailing));
  auto response = good;
  response[2] |= 0x80;
  EXPECT_FALSE(dns::parseQuery(response));
  auto two = good;
  two[5] = 2;
  EXPECT_FALSE(dns::parseQuery(two));
  auto pointer = good;
  pointer[12] = 0xc0;
  EXPECT_FALSE(dns::parseQuery(pointer));
  EXPECT_FALSE(dns::parseQuery(query({"a.b", "test"}, dns::kA)));  // a dot inside a label
  EXPECT_FALSE(dns::parseQuery(query({std::string("a\0b", 3), "test"}, dns::kA)));
  EXPECT_FALSE(dns::parseQuery(query({}, dns::kA)));  // the root
  auto truncated = good;
  truncated.resize(truncated.size() - 2);
  EXPECT_FALSE(dns::parseQuery(truncated));
}

TEST(EgressDns, BuildsAnswers) {
  auto q = *dns::parseQuery(query({"a", "test"}, dns::kA));
  auto out = dns::buildResponse(q, dns::kNoError, {*parseIp("93.184.216.34")}, 30);
  ASSERT_EQ(out.size(), 12 + q.question.size() + 16);
  EXPECT_EQ(out[0], 0x12);
  EXPECT_EQ(out[2] & 0x80, 0x80);  // QR
  EXPECT_EQ(out[3] & 0x0f, 0);     // NOERROR
  EXPECT_EQ(out[7], 1);            // ANCOUNT
  EXPECT_EQ(std::vector<uint8_t>(out.end() - 4, out.end()), (std::vector<uint8_t>{93, 184, 216, 34}));
  auto nx = dns::buildResponse(q, dns::kNxDomain, {}, 0);
  EXPECT_EQ(nx[3] & 0x0f, dns::kNxDomain);
  EXPECT_EQ(nx[7], 0);
}
