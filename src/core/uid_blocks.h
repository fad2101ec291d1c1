// Host-wide reservation of sandbox uid ranges (SECURITY.md J28). Every sandbox runs as a private range of
// host uids; the range comes from a slot in the daemon's own database, so two daemons on one host would
// hand out the same uids unless their slots come from disjoint parts of the uid space. The space above
// kUidBase is cut into blocks of kSlotsPerBlock slots; each state directory claims one block, records it
// (<state_dir>/uid-block) and keeps it across restarts, because its sandboxes (and their files) outlive
// spaced. The claims live in a registry under /run/space (a tmpfs: sandboxes do not outlive a boot either):
// `<k>.owner` names the state directory holding block k, and `<k>.lock` is flock'ed by the running daemon,
// so a second spaced on the same state directory, or on a block another directory holds, is refused.
#pragma once

#include <cstdint>
#include <string>

#include "common/result.h"
#include "common/unique_fd.h"

namespace space::core {

// First host uid of sandbox uid ranges; slot n of block b owns
// [kUidBase + (b * kSlotsPerBlock + n) * kUidRange, +kUidRange). Far above any regular host account.
inline constexpr uint32_t kUidBase = 0x10000000;
inline constexpr uint32_t kUidRange = 65536;
inline constexpr uint32_t kSlotsPerBlock = 4096;
// (2^32 - kUidBase) / kUidRange slots in all: 15 blocks of 4096.
inline constexpr uint32_t kUidBlocks = static_cast<uint32_t>(((1ull << 32) - kUidBase) / kUidRange / kSlotsPerBlock);

class UidBlock {
 public:
  // Claims this state directory's block: the one it recorded, else the lowest free one (block 0 for a
  // directory that has sandboxes from before blocks existed, whose uids were computed as block 0's).
  static Result<UidBlock> claim(const std::string& registry_dir, const std::string& state_dir,
                                bool has_legacy_sandboxes);

  UidBlock() = default;
  UidBlock(UidBlock&&) = default;
  UidBlock& operator=(UidBlock&&) = default;

  uint32_t index() const { return index_; }
  // The first host uid of slot `slot` of this block.
  uint32_t uidBase(uint32_t slot) const { return kUidBase + (index_ * kSlotsPerBlock + slot) * kUidRange; }

 private:
  uint32_t index_ = 0;
  UniqueFd lock_;  // flock'ed for the daemon's lifetime
};

}  // namespace space::core
