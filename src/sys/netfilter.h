// The address a connection was sent to before an nftables redirect rewrote it (SO_ORIGINAL_DST).
#pragma once

#include <sys/socket.h>

#include "common/result.h"

namespace space::sys {

// fd: an accepted TCP socket. v6: the listener is IPv6 (the kernel answers per family).
Result<sockaddr_storage> originalDestination(int fd, bool v6);

}  // namespace space::sys
