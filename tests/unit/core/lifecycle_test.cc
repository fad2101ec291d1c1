#include "core/lifecycle.h"

#include <gtest/gtest.h>

#include <optional>
#include <set>
#include <string>

namespace space::core {
namespace {

using Action = Transition::Action;

// Where a sandbox can be: the five states, with a paused one paused by its owner or for being idle.
constexpr Lifecycle kStarting{SandboxState::kStarting};
constexpr Lifecycle kRunning{SandboxState::kRunning};
constexpr Lifecycle kPaused{SandboxState::kPaused};
constexpr Lifecycle kIdlePaused{SandboxState::kPaused, true};
constexpr Lifecycle kFailed{SandboxState::kFailed};
constexpr Lifecycle kDeleting{SandboxState::kDeleting};
constexpr Lifecycle kEveryWhere[] = {kStarting, kRunning, kPaused, kIdlePaused, kFailed, kDeleting};

struct Expected {
  std::optional<Transition> transition;  // unset: refused
  std::string_view wanted;               // the refusal's "not …"
};
Expected apply(Lifecycle to) { return {Transition{Action::kApply, to}, {}}; }
Expected nothing(Lifecycle at) { return {Transition{Action::kNothing, at}, {}}; }
Expected wakeFirst(Lifecycle to) { return {Transition{Action::kWakeFirst, to}, {}}; }
Expected refused(std::string_view wanted) { return {std::nullopt, wanted}; }

struct Row {
  Lifecycle from;
  LifecycleEvent event;
  Expected expected;
};

using E = LifecycleEvent;

// What the API and spaced do today, state by state. Refusals are the 409s' "sandbox <id> is <state>, …".
const Row kTable[] = {
    // starting: made for a request, not answered yet.
    {kStarting, E::kReady, apply(kRunning)},
    {kStarting, E::kHandOver, apply(kRunning)},
    {kStarting, E::kPause, refused("not running")},
    {kStarting, E::kIdlePause, refused("not running")},
    {kStarting, E::kResume, refused("not paused")},
    {kStarting, E::kUse, refused("not running")},
    {kStarting, E::kSnapshot, refused("not running or paused")},
    {kStarting, E::kRollback, refused("not running or paused")},
    {kStarting, E::kSetNetwork, refused("not running")},
    {kStarting, E::kDie, refused("not running or paused")},
    {kStarting, E::kExpire, apply(kDeleting)},
    {kStarting, E::kDelete, apply(kDeleting)},
    // running
    {kRunning, E::kReady, refused("not starting")},
    {kRunning, E::kHandOver, apply(kRunning)},  // taken from the pool
    {kRunning, E::kPause, apply(kPaused)},
    {kRunning, E::kIdlePause, apply(kIdlePaused)},
    {kRunning, E::kResume, nothing(kRunning)},
    {kRunning, E::kUse, apply(kRunning)},
    {kRunning, E::kSnapshot, apply(kRunning)},
    {kRunning, E::kRollback, apply(kRunning)},
    {kRunning, E::kSetNetwork, apply(kRunning)},
    {kRunning, E::kDie, apply(kFailed)},
    {kRunning, E::kExpire, apply(kDeleting)},
    {kRunning, E::kDelete, apply(kDeleting)},
    // paused by its owner: only a resume wakes it
    {kPaused, E::kReady, refused("not starting")},
    {kPaused, E::kHandOver, refused("not starting or running")},
    {kPaused, E::kPause, nothing(kPaused)},
    {kPaused, E::kIdlePause, refused("not running")},
    {kPaused, E::kResume, apply(kRunning)},
    {kPaused, E::kUse, refused("not running")},
    {kPaused, E::kSnapshot, apply(kPaused)},
    {kPaused, E::kRollback, apply(kRunning)},
    {kPaused, E::kSetNetwork, apply(kPaused)},
    {kPaused, E::kDie, apply(kFailed)},
    {kPaused, E::kExpire, apply(kDeleting)},
    {kPaused, E::kDelete, apply(kDeleting)},
    // paused for being idle: the next use wakes it; a pause asked for now leaves it so
    {kIdlePaused, E::kReady, refused("not starting")},
    {kIdlePaused, E::kHandOver, refused("not starting or running")},
    {kIdlePaused, E::kPause, nothing(kIdlePaused)},
    {kIdlePaused, E::kIdlePause, refused("not running")},
    {kIdlePaused, E::kResume, apply(kRunning)},
    {kIdlePaused, E::kUse, wakeFirst(kRunning)},
    {kIdlePaused, E::kSnapshot, apply(kIdlePaused)},
    {kIdlePaused, E::kRollback, apply(kRunning)},
    {kIdlePaused, E::kSetNetwork, apply(kIdlePaused)},
    {kIdlePaused, E::kDie, apply(kFailed)},
    {kIdlePaused, E::kExpire, apply(kDeleting)},
    {kIdlePaused, E::kDelete, apply(kDeleting)},
    // failed: only deleting it is left
    {kFailed, E::kReady, refused("not starting")},
    {kFailed, E::kHandOver, refused("not starting or running")},
    {kFailed, E::kPause, refused("not running")},
    {kFailed, E::kIdlePause, refused("not running")},
    {kFailed, E::kResume, refused("not paused")},
    {kFailed, E::kUse, refused("not running")},
    {kFailed, E::kSnapshot, refused("not running or paused")},
    {kFailed, E::kRollback, refused("not running or paused")},
    {kFailed, E::kSetNetwork, refused("not running")},
    {kFailed, E::kDie, nothing(kFailed)},
    {kFailed, E::kExpire, apply(kDeleting)},
    {kFailed, E::kDelete, apply(kDeleting)},
    // deleting: a delete again retries it; the TTL reaper leaves it be
    {kDeleting, E::kReady, refused("not starting")},
    {kDeleting, E::kHandOver, refused("not starting or running")},
    {kDeleting, E::kPause, refused("not running")},
    {kDeleting, E::kIdlePause, refused("not running")},
    {kDeleting, E::kResume, refused("not paused")},
    {kDeleting, E::kUse, refused("not running")},
    {kDeleting, E::kSnapshot, refused("not running or paused")},
    {kDeleting, E::kRollback, refused("not running or paused")},
    {kDeleting, E::kSetNetwork, refused("not running")},
    {kDeleting, E::kDie, refused("not running or paused")},
    {kDeleting, E::kExpire, nothing(kDeleting)},
    {kDeleting, E::kDelete, apply(kDeleting)},
};

std::string describe(Lifecycle l) { return std::string(store::toString(l.state)) + (l.auto_paused ? " (idle)" : ""); }

TEST(LifecycleTest, TableCoversEveryStateAndEventOnce) {
  std::set<std::pair<std::string, std::string>> seen;
  for (const Row& row : kTable)
    EXPECT_TRUE(seen.insert({describe(row.from), std::string(toString(row.event))}).second)
        << describe(row.from) << " × " << toString(row.event) << " is in the table twice";
  for (Lifecycle from : kEveryWhere)
    for (LifecycleEvent event : kLifecycleEvents)
      EXPECT_TRUE(seen.count({describe(from), std::string(toString(event))}))
          << describe(from) << " × " << toString(event) << " is missing from the table";
}

TEST(LifecycleTest, EveryTransitionIsTheTables) {
  for (const Row& row : kTable) {
    SCOPED_TRACE(describe(row.from) + " × " + std::string(toString(row.event)));
    auto got = transition(row.from, row.event);
    if (row.expected.transition) {
      ASSERT_TRUE(got) << "refused: " << got.error().wanted;
      EXPECT_EQ(got->action, row.expected.transition->action);
      EXPECT_EQ(describe(got->to), describe(row.expected.transition->to));
    } else {
      ASSERT_FALSE(got) << "went to " << describe(got->to);
      EXPECT_EQ(got.error().state, row.from.state);
      EXPECT_EQ(got.error().wanted, row.expected.wanted);
    }
  }
}

TEST(LifecycleTest, OnlyAPausedSandboxIsIdlePaused) {
  // The flag is a qualifier of paused: wherever a transition leads, it is set only there.
  for (Lifecycle from : kEveryWhere)
    for (LifecycleEvent event : kLifecycleEvents)
      if (auto t = transition(from, event); t && t->to.auto_paused) {
        EXPECT_EQ(t->to.state, SandboxState::kPaused) << describe(from) << " × " << toString(event);
      }
}

TEST(LifecycleTest, RefusalIsTheApisConflict) {
  store::SandboxRecord rec;
  rec.id = "sb-1";
  rec.state = SandboxState::kFailed;
  auto t = transitionOf(rec, LifecycleEvent::kUse);
  ASSERT_FALSE(t);
  EXPECT_EQ(t.error().kind, ErrorKind::kConflict);
  EXPECT_EQ(t.error().message, "sandbox sb-1 is failed, not running");
  rec.state = SandboxState::kStarting;
  EXPECT_EQ(transitionOf(rec, LifecycleEvent::kResume).error().message, "sandbox sb-1 is starting, not paused");
  EXPECT_EQ(transitionOf(rec, LifecycleEvent::kSnapshot).error().message,
            "sandbox sb-1 is starting, not running or paused");
  EXPECT_FALSE(allows(rec, LifecycleEvent::kSnapshot));
}

TEST(LifecycleTest, EnterRecordsStateAndIdleFlag) {
  store::SandboxRecord rec;
  rec.state = SandboxState::kRunning;
  enter(rec, transitionOf(rec, LifecycleEvent::kIdlePause).value());
  EXPECT_EQ(rec.state, SandboxState::kPaused);
  EXPECT_TRUE(rec.auto_paused);
  auto use = transitionOf(rec, LifecycleEvent::kUse);
  ASSERT_TRUE(use);
  EXPECT_EQ(use->action, Transition::Action::kWakeFirst);
  enter(rec, transitionOf(rec, LifecycleEvent::kResume).value());
  EXPECT_EQ(rec.state, SandboxState::kRunning);
  EXPECT_FALSE(rec.auto_paused);
}

}  // namespace
}  // namespace space::core
