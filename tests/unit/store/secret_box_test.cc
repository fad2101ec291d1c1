#include "store/secret_box.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

namespace space::store {
namespace {

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/secret-box-XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

TEST(SecretBox, SealsAndOpensUnderTheSameKeyFile) {
  TempDir dir;
  auto box = SecretBox::open(dir.path + "/node.key");
  ASSERT_TRUE(box) << box.error().message;
  struct stat st;
  ASSERT_EQ(stat((dir.path + "/node.key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(st.st_size, 32);
  auto sealed = box->seal("sk-live-123", "OPENAI_KEY");
  ASSERT_TRUE(sealed);
  EXPECT_EQ(sealed->find("sk-live"), std::string::npos);
  auto again = SecretBox::open(dir.path + "/node.key");  // the key file is reused, not replaced
  ASSERT_TRUE(again);
  auto opened = again->unseal(*sealed, "OPENAI_KEY");
  ASSERT_TRUE(opened) << opened.error().message;
  EXPECT_EQ(*opened, "sk-live-123");
  // Two seals of one value differ (fresh nonce).
  EXPECT_NE(*box->seal("sk-live-123", "OPENAI_KEY"), *sealed);
}

TEST(SecretBox, RefusesAnotherNameATamperedValueAndAnOpenKeyFile) {
  TempDir dir;
  auto box = SecretBox::open(dir.path + "/node.key");
  ASSERT_TRUE(box);
  auto sealed = box->seal("value", "A");
  ASSERT_TRUE(sealed);
  EXPECT_FALSE(box->unseal(*sealed, "B"));
  std::string tampered = *sealed;
  tampered[30] = tampered[30] == '0' ? '1' : '0';
  EXPECT_FALSE(box->unseal(tampered, "A"));
  EXPECT_FALSE(box->unseal("zz", "A"));
  ASSERT_EQ(chmod((dir.path + "/node.key").c_str(), 0644), 0);
  EXPECT_FALSE(SecretBox::open(dir.path + "/node.key"));
}

}  // namespace
}  // namespace space::store
