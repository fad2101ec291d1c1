#include "store/sandbox_state.h"

#include <gtest/gtest.h>

namespace space::store {
namespace {

TEST(SandboxStateTest, NamesAreTheApisAndRoundTrip) {
  std::vector<std::string> names;
  for (SandboxState s : kSandboxStates) {
    names.emplace_back(toString(s));
    EXPECT_EQ(parseSandboxState(toString(s)), s);
  }
  EXPECT_EQ(names, (std::vector<std::string>{"starting", "running", "paused", "failed", "deleting"}));
  EXPECT_EQ(parseSandboxState("Running"), std::nullopt);
  EXPECT_EQ(parseSandboxState(""), std::nullopt);
  EXPECT_EQ(parseSandboxState("stopped"), std::nullopt);  // named by the API's list filter; no sandbox is ever in it
}

TEST(SandboxStateTest, TierNames) {
  EXPECT_EQ(toString(Tier::kJail), "jail");
  EXPECT_EQ(toString(Tier::kVm), "vm");
  EXPECT_EQ(parseTier("vm"), Tier::kVm);
  EXPECT_EQ(parseTier("jail"), Tier::kJail);
  EXPECT_EQ(parseTier("auto"), std::nullopt);  // a request's choice, resolved before a sandbox has a tier
}

TEST(SandboxStateTest, PendingOpNames) {
  for (PendingOp op : {PendingOp::kNone, PendingOp::kRollingBack, PendingOp::kForking})
    EXPECT_EQ(parsePendingOp(toString(op)), op);
  EXPECT_EQ(toString(PendingOp::kNone), "");
  EXPECT_EQ(toString(PendingOp::kRollingBack), "rolling_back");
  EXPECT_EQ(toString(PendingOp::kForking), "forking");
  EXPECT_EQ(parsePendingOp("snapshotting"), std::nullopt);
}

}  // namespace
}  // namespace space::store
