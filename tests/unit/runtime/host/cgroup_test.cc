#include "runtime/host/cgroup.h"

#include <gtest/gtest.h>

namespace space::host {
namespace {

// The OOM counters: v1 memory.oom_control and v2 memory.events as the kernel writes them.
TEST(CgroupFiles, OomKillCounterIsReadFromEitherFormat) {
  EXPECT_EQ(flatKeyedValue("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n", "oom_kill"), 3u);
  EXPECT_EQ(flatKeyedValue("low 0\nhigh 0\nmax 12\noom 2\noom_kill 2\noom_group_kill 0\n", "oom_kill"), 2u);
  EXPECT_EQ(flatKeyedValue("oom_kill_disable 0\nunder_oom 0\n", "oom_kill"), 0u) << "kernels before 4.13";
}

TEST(CgroupChoice, UnifiedWithControllersIsV2) {
  CgroupProbe p;
  p.root_is_cgroup2 = true;
  p.unified_mount = "/sys/fs/cgroup";
  p.unified_controllers = {"cpuset", "cpu", "io", "memory", "pids"};
  auto c = chooseCgroupBackend(p);
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->kind, CgroupKind::kV2);
  EXPECT_EQ(c->root, "/sys/fs/cgroup");
}

TEST(CgroupChoice, HybridWithEmptyUnifiedIsV1) {
  CgroupProbe p;
  p.v1_memory = p.v1_pids = p.v1_cpu = true;
  p.unified_mount = "/sys/fs/cgroup/unified";  // mounted, but every controller is bound to v1
  auto c = chooseCgroupBackend(p);
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->kind, CgroupKind::kV1);
}

TEST(CgroupChoice, HybridWithControllersInUnifiedIsV2) {
  CgroupProbe p;
  p.v1_memory = true;
  p.unified_mount = "/sys/fs/cgroup/unified";
  p.unified_controllers = {"memory", "pids", "cpu"};
  auto c = chooseCgroupBackend(p);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->kind, CgroupKind::kV2);
  EXPECT_EQ(c->root, "/sys/fs/cgroup/unified");
}

TEST(CgroupChoice, MissingControllerIsAnError) {
  CgroupProbe p;
  p.v1_memory = p.v1_cpu = true;  // no pids hierarchy
  p.unified_mount = "/sys/fs/cgroup/unified";
  p.unified_controllers = {"memory", "cpu"};
  auto c = chooseCgroupBackend(p);
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().kind, ErrorKind::kUnsupported);
}

TEST(CgroupChoice, ThisHostProbesToAUsableBackend) {
  auto c = chooseCgroupBackend(probeCgroups());
  if (!c) GTEST_SKIP() << "no usable cgroups here: " << c.error().message;
  std::printf("this host: cgroup %s at %s\n", c->kind == CgroupKind::kV1 ? "v1" : "v2", c->root.c_str());
}

}  // namespace
}  // namespace space::host
