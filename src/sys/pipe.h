// pipe2(O_CLOEXEC) with both ends owned.
#pragma once

#include "common/result.h"
#include "common/unique_fd.h"

namespace space::sys {

struct Pipe {
  UniqueFd read, write;
};

// Both ends close-on-exec: a child gets an end only through an explicit dup2.
Result<Pipe> makePipe();

}  // namespace space::sys
