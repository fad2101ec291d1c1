// runContainment: the ordered list of named containment steps (contain.cc), run by jailInit.
#pragma once

#include "common/result.h"
#include "runtime/jail/inside/handshake.h"

namespace space::jail {

// Runs every step; on failure sends "error <step> <errno> <message>" over sync_fd and returns the error.
Status runContainment(const JailInitConfig& config, int sync_fd);

}  // namespace space::jail
