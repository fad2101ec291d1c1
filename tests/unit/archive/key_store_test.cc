#include "archive/key_store.h"

#include "archive_test_util.h"
#include "common/hex.h"

namespace space::archive {
namespace {

using namespace testing;

TEST(KeyStore, CreatesOneDataKeyPerTenantStoredOnlyWrapped) {
  TempDir dir;
  KeyStore store(dir / "keys");
  auto kek = testKek('a');
  auto first = store.dataKey("acme", *kek);
  ASSERT_TRUE(first) << first.error().message;
  EXPECT_EQ(first->key.size(), 32u);
  auto again = store.dataKey("acme", *kek);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->key, first->key);
  EXPECT_EQ(again->id, first->id);
  auto other = store.dataKey("globex", *kek);
  ASSERT_TRUE(other);
  EXPECT_NE(other->key, first->key);

  std::string stored = readFile(dir / "keys/acme.json");
  EXPECT_EQ(stored.find(first->key), std::string::npos);
  EXPECT_EQ(stored.find(toHex(first->key)), std::string::npos);
  EXPECT_EQ(std::filesystem::status(dir / "keys/acme.json").permissions() & std::filesystem::perms::all,
            std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);

  auto wrong = testKek('b');
  auto refused = store.dataKey("acme", *wrong);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().kind, ErrorKind::kUnauthenticated);
  EXPECT_FALSE(store.dataKey("../etc", *kek));
  EXPECT_FALSE(store.dataKey("", *kek));
}

TEST(KeyStore, RotationRewrapsEveryDataKeyUnderTheNewKek) {
  TempDir dir;
  KeyStore store(dir / "keys");
  auto old_kek = testKek('o'), new_kek = testKek('n'), unrelated = testKek('u');
  auto acme = store.dataKey("acme", *old_kek);
  auto globex = store.dataKey("globex", *old_kek);
  auto initech = store.dataKey("initech", *unrelated);
  ASSERT_TRUE(acme && globex && initech);

  auto rotated = store.rotate(*old_kek, *new_kek);
  ASSERT_TRUE(rotated) << rotated.error().message;
  EXPECT_EQ(*rotated, 2u);
  // Same data keys (so every chunk sealed before stays readable), now only under the new KEK.
  auto after = store.dataKey("acme", *new_kek);
  ASSERT_TRUE(after) << after.error().message;
  EXPECT_EQ(after->key, acme->key);
  EXPECT_FALSE(store.dataKey("acme", *old_kek));
  EXPECT_FALSE(store.dataKey("globex", *old_kek));
  EXPECT_TRUE(store.dataKey("initech", *unrelated));
  // Rotating again from the retired key finds nothing to do.
  auto none = store.rotate(*old_kek, *new_kek);
  ASSERT_TRUE(none);
  EXPECT_EQ(*none, 0u);
}

}  // namespace
}  // namespace space::archive
