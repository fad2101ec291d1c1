#include "core/pool_service.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "common/ids.h"
#include "fake_runtime.h"

namespace space::core {
namespace {

using testing::FakeNode;

// Pool hooks that start sandboxes on the node's fake jail tier and keep a row for each, as the manager does.
class PoolServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    node_.config.default_template = "base";
    node_.config.pool_size = 2;
    store::TemplateRecord tpl;
    tpl.id = "sha256:base";
    tpl.name = "base";
    tpl.rootfs = node_.dir + "/templates/base";
    ASSERT_TRUE(node_.store->putTemplate(tpl));
  }

  PoolService::Hooks hooks() {
    PoolService::Hooks h;
    h.ready = [this](const store::TemplateRecord&, const std::string&) { return ready_; };
    h.start = [this](const store::TemplateRecord& tpl, const std::string& tier) -> Result<Started> {
      store::SandboxRecord rec;
      rec.id = newSandboxId();
      rec.template_name = tpl.name;
      rec.runtime = tier;
      rec.pooled = true;
      rec.state = store::SandboxState::kRunning;
      rec.uid_slot = next_slot_++;
      TRY(node_.store->insertSandbox(rec));
      runtime::SandboxSpec spec;
      spec.id = rec.id;
      ASSIGN_OR_RETURN(runtime::Instance inst, node_.jail->prepare(spec));
      return Started{rec, inst};
    };
    h.started = [this](const Started& s) { live_.push_back(s.record.id); };
    h.destroy = [this](const store::SandboxRecord& rec) {
      (void)node_.jail->destroy({rec.id, rec.runtime, rec.persisted});
      (void)node_.store->deleteSandbox(rec.id);
    };
    return h;
  }

  // Waits (without a time assertion: the machine may be slow) until the pool holds `n` for `key`.
  static bool waitForReady(PoolService& pool, const std::string& key, size_t n) {
    for (int i = 0; i < 3000; ++i) {
      if (pool.readyCounts()[key] == n) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }

  FakeNode node_;
  bool ready_ = true;
  int next_slot_ = 0;
  std::vector<std::string> live_;
};

TEST_F(PoolServiceTest, KeysNameTheTierForVmsOnly) {
  EXPECT_EQ(PoolService::key("jail", "base"), "base");
  EXPECT_EQ(PoolService::key("vm", "base"), "vm:base");
}

TEST_F(PoolServiceTest, ServesThePooledTemplatesAtTheDefaultLimitsOnly) {
  PoolService pool(node_.ctx, hooks());
  CreateSandbox cmd;
  EXPECT_TRUE(pool.serves(cmd, "base"));
  EXPECT_FALSE(pool.serves(cmd, "other"));
  cmd.cpu_millis = 500;
  EXPECT_FALSE(pool.serves(cmd, "base"));
  node_.config.pool_templates = "other,,third";
  CreateSandbox plain;
  EXPECT_FALSE(pool.serves(plain, "base"));
  EXPECT_TRUE(pool.serves(plain, "third"));
  node_.config.pool_size = 0;  // and no vm tier: nothing is pooled
  EXPECT_FALSE(pool.serves(plain, "third"));
}

TEST_F(PoolServiceTest, FillsToThePoolSizeThenADrainTakesEverySandboxAndStopsFilling) {
  PoolService pool(node_.ctx, hooks());
  pool.startFilling();
  ASSERT_TRUE(waitForReady(pool, "base", 2));
  EXPECT_EQ(live_.size(), 2u);  // each made live before it was offered
  std::vector<Started> drained = pool.drain();
  ASSERT_EQ(drained.size(), 2u);
  EXPECT_TRUE(pool.readyCounts().empty());
  pool.stop();
  EXPECT_EQ(node_.jail->starts, 2);
}

TEST_F(PoolServiceTest, TakeSkipsAndDeletesASandboxThatDiedWhileWaiting) {
  PoolService pool(node_.ctx, hooks());
  pool.startFilling();
  ASSERT_TRUE(waitForReady(pool, "base", 2));
  auto all = pool.drain();  // the filler is done; put them back by hand
  ASSERT_EQ(all.size(), 2u);
  std::string dead = all[0].record.id, alive = all[1].record.id;
  node_.jail->running.erase(dead);
  for (auto& s : all) pool.adopt(std::move(s));

  auto taken = pool.take("base");
  ASSERT_TRUE(taken);
  EXPECT_EQ(taken->record.id, alive);
  EXPECT_TRUE(node_.jail->destroyed.count(dead));
  EXPECT_FALSE(node_.store->getSandbox(dead));
  EXPECT_FALSE(pool.take("base"));
  EXPECT_FALSE(pool.take("vm:base"));
}

TEST_F(PoolServiceTest, RemovingATemplateTakesItsPooledSandboxesOfEveryTier) {
  PoolService pool(node_.ctx, hooks());
  Started jail, vm, other;
  jail.record.id = "sb-j";
  jail.record.runtime = "jail";
  jail.record.template_name = "base";
  vm.record = jail.record;
  vm.record.id = "sb-v";
  vm.record.runtime = "vm";
  other.record = jail.record;
  other.record.id = "sb-o";
  other.record.template_name = "other";
  pool.adopt(jail);
  pool.adopt(vm);
  pool.adopt(other);
  EXPECT_EQ(pool.readyCounts()["vm:base"], 1u);
  auto removed = pool.takeTemplate("base");
  ASSERT_EQ(removed.size(), 2u);
  EXPECT_EQ(removed[0].record.id, "sb-j");
  EXPECT_EQ(removed[1].record.id, "sb-v");
  EXPECT_EQ(pool.readyCounts()["other"], 1u);
  EXPECT_EQ(pool.readyCounts()["base"], 0u);
}

TEST_F(PoolServiceTest, ATemplateThatIsNotReadyIsNotStartedAndStopReturnsWithTheFillLockHeld) {
  ready_ = false;
  PoolService pool(node_.ctx, hooks());
  pool.startFilling();
  auto fill = pool.stop();
  EXPECT_TRUE(fill.owns_lock());
  EXPECT_EQ(node_.jail->starts, 0);
}

}  // namespace
}  // namespace space::core
