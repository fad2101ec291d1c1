// Identifiers and clocks shared by the daemon's components.
#pragma once

#include <cstdint>
#include <string>

namespace space {

// n random bytes from the kernel's CSPRNG, as 2n lowercase hex characters.
std::string randomHex(size_t n_bytes);
// "sb-" followed by 12 hex characters.
std::string newSandboxId();
bool isValidSandboxId(const std::string& id);
int64_t nowUnixMs();
std::string isoTimeMs(int64_t unix_ms);  // "2026-11-30T09:11:28.123Z"; empty for 0

}  // namespace space
