#include "runtime/jail/userns.h"

#include <gtest/gtest.h>
#include <linux/sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "sys/process.h"

namespace space::jail {
namespace {

TEST(UserNs, MapLineFormat) { EXPECT_EQ(idMapLine(100000, 65536), "0 100000 65536\n"); }

TEST(UserNs, RangeNeverMapsHostRoot) {
  EXPECT_FALSE(validateIdRange(0, 65536));
  EXPECT_FALSE(validateIdRange(100000, 0));
  EXPECT_FALSE(validateIdRange(0xFFFFFFF0u, 65536));
  EXPECT_TRUE(validateIdRange(100000, 65536));
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Writes the maps of a real child in a new user namespace and reads them back from the kernel.
TEST(UserNs, WritesMapsOfARealChild) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to map foreign uids";
  int pipefd[2];
  ASSERT_EQ(pipe(pipefd), 0);
  auto child = sys::clone3Fork(CLONE_NEWUSER);
  ASSERT_TRUE(child) << child.error().message;
  if (child->pid == 0) {
    char b;
    close(pipefd[1]);
    (void)!read(pipefd[0], &b, 1);  // wait until the parent has looked at us
    _exit(0);
  }
  close(pipefd[0]);
  Status st = writeIdMaps(child->pid, 300000, 65536);
  std::string uid_map = slurp("/proc/" + std::to_string(child->pid) + "/uid_map");
  std::string gid_map = slurp("/proc/" + std::to_string(child->pid) + "/gid_map");
  Status again = writeIdMaps(child->pid, 400000, 65536);  // the kernel takes a map only once
  close(pipefd[1]);
  int status = 0;
  waitpid(child->pid, &status, 0);
  ASSERT_TRUE(st) << st.error().message;
  std::istringstream u(uid_map), g(gid_map);
  uint32_t inner, outer, count;
  u >> inner >> outer >> count;
  EXPECT_EQ(inner, 0u);
  EXPECT_EQ(outer, 300000u);
  EXPECT_EQ(count, 65536u);
  g >> inner >> outer >> count;
  EXPECT_EQ(outer, 300000u);
  EXPECT_FALSE(again);
}

}  // namespace
}  // namespace space::jail
