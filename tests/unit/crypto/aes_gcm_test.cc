#include "crypto/aes_gcm.h"

#include <gtest/gtest.h>

namespace space::crypto {
namespace {

TEST(AesGcm, SealsWithAFreshNonceAndOpensOnlyWithTheSameKeyAndAad) {
  std::string key(32, 'k');
  auto a = aesGcmSeal(key, "aad", "plaintext");
  auto b = aesGcmSeal(key, "aad", "plaintext");
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->size(), 9 + kGcmOverhead);
  EXPECT_NE(*a, *b);
  auto opened = aesGcmOpen(key, "aad", *a);
  ASSERT_TRUE(opened);
  EXPECT_EQ(*opened, "plaintext");
  EXPECT_EQ(aesGcmOpen(key, "other", *a).error().kind, ErrorKind::kUnauthenticated);
  EXPECT_FALSE(aesGcmOpen(std::string(32, 'x'), "aad", *a));
  for (size_t i = 0; i < a->size(); ++i) {
    std::string bad = *a;
    bad[i] ^= 0x01;
    EXPECT_FALSE(aesGcmOpen(key, "aad", bad)) << i;
  }
  EXPECT_EQ(aesGcmOpen(key, "aad", "short").error().kind, ErrorKind::kInvalidArgument);
  EXPECT_FALSE(aesGcmSeal("short key", "", "x"));
  auto empty = aesGcmSeal(key, "", "");
  ASSERT_TRUE(empty);
  EXPECT_EQ(*aesGcmOpen(key, "", *empty), "");
}

}  // namespace
}  // namespace space::crypto
