// The typed lifecycle fields of a sandbox row: the state it is in, the tier it runs on, and the operation
// a spaced had in flight on it. The database and the API keep the strings below; which events move a
// sandbox between states is core's (core/lifecycle.h).
#pragma once

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace space::store {

enum class SandboxState {
  kStarting,  // being made for a request (the reaper leaves it alone; start-up removes it)
  kRunning,
  kPaused,
  kFailed,    // its agent or VMM died; only deleting it is left
  kDeleting,  // being deleted (start-up finishes the job)
};
inline constexpr std::array<SandboxState, 5> kSandboxStates = {SandboxState::kStarting, SandboxState::kRunning,
                                                               SandboxState::kPaused, SandboxState::kFailed,
                                                               SandboxState::kDeleting};

// "starting", "running", …: the state column's text and the API's "state".
std::string_view toString(SandboxState state);
std::optional<SandboxState> parseSandboxState(std::string_view text);

enum class Tier { kJail, kVm };

// "jail" | "vm": the runtime column's text and the API's "isolation".
std::string_view toString(Tier tier);
std::optional<Tier> parseTier(std::string_view text);

// An operation that spans several writes of the row and several runtime steps. It is written before its
// first step and cleared after its last, so that a spaced that dies in between finds it at the next start.
enum class PendingOp {
  kNone,
  kRollingBack,  // the sandbox is being put back at a snapshot (start-up finishes it)
  kForking,      // children are being made from it (start-up removes those made since)
};

// "" | "rolling_back" | "forking": the pending_op column's text.
std::string_view toString(PendingOp op);
std::optional<PendingOp> parsePendingOp(std::string_view text);

struct PendingOperation {
  PendingOp op = PendingOp::kNone;
  int64_t since_ms = 0;     // unix ms when it began (0: unknown, from a row written before the column)
  std::string snapshot_id;  // kRollingBack: the snapshot the sandbox goes back to
  // kRollingBack: what its restored processes get (core::AfterRestore as JSON).
  nlohmann::json after_restore = nlohmann::json::object();
};

}  // namespace space::store
