// Names inside a tar stream sent into a sandbox: relative, no way up.
#include "api/tree_archive.h"

#include <gtest/gtest.h>

namespace space::api {
namespace {

TEST(TreeArchive, EntryNamesAreNormalisedAndConfined) {
  EXPECT_EQ(*safeEntryName("a/./b/"), "a/b");
  EXPECT_EQ(*safeEntryName("./"), "");
  EXPECT_EQ(*safeEntryName("dir//x"), "dir/x");
  for (const char* bad : {"", "/etc/passwd", "../x", "a/../../x", "a/.."}) {
    auto r = safeEntryName(bad);
    EXPECT_FALSE(r) << bad;
  }
}

}  // namespace
}  // namespace space::api
