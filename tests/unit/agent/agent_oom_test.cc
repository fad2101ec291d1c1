// The agent's OOM kill report (oom_count.cc) against the real space-agent: a file of the test's own
// stands in for a VM guest's /proc/vmstat, so the test decides when the kernel "counted" a kill.
#include <signal.h>

#include "agent_harness.h"

namespace space::agent::testing {
namespace {

class AgentOomTest : public ::testing::Test {
 protected:
  void SetUp() override {
    vmstat_ = agent_.dir() / "vmstat";
    writeHostFile(vmstat_, "pgfault 10\noom_kill_x 9\noom_kill 2\npgmajfault 1\n");
    if (!agent_.start({"--vmstat", vmstat_.string()})) GTEST_SKIP() << "space-agent binary not found";
    client_ = agent_.connect();
    ASSERT_TRUE(client_);
  }
  // A command that bumps the counter as the kernel would before it sends the kill, then is killed.
  ExecRequest bumpThenKill(const std::string& signal) {
    return sh("printf 'pgfault 10\\noom_kill 3\\npgmajfault 1\\n' > " + vmstat_.string() + "; kill -" + signal + " $$");
  }
  AgentProcess agent_;
  fs::path vmstat_;
  std::shared_ptr<AgentClient> client_;
};

TEST_F(AgentOomTest, SigkillWhileTheCountRoseIsAnOomKill) {
  auto s = client_->exec(bumpThenKill("KILL"));
  ASSERT_TRUE(s.has_value()) << s.error().message;
  auto c = collect(**s);
  EXPECT_EQ(c.exit.signal, SIGKILL);
  EXPECT_TRUE(c.exit.oom_killed);
  auto kills = client_->oomKills();
  ASSERT_TRUE(kills.has_value()) << kills.error().message;
  EXPECT_EQ(*kills, 3u);
}

TEST_F(AgentOomTest, SigkillWithTheCountStillIsNot) {
  auto s = client_->exec(sh("kill -KILL $$"));
  ASSERT_TRUE(s.has_value());
  auto c = collect(**s);
  EXPECT_EQ(c.exit.signal, SIGKILL);
  EXPECT_FALSE(c.exit.oom_killed);
  EXPECT_EQ(*client_->oomKills(), 2u);
}

TEST_F(AgentOomTest, OtherSignalsAndExitsAreNot) {
  auto s = client_->exec(bumpThenKill("TERM"));
  ASSERT_TRUE(s.has_value());
  EXPECT_FALSE(collect(**s).exit.oom_killed);
  auto e = client_->exec(sh("printf 'oom_kill 9\\n' > " + vmstat_.string() + "; exit 137"));
  ASSERT_TRUE(e.has_value());
  auto c = collect(**e);
  EXPECT_EQ(c.exit.exit_code, 137);
  EXPECT_FALSE(c.exit.oom_killed);
}

// A jail's agent (no vmstat of its own kernel to read) reports nothing: the host's cgroup counts there.
TEST(AgentOomWithoutCounter, ReportsNothing) {
  AgentProcess agent;
  SPACE_START_AGENT(agent);
  auto client = agent.connect();
  ASSERT_TRUE(client);
  auto kills = client->oomKills();
  ASSERT_FALSE(kills.has_value());
  EXPECT_EQ(kills.error().kind, ErrorKind::kUnsupported);
  auto s = client->exec(sh("kill -KILL $$"));
  ASSERT_TRUE(s.has_value());
  EXPECT_FALSE(collect(**s).exit.oom_killed);
}

}  // namespace
}  // namespace space::agent::testing
