#include "sys/pipe.h"

#include <fcntl.h>
#include <unistd.h>

namespace space::sys {

Result<Pipe> makePipe() {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) < 0) return sysError(errno, "pipe2");
  return Pipe{UniqueFd(fds[0]), UniqueFd(fds[1])};
}

}  // namespace space::sys
