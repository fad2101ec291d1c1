// Generations against the real space-agent (--listen --root): the first one is published at start, a
// set_identity after a restore publishes the next before it signals, kills or leaves the running
// processes (SECURITY.md V9, docs/snapshots.md "Generations").
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <regex>

#include "agent_harness.h"

namespace space::agent::testing {
namespace {

class AgentGenerationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SPACE_START_AGENT(agent_);
    client_ = agent_.connect();
    ASSERT_TRUE(client_);
  }

  fs::path generationFile() const { return agent_.root() / "run" / "space" / "generation"; }

  // "<counter> <id>" as published; fails the test when the line is malformed.
  std::pair<int, std::string> generation() const {
    std::string line = readHostFile(generationFile());
    std::smatch m;
    static const std::regex kLine("^([0-9]+) ([0-9a-f]{32})\n$");
    EXPECT_TRUE(std::regex_match(line, m, kLine)) << "'" << line << "'";
    if (m.size() != 3) return {-1, ""};
    return {std::stoi(m[1]), m[2]};
  }

  Status restore(const std::string& processes, int signo = 0) {
    Identity id;
    id.generation = Identity::Generation{processes, signo};
    return client_->setIdentity(id);
  }

  // Waits until the background process wrote something (its trap is installed by then).
  void waitForOutput(const std::string& id) {
    for (int i = 0; i < 1000; ++i) {
      auto l = client_->listProcesses();
      for (const auto& p : l ? *l : std::vector<ProcessInfo>{})
        if (p.id == id && p.output_bytes > 0) return;
      usleep(10000);
    }
    ADD_FAILURE() << id << " wrote nothing";
  }

  AgentProcess agent_;
  std::shared_ptr<AgentClient> client_;
};

TEST_F(AgentGenerationTest, FirstGenerationIsPublishedAtStart) {
  auto features = client_->agentInfo()["features"].get<std::vector<std::string>>();
  EXPECT_NE(std::find(features.begin(), features.end(), "generation"), features.end());
  auto [counter, id] = generation();
  EXPECT_EQ(counter, 0);
  EXPECT_EQ(fs::status(generationFile()).permissions() & fs::perms::all, fs::perms(0444));
  // A plain set_identity (a jail's environment) is no restore: the generation stays.
  Identity env_only;
  env_only.env["A"] = "b";
  ASSERT_TRUE(client_->setIdentity(env_only).has_value());
  EXPECT_EQ(generation(), std::make_pair(0, id));
}

TEST_F(AgentGenerationTest, SignalReachesRunningProcessesAfterTheNewGenerationIsPublished) {
  auto [counter0, id0] = generation();
  // The handler reads the file the moment it runs: it must already hold the new generation.
  std::string file = generationFile().string();
  auto p =
      client_->startBackground(sh("trap 'cat " + file + "; exit 7' USR1; echo ready; while :; do sleep 0.05; done"));
  ASSERT_TRUE(p.has_value()) << p.error().message;
  waitForOutput(p->id);
  ASSERT_TRUE(restore("signal", SIGUSR1).has_value());
  auto r = client_->readOutput(p->id, /*follow=*/true);
  ASSERT_TRUE(r.has_value());
  auto c = collect(**r);
  EXPECT_EQ(c.exit.exit_code, 7) << c.err;
  auto [counter1, id1] = generation();
  EXPECT_EQ(counter1, counter0 + 1);
  EXPECT_NE(id1, id0);
  EXPECT_EQ(c.out, "ready\n" + std::to_string(counter1) + " " + id1 + "\n");
}

TEST_F(AgentGenerationTest, KillEndsEveryRunningProcessBeforeTheAnswer) {
  auto a = client_->startBackground(sh("exec sleep 60"));
  auto b = client_->startBackground(sh("trap '' TERM USR1; sleep 60"));
  ASSERT_TRUE(a.has_value() && b.has_value());
  ASSERT_TRUE(restore("kill").has_value());
  // No waiting here: the agent answers once they are reaped.
  auto list = client_->listProcesses();
  ASSERT_TRUE(list.has_value());
  ASSERT_EQ(list->size(), 2u);
  for (const auto& p : *list) {
    EXPECT_FALSE(p.running) << p.id;
    EXPECT_EQ(p.exit.signal, SIGKILL) << p.id;
  }
  EXPECT_EQ(generation().first, 1);
}

TEST_F(AgentGenerationTest, NoneLeavesProcessesRunningAndStillMovesTheGeneration) {
  auto p = client_->startBackground(sh("exec sleep 60"));
  ASSERT_TRUE(p.has_value());
  auto id0 = generation().second;
  ASSERT_TRUE(restore("none").has_value());
  ASSERT_TRUE(restore("none").has_value());
  auto list = client_->listProcesses();
  ASSERT_TRUE(list.has_value() && list->size() == 1u);
  EXPECT_TRUE(list->front().running);
  auto [counter, id] = generation();
  EXPECT_EQ(counter, 2);
  EXPECT_NE(id, id0);
}

TEST_F(AgentGenerationTest, BadActionIsRefusedAndChangesNothing) {
  auto before = generation();
  EXPECT_EQ(restore("reboot").error().kind, ErrorKind::kInvalidArgument);
  EXPECT_EQ(restore("signal", 65).error().kind, ErrorKind::kInvalidArgument);
  EXPECT_EQ(generation(), before);
  EXPECT_TRUE(client_->alive());
}

}  // namespace
}  // namespace space::agent::testing
