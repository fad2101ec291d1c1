// The audit's bounds (SECURITY.md E19): identical decisions aggregated per interval, a per-sandbox line
// budget, the file capped and rotated, and the counters that say what was held back.
#include "egress/audit.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

using namespace space::egress;
using namespace std::chrono_literals;

namespace {

AuditRecord denial(std::string sandbox, std::string name) {
  AuditRecord r;
  r.kind = "dns";
  r.sandbox = std::move(sandbox);
  r.source = "10.200.0.2";
  r.verdict = "deny";
  r.rule = "not-allowed";
  r.reason = "deny-all";
  r.name = std::move(name);
  r.duration_ms = 0.01;
  return r;
}

AuditRecord allowedConnect(std::string sandbox, uint64_t bytes) {
  AuditRecord r;
  r.kind = "connect";
  r.sandbox = std::move(sandbox);
  r.verdict = "allow";
  r.rule = "allowed.test";
  r.name = "allowed.test";
  r.bytes_up = bytes;
  return r;
}

std::vector<nlohmann::json> parsed(const Audit& a) {
  std::vector<nlohmann::json> out;
  for (const auto& l : a.lastLinesForTest()) out.push_back(nlohmann::json::parse(l));
  return out;
}

class AuditBounds : public ::testing::Test {
 protected:
  std::unique_ptr<Audit> open(AuditOptions o, const std::string& path = "") {
    auto a = Audit::open(path, o);
    EXPECT_TRUE(a) << a.error().message;
    (*a)->setClockForTest([this] { return now_; });
    return std::move(*a);
  }
  Audit::Clock::time_point now_ = Audit::Clock::now();
};

}  // namespace

TEST_F(AuditBounds, IdenticalDecisionsAreOneLineAndARepeatedCount) {
  auto a = open({});
  for (int i = 0; i < 1000; ++i) a->write(denial("sb-a", "evil.test"));
  a->write(denial("sb-a", "other.test"));
  auto lines = parsed(*a);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0]["name"], "evil.test");
  EXPECT_FALSE(lines[0].contains("repeated"));
  now_ += 1s;
  a->tick();
  lines = parsed(*a);
  ASSERT_EQ(lines.size(), 3u);  // only evil.test repeated
  EXPECT_EQ(lines[2]["name"], "evil.test");
  EXPECT_EQ(lines[2]["verdict"], "deny");
  EXPECT_EQ(lines[2]["sandbox"], "sb-a");
  EXPECT_EQ(lines[2]["repeated"], 999);
  EXPECT_DOUBLE_EQ(lines[2]["interval_s"].get<double>(), 1.0);
  EXPECT_FALSE(lines[2].contains("duration_ms"));
  // A new interval starts afresh: the next one is written in full again.
  a->write(denial("sb-a", "evil.test"));
  EXPECT_EQ(parsed(*a).size(), 4u);
  EXPECT_FALSE(parsed(*a).back().contains("repeated"));
  auto s = a->stats();
  EXPECT_EQ(s.aggregated, 999u);
  EXPECT_EQ(s.summaries, 1u);
  EXPECT_EQ(s.lines, 4u);
  EXPECT_EQ(a->countersByReason()["deny: not-allowed"], 1002u);  // every decision is counted
  EXPECT_EQ(a->sandboxCounters()["sb-a"].aggregated, 999u);
}

TEST_F(AuditBounds, AllowedConnectionsAreWrittenOneByOne) {
  auto a = open({});
  for (int i = 0; i < 5; ++i) a->write(allowedConnect("sb-a", 100));
  EXPECT_EQ(parsed(*a).size(), 5u);
  EXPECT_EQ(a->stats().aggregated, 0u);
}

TEST_F(AuditBounds, ASandboxOverItsLineBudgetIsCountedNotWritten) {
  AuditOptions o;
  o.lines_per_sandbox = Rate{2, 5};
  auto a = open(o);
  for (int i = 0; i < 20; ++i) a->write(denial("sb-flood", "n" + std::to_string(i) + ".test"));  // never identical
  a->write(denial("sb-quiet", "quiet.test"));
  AuditRecord control;
  control.kind = "control";
  control.sandbox = "sb-flood";
  control.verdict = "allow";
  control.rule = "update";
  a->write(control);  // spaced's changes are never held back
  auto lines = parsed(*a);
  ASSERT_EQ(lines.size(), 7u);
  EXPECT_EQ(lines[5]["sandbox"], "sb-quiet");  // a neighbour keeps its own budget
  EXPECT_EQ(lines[6]["kind"], "control");
  now_ += 1s;
  a->tick();
  lines = parsed(*a);
  ASSERT_EQ(lines.size(), 8u);
  EXPECT_EQ(lines[7]["kind"], "audit");
  EXPECT_EQ(lines[7]["verdict"], "dropped");
  EXPECT_EQ(lines[7]["sandbox"], "sb-flood");
  EXPECT_EQ(lines[7]["repeated"], 15);
  EXPECT_EQ(a->stats().dropped, 15u);
  EXPECT_EQ(a->sandboxCounters()["sb-flood"].dropped, 15u);
  // The budget refills at its rate: two more lines a second later.
  for (int i = 0; i < 5; ++i) a->write(denial("sb-flood", "later" + std::to_string(i) + ".test"));
  EXPECT_EQ(parsed(*a).size(), 10u);
}

TEST_F(AuditBounds, ForgettingASandboxWritesItsPendingLinesFirst) {
  auto a = open({});
  for (int i = 0; i < 3; ++i) a->write(denial("sb-a", "evil.test"));
  a->forgetSandbox("sb-a");
  auto lines = parsed(*a);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[1]["repeated"], 2);
  EXPECT_EQ(a->sandboxCounters().count("sb-a"), 0u);
}

TEST_F(AuditBounds, TheFileIsCappedAndRotated) {
  std::string dir = ::testing::TempDir() + "/audit-rotate-" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::string path = dir + "/audit.jsonl";
  {
    std::ofstream(path) << std::string(200000, 'x') << "\n";  // a log from before the cap, far past it
  }
  AuditOptions o;
  o.max_bytes = 64 * 1024;
  o.lines_per_sandbox = Rate{1e9, 1e9};
  auto a = open(o, path);
  uint64_t written = 0;
  for (int i = 0; i < 3000; ++i) {
    AuditRecord r = allowedConnect("sb-" + std::to_string(i), uint64_t(i));
    a->write(r);
    written += auditToJson(r).dump().size() + 1;
  }
  ASSERT_GT(written, 4 * o.max_bytes);
  auto size = [](const std::string& p) { return std::filesystem::file_size(p); };
  EXPECT_LE(size(path), o.max_bytes / 2);
  EXPECT_LE(size(path + ".1"), o.max_bytes / 2);
  EXPECT_FALSE(std::filesystem::exists(path + ".2"));
  EXPECT_GE(a->stats().rotations, 8u);
  EXPECT_EQ(a->stats().file_bytes, size(path));
  // Whole lines only, the newest last; mode 0600.
  std::ifstream in(path);
  std::string line, last;
  while (std::getline(in, line)) {
    EXPECT_TRUE(nlohmann::json::accept(line)) << line;
    last = line;
  }
  EXPECT_EQ(nlohmann::json::parse(last)["sandbox"], "sb-2999");
  struct stat st {};
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  std::filesystem::remove_all(dir);
}

TEST_F(AuditBounds, ARotationThatFailsLosesLinesNotTheCap) {
  std::string dir = ::testing::TempDir() + "/audit-norotate-" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::string path = dir + "/audit.jsonl";
  AuditOptions o;
  o.max_bytes = 64 * 1024;
  o.lines_per_sandbox = Rate{1e9, 1e9};
  auto a = open(o, path);
  std::filesystem::create_directories(path + ".1/blocker");  // rename() onto a non-empty directory fails
  for (int i = 0; i < 2000; ++i) a->write(allowedConnect("sb-" + std::to_string(i), 1));
  EXPECT_LE(std::filesystem::file_size(path), o.max_bytes / 2);
  EXPECT_GT(a->stats().write_failures, 0u);
  EXPECT_EQ(a->stats().rotations, 0u);
  std::filesystem::remove_all(dir);
}

TEST_F(AuditBounds, ATallyOfIdenticalDecisionsIsOneLineAndItsCountWhateverTheBudget) {
  AuditOptions o;
  o.lines_per_sandbox = Rate{1, 1};
  auto a = open(o);
  a->write(denial("sb-a", "random1.test"));  // the flood's own lines took the budget
  a->write(denial("sb-a", "random2.test"));
  a->writeTally(denial("sb-a", "evil.test"), 100);  // the gateway's rate-limit tally between two ticks
  a->writeTally(denial("sb-a", "evil.test"), 50);
  now_ += 1s;
  a->tick();
  auto lines = parsed(*a);
  ASSERT_EQ(lines.size(), 4u);  // random1, evil.test, evil.test's repeats, random2's "dropped"
  EXPECT_EQ(lines[1]["name"], "evil.test");
  EXPECT_EQ(lines[2]["repeated"], 149);
  EXPECT_EQ(lines[3]["verdict"], "dropped");
  EXPECT_EQ(a->countersByReason()["deny: not-allowed"], 152u);
  EXPECT_EQ(a->stats().aggregated, 149u);
}
