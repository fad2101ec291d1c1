#include "core/lifecycle.h"

#include <fmt/format.h>

namespace space::core {
namespace {

constexpr std::array<std::string_view, kLifecycleEvents.size()> kEventNames = {
    "ready",    "hand_over", "pause",       "idle_pause", "resume", "use",
    "snapshot", "rollback",  "set_network", "die",        "expire", "delete"};

}  // namespace

std::string_view toString(LifecycleEvent event) { return kEventNames.at(static_cast<size_t>(event)); }

Error Refusal::toError(const std::string& id) const {
  return Error{ErrorKind::kConflict, 0, fmt::format("sandbox {} is {}, {}", id, store::toString(state), wanted)};
}

tl::expected<Transition, Refusal> transition(Lifecycle from, LifecycleEvent event) {
  using enum SandboxState;
  using Action = Transition::Action;
  const SandboxState s = from.state;
  const bool live = s == kRunning || s == kPaused;  // its processes exist and answer (once thawed)
  auto enter = [](SandboxState to, bool auto_paused = false) { return Transition{Action::kApply, {to, auto_paused}}; };
  auto stay = [&] { return Transition{Action::kApply, from}; };  // the work changes nothing of its state
  auto already = [&] { return Transition{Action::kNothing, from}; };
  auto refuse = [&](std::string_view wanted) { return tl::unexpected(Refusal{s, wanted}); };

  switch (event) {
    case LifecycleEvent::kReady:
      if (s == kStarting) return enter(kRunning);
      return refuse("not starting");
    case LifecycleEvent::kHandOver:
      // A fresh sandbox is still starting; one taken from the pool already runs.
      if (s == kStarting || s == kRunning) return enter(kRunning);
      return refuse("not starting or running");
    case LifecycleEvent::kPause:
      // Paused already: success, and an idle pause stays one (only a resume or a use ends it).
      if (s == kPaused) return already();
      if (s == kRunning) return enter(kPaused);
      return refuse("not running");
    case LifecycleEvent::kIdlePause:
      if (s == kRunning) return enter(kPaused, /*auto_paused=*/true);
      return refuse("not running");
    case LifecycleEvent::kResume:
      if (s == kRunning) return already();
      if (s == kPaused) return enter(kRunning);
      return refuse("not paused");
    case LifecycleEvent::kUse:
      if (s == kRunning) return stay();
      if (s == kPaused && from.auto_paused) return Transition{Action::kWakeFirst, {kRunning, false}};
      return refuse("not running");
    case LifecycleEvent::kSnapshot:
      if (live) return stay();
      return refuse("not running or paused");
    case LifecycleEvent::kRollback:
      // The restored sandbox runs, whatever it was before.
      if (live) return enter(kRunning);
      return refuse("not running or paused");
    case LifecycleEvent::kSetNetwork:
      if (live) return stay();
      return refuse("not running");
    case LifecycleEvent::kDie:
      if (live) return enter(kFailed);
      if (s == kFailed) return already();
      return refuse("not running or paused");
    case LifecycleEvent::kExpire:
      if (s == kDeleting) return already();  // on its way out
      return enter(kDeleting);
    case LifecycleEvent::kDelete:
      // From anywhere, and again: a delete that failed half-way is retried.
      return enter(kDeleting);
  }
  return refuse("in no state this build knows");
}

Lifecycle lifecycleOf(const store::SandboxRecord& rec) { return {rec.state, rec.auto_paused}; }

Result<Transition> transitionOf(const store::SandboxRecord& rec, LifecycleEvent event) {
  auto t = transition(lifecycleOf(rec), event);
  if (!t) return tl::unexpected(t.error().toError(rec.id));
  return *t;
}

bool allows(const store::SandboxRecord& rec, LifecycleEvent event) {
  return transition(lifecycleOf(rec), event).has_value();
}

void enter(store::SandboxRecord& rec, const Lifecycle& at) {
  rec.state = at.state;
  rec.auto_paused = at.auto_paused;
}

void markPausedForRuntime(nlohmann::json& persisted, bool paused) { persisted["paused"] = paused; }

}  // namespace space::core
