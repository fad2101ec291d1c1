// The jail's in-sandbox half: space-agent started with --jail-init by JailRuntime::start runs this
// first. It completes the handshake with the host side, enters the remaining namespaces, builds the
// root filesystem, drops privileges and applies seccomp (last), then hands back what the agent serves.
#pragma once

#include "agent/server/serve.h"
#include "common/result.h"

namespace space::jail {

// argv as given to space-agent. On success the process is fully contained and the returned options
// (listen fd, base environment) are ready for agent::serve.
Result<agent::ServeOptions> jailInit(int argc, char** argv);

}  // namespace space::jail
