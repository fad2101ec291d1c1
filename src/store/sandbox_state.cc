#include "store/sandbox_state.h"

namespace space::store {
namespace {

// One table per enum, in declaration order: the text is what the database and the API hold.
constexpr std::array<std::string_view, kSandboxStates.size()> kStateNames = {"starting", "running", "paused", "failed",
                                                                             "deleting"};
constexpr std::array<std::string_view, 2> kTierNames = {"jail", "vm"};
constexpr std::array<std::string_view, 3> kPendingOpNames = {"", "rolling_back", "forking"};

template <class Enum, size_t N>
std::optional<Enum> parseName(const std::array<std::string_view, N>& names, std::string_view text) {
  for (size_t i = 0; i < N; ++i)
    if (names[i] == text) return static_cast<Enum>(i);
  return std::nullopt;
}

}  // namespace

std::string_view toString(SandboxState state) { return kStateNames.at(static_cast<size_t>(state)); }
std::optional<SandboxState> parseSandboxState(std::string_view text) {
  return parseName<SandboxState>(kStateNames, text);
}

std::string_view toString(Tier tier) { return kTierNames.at(static_cast<size_t>(tier)); }
std::optional<Tier> parseTier(std::string_view text) { return parseName<Tier>(kTierNames, text); }

std::string_view toString(PendingOp op) { return kPendingOpNames.at(static_cast<size_t>(op)); }
std::optional<PendingOp> parsePendingOp(std::string_view text) { return parseName<PendingOp>(kPendingOpNames, text); }

}  // namespace space::store
