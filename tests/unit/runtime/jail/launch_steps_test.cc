// The jail's host-side launch tables, pinned: a step added, dropped or moved is a reviewed change here.
// (Failing steps naming themselves on real sandboxes: jail_runtime_test.cc.)
#include "runtime/jail/launch_steps.h"

#include <gtest/gtest.h>

namespace space::jail {
namespace {

using Names = std::vector<std::string_view>;

TEST(LaunchSteps, FreshMakesItsDirLayerAndCgroupThenTheInit) {
  EXPECT_EQ(launchStepNames(LaunchVariant::kFresh),
            (Names{"claim dir", "layer disk", "cgroup", "agent socket", "sync channel", "agent stdio", "spawn agent",
                   "uid map", "join cgroup", "rootfs", "network", "init config", "handshake"}));
}

TEST(LaunchSteps, ForkClonesTheSnapshotsLayerAndShiftsItsOwners) {
  EXPECT_EQ(
      launchStepNames(LaunchVariant::kFork),
      (Names{"claim dir", "clone layer", "mount layer", "shift owners", "cgroup", "agent socket", "sync channel",
             "agent stdio", "spawn agent", "uid map", "join cgroup", "rootfs", "network", "init config", "handshake"}));
}

TEST(LaunchSteps, RelaunchReusesDirCgroupAndSubnet) {
  EXPECT_EQ(launchStepNames(LaunchVariant::kRelaunch),
            (Names{"mount layer", "shift owners", "agent socket", "sync channel", "agent stdio", "spawn agent",
                   "uid map", "join cgroup", "rootfs", "relink network", "init config", "handshake"}));
}

}  // namespace
}  // namespace space::jail
