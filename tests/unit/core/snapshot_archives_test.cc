#include "core/snapshot_archives.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "fake_runtime.h"

namespace space::core {
namespace {

using testing::FakeNode;

TEST(SnapshotArchivesTest, WithoutTheCustomersKeyExportAndImportAreRefusedWithWhatToSet) {
  FakeNode node;
  std::mutex op;
  SnapshotArchives archives(node.ctx, op);
  auto exported = archives.exportSnapshot("snap-00000000");
  ASSERT_FALSE(exported);
  EXPECT_EQ(exported.error().kind, ErrorKind::kUnsupported);
  EXPECT_NE(exported.error().message.find("set snapshot_kek"), std::string::npos);
  auto imported = archives.importSnapshot("sb-x", "/nonexistent.spacearchive");
  ASSERT_FALSE(imported);
  EXPECT_EQ(imported.error().kind, ErrorKind::kUnsupported);
}

TEST(SnapshotArchivesTest, RotationNeedsTwoDifferentKeys) {
  FakeNode node;
  std::mutex op;
  SnapshotArchives archives(node.ctx, op);
  auto none = archives.rotateKeys();
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error().kind, ErrorKind::kInvalidArgument);
  EXPECT_NE(none.error().message.find("snapshot_kek_previous"), std::string::npos);
}

TEST(SnapshotArchivesTest, ImportIntoAPooledOrATierWithoutSnapshotsIsRefusedAndKeepsNothing) {
  FakeNode node;
  node.config.snapshot_kek = "env:SPACE_TEST_UNUSED_KEK";
  std::mutex op;
  SnapshotArchives archives(node.ctx, op);
  store::SandboxRecord rec;
  rec.id = "sb-pooled";
  rec.runtime = "jail";
  rec.pooled = true;
  ASSERT_TRUE(node.store->insertSandbox(rec));
  auto pooled = archives.importSnapshot("sb-pooled", "/nonexistent.spacearchive");
  ASSERT_FALSE(pooled);
  EXPECT_EQ(pooled.error().kind, ErrorKind::kNotFound);

  rec.id = "sb-running";
  rec.pooled = false;
  rec.uid_slot = 1;
  rec.state = store::SandboxState::kRunning;
  ASSERT_TRUE(node.store->insertSandbox(rec));
  auto no_dir = archives.importSnapshot("sb-running", "/nonexistent.spacearchive");  // the fake has no snapshot dir
  ASSERT_FALSE(no_dir);
  EXPECT_EQ(no_dir.error().kind, ErrorKind::kUnsupported);
  EXPECT_TRUE(node.store->listSnapshots("sb-running")->empty());
}

TEST(SnapshotArchivesTest, ScratchPathsAreFreshAndUnderTheStateDirectory) {
  FakeNode node;
  std::mutex op;
  SnapshotArchives archives(node.ctx, op);
  std::string a = archives.scratchPath("upload"), b = archives.scratchPath("upload");
  EXPECT_NE(a, b);
  EXPECT_EQ(a.rfind(node.dir + "/scratch/upload-", 0), 0u) << a;
  EXPECT_TRUE(std::filesystem::is_directory(node.dir + "/scratch"));
}

}  // namespace
}  // namespace space::core
