// The layer volume: made once (XFS with reflink in a sparse image where the state dir cannot reflink),
// reused when mounted, and clones that really share blocks (FIEMAP reports the extents shared).
#include "runtime/host/layer_volume.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/fiemap.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <filesystem>
#include <vector>

#include "common/unique_fd.h"

namespace space::host {
namespace {

namespace fs = std::filesystem;

bool allExtentsShared(const std::string& path) {
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return false;
  std::vector<char> buf(sizeof(fiemap) + 64 * sizeof(fiemap_extent));
  auto* fm = reinterpret_cast<fiemap*>(buf.data());
  fm->fm_length = FIEMAP_MAX_OFFSET;
  fm->fm_flags = FIEMAP_FLAG_SYNC;
  fm->fm_extent_count = 64;
  if (ioctl(fd.get(), FS_IOC_FIEMAP, fm) < 0 || fm->fm_mapped_extents == 0) return false;
  for (unsigned i = 0; i < fm->fm_mapped_extents; ++i)
    if (!(fm->fm_extents[i].fe_flags & FIEMAP_EXTENT_SHARED)) return false;
  return true;
}

TEST(LayerVolume, MadeOnceClonesShareBlocksAndUnmounts) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (loop mount)";
  if (access("/usr/sbin/mkfs.xfs", X_OK) != 0 && access("/sbin/mkfs.xfs", X_OK) != 0)
    GTEST_SKIP() << "mkfs.xfs not installed (xfsprogs)";
  std::string state = "/var/tmp/space-volume-test-" + std::to_string(getpid());
  fs::create_directories(state);
  auto v = openLayerVolume(state, 1ull << 30);
  ASSERT_TRUE(v) << v.error().message;
  EXPECT_TRUE(fs::is_directory(v->layersDir()));
  EXPECT_TRUE(fs::is_directory(v->snapshotsDir()));
  EXPECT_TRUE(canReflink(v->root));
  // Opened again while mounted: the same volume, not a second mount of the image.
  auto again = openLayerVolume(state, 1ull << 30);
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_EQ(again->root, v->root);

  std::string a = v->layersDir() + "/a.img", b = v->snapshotsDir() + "/b.img";
  {
    UniqueFd fd(open(a.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
    ASSERT_TRUE(fd);
    std::vector<char> block(1 << 20, 'x');
    for (int i = 0; i < 8; ++i)
      ASSERT_EQ(write(fd.get(), block.data(), block.size()), static_cast<ssize_t>(block.size()));
  }
  ASSERT_TRUE(cloneFile(a, b, 0400));
  EXPECT_EQ(fs::file_size(b), 8u << 20);
  EXPECT_TRUE(allExtentsShared(b)) << "the clone copied blocks instead of sharing them";
  auto exists = cloneFile(a, b, 0400);
  EXPECT_FALSE(exists) << "an existing destination must not be overwritten";
  EXPECT_FALSE(cloneFile(state + "/missing", v->layersDir() + "/c.img"));
  EXPECT_FALSE(fs::exists(v->layersDir() + "/c.img"));

  if (v->own_mount) {
    ASSERT_TRUE(closeLayerVolume(state));
    EXPECT_FALSE(fs::exists(v->layersDir()));  // unmounted: the mount point is empty again
  }
  fs::remove_all(state);
}

}  // namespace
}  // namespace space::host
