// Rolling history over simulated time: a snapshot every 10 minutes for 8 days, thinned after each, ends
// with all of the last hour, one an hour for the last day, one a day for the week, nothing older.
#include "core/retention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

namespace space::core {
namespace {

constexpr int64_t kMin = 60'000, kHour = 60 * kMin, kDay = 24 * kHour;

TEST(Retention, AWeekOfTenMinuteSnapshotsThinsToTheTiers) {
  HistoryPolicy p = HistoryPolicy::defaults(600);
  std::vector<HistoryEntry> kept;
  int64_t start = 1'790'000'000'000;  // some Monday
  int64_t now = start;
  int taken = 0;
  for (; now < start + 8 * kDay; now += kMin) {
    int64_t newest = kept.empty() ? 0 : kept.back().created_ms;
    if (!snapshotDue(p, newest, now)) continue;
    kept.push_back({"s" + std::to_string(taken++), now});
    auto drop = snapshotsToThin(p, kept, now);
    std::set<std::string> gone(drop.begin(), drop.end());
    std::erase_if(kept, [&](const HistoryEntry& e) { return gone.count(e.id) > 0; });
  }
  EXPECT_EQ(taken, 8 * 24 * 6);
  {  // the reaper thins on every pass, not only when it takes a snapshot
    auto drop = snapshotsToThin(p, kept, now);
    std::set<std::string> gone(drop.begin(), drop.end());
    std::erase_if(kept, [&](const HistoryEntry& e) { return gone.count(e.id) > 0; });
  }
  int last_hour = 0;
  std::map<int64_t, int> per_hour, per_day;
  for (const auto& e : kept) {
    int64_t age = now - e.created_ms;
    EXPECT_LT(age, 7 * kDay) << "kept a snapshot older than the last tier";
    if (age < kHour) {
      ++last_hour;
    } else if (age < kDay) {
      ++per_hour[e.created_ms / kHour];
    } else {
      ++per_day[e.created_ms / kDay];
    }
  }
  EXPECT_GE(last_hour, 5);  // every one of the last hour (10-minute cadence)
  EXPECT_LE(last_hour, 6);
  for (auto& [h, n] : per_hour) EXPECT_EQ(n, 1) << "hour bucket " << h;
  EXPECT_GE(per_hour.size(), 22u);
  for (auto& [d, n] : per_day) EXPECT_EQ(n, 1) << "day bucket " << d;
  EXPECT_GE(per_day.size(), 6u);
  EXPECT_LE(kept.size(), 6u + 24u + 8u);
}

TEST(Retention, NewestIsAlwaysKeptAndNothingIsDueWithoutACadence) {
  HistoryPolicy p{600, {{60, 0}}};
  std::vector<HistoryEntry> old = {{"a", 0}, {"b", 1000}};
  auto drop = snapshotsToThin(p, old, 10 * kDay);
  EXPECT_EQ(drop, std::vector<std::string>{"a"});
  EXPECT_FALSE(snapshotDue(HistoryPolicy{0, {}}, 0, kDay));
  EXPECT_TRUE(snapshotDue(p, 0, 1));
  EXPECT_FALSE(snapshotDue(p, kDay, kDay + 599'999));
  EXPECT_TRUE(snapshotDue(p, kDay, kDay + 600'000));
}

TEST(Retention, PolicyParsingRejectsNonsense) {
  EXPECT_TRUE(HistoryPolicy::parse({{"every_s", 600}}));
  auto custom =
      HistoryPolicy::parse({{"every_s", 60}, {"keep", {{{"within_s", 600}}, {{"within_s", 7200}, {"every_s", 600}}}}});
  ASSERT_TRUE(custom) << custom.error().message;
  EXPECT_EQ(custom->keep.size(), 2u);
  for (const char* bad :
       {R"({"every_s": 10})", R"({"every_s": "600"})", R"({})", R"({"every_s": 600, "x": 1})",
        R"({"every_s": 600, "keep": []})", R"({"every_s": 600, "keep": [{"within_s": 7200}, {"within_s": 3600}]})",
        R"({"every_s": 600, "keep": [{"within_s": 60, "every_s": 120}]})",
        R"({"every_s": 600, "keep": [{"within_s": -1}]})", R"([600])"}) {
    EXPECT_FALSE(HistoryPolicy::parse(nlohmann::json::parse(bad))) << bad;
  }
}

TEST(Retention, AfterExecNeedsNoCadenceAndRoundTrips) {
  auto only = HistoryPolicy::parse({{"after_exec", true}});
  ASSERT_TRUE(only) << only.error().message;
  EXPECT_TRUE(only->after_exec);
  EXPECT_EQ(only->every_s, 0);
  EXPECT_FALSE(snapshotDue(*only, 0, kDay));  // no time cadence: only execs take snapshots
  EXPECT_EQ(only->keep.size(), 3u);           // thinned like the periodic ones
  auto both = HistoryPolicy::parse({{"every_s", 600}, {"after_exec", true}});
  ASSERT_TRUE(both);
  auto again = HistoryPolicy::parse(both->toJson());
  ASSERT_TRUE(again);
  EXPECT_TRUE(again->after_exec);
  EXPECT_EQ(again->every_s, 600);
  EXPECT_FALSE(HistoryPolicy::parse({{"every_s", 600}})->toJson().contains("after_exec"));
  EXPECT_TRUE(HistoryPolicy::parse({{"every_s", 0}, {"after_exec", true}}));
  for (const char* bad : {R"({"after_exec": false})", R"({"after_exec": "yes"})", R"({"after_exec": 1})",
                          R"({"every_s": 0})", R"({"every_s": 10, "after_exec": true})"}) {
    EXPECT_FALSE(HistoryPolicy::parse(nlohmann::json::parse(bad))) << bad;
  }
}

}  // namespace
}  // namespace space::core
