// Path helpers shared by the confinement steps of the VMM and the egress gateway.
#pragma once

#include <string>

#include "common/result.h"

namespace space::sys {

// The directory holding path ("/" for a top-level entry or a bare name).
std::string parentOf(const std::string& path);
// realpath(3), with the error naming the path.
Result<std::string> realPath(const std::string& path);

}  // namespace space::sys
