// Connecting to the unix sockets a VMM creates (QMP, the agent's serial port) while it starts up.
#pragma once

#include <chrono>
#include <string>

#include "common/result.h"
#include "common/unique_fd.h"

namespace space::vm {

// Retries while the socket does not exist yet or refuses (QEMU has not reached listen()), until deadline.
Result<UniqueFd> connectUnixUntil(const std::string& path, std::chrono::steady_clock::time_point deadline);

}  // namespace space::vm
