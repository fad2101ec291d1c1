// A sandbox's TTL counts the time it runs. Pausing (by its owner or for being idle) stops the clock and
// keeps what is left; resuming starts it again with that. So a paused sandbox is preserved, as users of
// pause-and-resume expect, and a node bounds how long one may stay paused with max_paused_s instead
// (docs/api.md "TTL").
#pragma once

#include <cstdint>
#include <optional>

#include "store/store.h"

namespace space::core {

// Running → paused: the TTL's deadline becomes the time left, and the pause is stamped.
void stopTtlClock(store::SandboxRecord& rec, int64_t now_ms);
// Paused → running: the time left becomes a deadline again.
void startTtlClock(store::SandboxRecord& rec, int64_t now_ms);
// A new TTL of ttl_s from now (running) or from the resume (paused). 0 removes it.
void setTtlClock(store::SandboxRecord& rec, int64_t ttl_s, int64_t now_ms);
// Milliseconds of TTL left: counting down while it runs, frozen while paused; nullopt without a TTL.
std::optional<int64_t> ttlLeftMs(const store::SandboxRecord& rec, int64_t now_ms);
// When the sandbox was paused, 0 when it is not.
int64_t pausedAtMs(const store::SandboxRecord& rec);

}  // namespace space::core
