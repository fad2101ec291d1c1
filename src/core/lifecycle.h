// The sandbox lifecycle as one transition function: which events apply in which state, where each leads,
// and the refusal (with the API's 409 message) where one does not. The manager asks it before every
// change of state and records what it answers; tests/unit/core/lifecycle_test.cc pins the whole table.
#pragma once

#include <array>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "common/result.h"
#include "store/sandbox_state.h"
#include "store/store.h"

namespace space::core {

using store::PendingOp;
using store::PendingOperation;
using store::SandboxState;
using store::Tier;

// What happens to a sandbox: asked through the API, or done by spaced itself (the pool, the reaper,
// start-up reconciliation).
enum class LifecycleEvent {
  kReady,       // prepared for the pool: it runs, waiting to be handed out
  kHandOver,    // a create or fork finished handing it to its owner
  kPause,       // POST /pause
  kIdlePause,   // the reaper: no API call for idle_pause_s
  kResume,      // POST /resume
  kUse,         // exec, files, PTY, processes: anything through its agent
  kSnapshot,    // POST /snapshots, the rolling history, a fork of its present state
  kRollback,    // POST /rollback, and finishing one a dead spaced left half-done
  kSetNetwork,  // PUT /network
  kDie,         // its agent or VMM is gone (the reaper, start-up, a rollback that stopped it)
  kExpire,      // its TTL passed
  kDelete,      // DELETE, a drain, a create that failed half-way
};
inline constexpr std::array<LifecycleEvent, 12> kLifecycleEvents = {
    LifecycleEvent::kReady,      LifecycleEvent::kHandOver, LifecycleEvent::kPause,    LifecycleEvent::kIdlePause,
    LifecycleEvent::kResume,     LifecycleEvent::kUse,      LifecycleEvent::kSnapshot, LifecycleEvent::kRollback,
    LifecycleEvent::kSetNetwork, LifecycleEvent::kDie,      LifecycleEvent::kExpire,   LifecycleEvent::kDelete};

std::string_view toString(LifecycleEvent event);

// Where a sandbox is: its state and the flag transitions read besides it.
struct Lifecycle {
  SandboxState state = SandboxState::kStarting;
  bool auto_paused = false;  // kPaused only: paused for being idle, so the next use wakes it
  bool operator==(const Lifecycle&) const = default;
};

struct Transition {
  enum class Action {
    kApply,      // do the work; the sandbox is then at `to`
    kNothing,    // it already is where the event leads: answer success and change nothing
    kWakeFirst,  // resume it first (it was paused for being idle), then do the work
  };
  Action action = Action::kApply;
  Lifecycle to;
  bool operator==(const Transition&) const = default;
};

// Why an event does not apply: the API answers 409 "sandbox <id> is <state>, <wanted>".
struct Refusal {
  SandboxState state;
  std::string_view wanted;  // "not running", "not paused", "not running or paused", …
  bool operator==(const Refusal&) const = default;
  Error toError(const std::string& id) const;
};

tl::expected<Transition, Refusal> transition(Lifecycle from, LifecycleEvent event);

// The transition of a record's sandbox, or the refusal as the API's conflict error naming it.
Lifecycle lifecycleOf(const store::SandboxRecord& rec);
Result<Transition> transitionOf(const store::SandboxRecord& rec, LifecycleEvent event);
bool allows(const store::SandboxRecord& rec, LifecycleEvent event);
// Records where a transition led (after the work it stands for succeeded), or where the sandbox is again
// after that work was undone.
void enter(store::SandboxRecord& rec, const Lifecycle& at);
inline void enter(store::SandboxRecord& rec, const Transition& t) { enter(rec, t.to); }

// The runtime reads from a sandbox's persisted state whether it is frozen (a snapshot of a paused sandbox
// keeps it paused).
void markPausedForRuntime(nlohmann::json& persisted, bool paused);

}  // namespace space::core
