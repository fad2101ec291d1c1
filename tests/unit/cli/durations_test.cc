// Durations as typed on the command line: what they mean, and errors that name the flag.
#include "cli/durations.h"

#include <gtest/gtest.h>

namespace space::cli {
namespace {

using std::chrono::milliseconds;

TEST(CliDurations, MeanWhatTheySay) {
  EXPECT_EQ(*parseDuration("--timeout", "1500ms"), milliseconds(1500));
  EXPECT_EQ(*parseDuration("--timeout", "0.5s"), milliseconds(500));
  EXPECT_EQ(*parseDuration("--timeout", "45"), milliseconds(45000));  // a bare number is seconds
  EXPECT_EQ(*parseDuration("--timeout", "30m"), milliseconds(1800000));
  EXPECT_EQ(*parseDuration("--timeout", "1h30m"), milliseconds(5400000));
  EXPECT_EQ(*parseDuration("--timeout", "2h"), milliseconds(7200000));
  EXPECT_EQ(*parseDuration("--timeout", "1d"), milliseconds(86400000));
  EXPECT_EQ(*parseDuration("--timeout", "1m0.5s"), milliseconds(60500));
  EXPECT_EQ(*parseDuration("--timeout", "0"), milliseconds(0));
}

TEST(CliDurations, RefusedWithTheFlagNamed) {
  for (const char* bad : {"", "soon", "5y", "-1s", "1.5.5s", "s", "10 s", "1h30", "ms"}) {
    auto d = parseDuration("--idle-pause", bad);
    ASSERT_FALSE(d) << bad;
    EXPECT_NE(d.error().message.find("--idle-pause"), std::string::npos) << d.error().message;
    EXPECT_EQ(d.error().message.find("_s"), std::string::npos) << d.error().message;
  }
}

TEST(CliDurations, SecondsForTheApi) {
  EXPECT_DOUBLE_EQ(*durationSeconds("--timeout", "1500ms", std::chrono::hours(1)), 1.5);
  EXPECT_DOUBLE_EQ(*durationSeconds("--timeout", "0.5s", std::chrono::hours(1)), 0.5);
  auto too_long = durationSeconds("--timeout", "8d", std::chrono::hours(7 * 24));
  ASSERT_FALSE(too_long);
  EXPECT_NE(too_long.error().message.find("--timeout"), std::string::npos);
  EXPECT_EQ(too_long.error().message.find("timeout_s"), std::string::npos);

  EXPECT_EQ(*wholeSeconds("--ttl", "30m", std::chrono::hours(24)), 1800);
  EXPECT_EQ(*wholeSeconds("--ttl", "2000ms", std::chrono::hours(24)), 2);
  // Not silently rounded: 0.5s of TTL is not 1s (or 0, which means "the daemon's default").
  auto half = wholeSeconds("--ttl", "0.5s", std::chrono::hours(24));
  ASSERT_FALSE(half);
  EXPECT_NE(half.error().message.find("--ttl"), std::string::npos);
  EXPECT_FALSE(wholeSeconds("--ttl", "2d", std::chrono::hours(24)));
}

}  // namespace
}  // namespace space::cli
