#include "runtime/registry.h"

#include <gtest/gtest.h>

namespace space::runtime {
namespace {

// A tier that runs nothing: the registry only asks for its name, capabilities and self-description.
class StubRuntime : public Runtime {
 public:
  StubRuntime(std::string name, Capabilities caps, std::string unavailable = "")
      : name_(std::move(name)), caps_(caps), unavailable_(std::move(unavailable)) {}
  std::string name() const override { return name_; }
  Capabilities capabilities() const override { return caps_; }
  std::string unavailableReason() const override { return unavailable_; }
  nlohmann::json describe() const override { return {{"accel", "tcg"}}; }
  Result<Instance> start(const SandboxSpec&) override { return makeError(ErrorKind::kUnsupported, "stub"); }
  Status pause(Instance&) override { return ok(); }
  Status resume(Instance&) override { return ok(); }
  Result<SnapshotRef> snapshot(Instance&, SnapshotKind) override { return makeError(ErrorKind::kUnsupported, "stub"); }
  Result<Instance> restore(const SnapshotRef&, const SandboxSpec&) override {
    return makeError(ErrorKind::kUnsupported, "stub");
  }
  Status destroy(const PersistedInstance&) override { return ok(); }
  Result<Instance> reattach(const PersistedInstance&) override { return makeError(ErrorKind::kNotFound, "stub"); }
  Result<Usage> usage(const PersistedInstance&) override { return Usage{}; }

 private:
  std::string name_;
  Capabilities caps_;
  std::string unavailable_;
};

TEST(Registry, FindsTiersByNameInTheOrderAdded) {
  Registry r;
  r.add(std::make_unique<StubRuntime>("jail", Capabilities{.pause = true}));
  r.add(std::make_unique<StubRuntime>("vm", Capabilities{.snapshot_memory = true}));
  ASSERT_NE(r.find("vm"), nullptr);
  EXPECT_TRUE(r.find("vm")->capabilities().snapshot_memory);
  EXPECT_EQ(r.find("firecracker"), nullptr);
  ASSERT_EQ(r.all().size(), 2u);
  EXPECT_EQ(r.all().front()->name(), "jail");
  EXPECT_EQ(r.unavailableReason("jail"), "");
  EXPECT_NE(r.unavailableReason("firecracker").find("no firecracker runtime"), std::string::npos);
}

TEST(Registry, AMissingTierKeepsItsReasonAndDetails) {
  Registry r;
  r.add(std::make_unique<StubRuntime>("jail", Capabilities{.pause = true, .fork = true}));
  r.addUnavailable("vm", "no guest kernel", {{"kvm", {{"usable", false}}}});
  EXPECT_EQ(r.find("vm"), nullptr);
  EXPECT_EQ(r.unavailableReason("vm"), "no guest kernel");
  nlohmann::json d = r.describe();
  EXPECT_EQ(d["jail"]["available"], true);
  EXPECT_EQ(d["jail"]["capabilities"]["fork"], true);
  EXPECT_EQ(d["jail"]["accel"], "tcg");  // the tier's own description is merged in
  EXPECT_EQ(d["vm"]["available"], false);
  EXPECT_EQ(d["vm"]["reason"], "no guest kernel");
  EXPECT_EQ(d["vm"]["kvm"]["usable"], false);
  EXPECT_FALSE(d["vm"].contains("capabilities"));
}

TEST(Registry, ATierThatTurnedOutUnavailableSaysWhy) {
  Registry r;
  r.add(std::make_unique<StubRuntime>("vm", Capabilities{}, "KVM failed and TCG is off"));
  ASSERT_NE(r.find("vm"), nullptr);
  EXPECT_EQ(r.unavailableReason("vm"), "KVM failed and TCG is off");
  nlohmann::json d = r.describe();
  EXPECT_EQ(d["vm"]["available"], false);
  EXPECT_EQ(d["vm"]["reason"], "KVM failed and TCG is off");
}

// The manager-only capabilities never reach the API's capabilities object.
TEST(Registry, CapabilitiesJsonHoldsOnlyWhatTheApiReports) {
  Capabilities caps{.pause = true, .networked = true, .own_kernel = true, .accelerated = true};
  nlohmann::json j = caps.toJson();
  EXPECT_EQ(j.size(), 5u);
  EXPECT_FALSE(j.contains("networked"));
  EXPECT_EQ(j["pause"], true);
}

}  // namespace
}  // namespace space::runtime
