// Process-creation and pidfd syscalls glibc does not wrap (or wraps with different semantics).
#pragma once

#include <sys/types.h>

#include <cstdint>

#include "common/result.h"
#include "common/unique_fd.h"

namespace space::sys {

struct Clone3Result {
  pid_t pid = 0;   // 0 in the child
  UniqueFd pidfd;  // parent only, when CLONE_PIDFD was asked for
};

// clone3(2) with fork semantics (no shared VM, no new stack): returns twice like fork(). `flags` may hold
// CLONE_NEW* and CLONE_PIDFD; the child's exit signal is SIGCHLD so the caller can reap it. In a
// multi-threaded parent the child may only run async-signal-safe code before execve.
Result<Clone3Result> clone3Fork(uint64_t flags);

// pidfd_open(2): a stable handle on `pid` that cannot be recycled under us.
Result<UniqueFd> pidfdOpen(pid_t pid);

// pidfd_send_signal(2): signals exactly the process the pidfd refers to (no pid-reuse race).
Status pidfdSendSignal(int pidfd, int signo);

// Restores default dispositions for every signal and unblocks them all: blocked and ignored signals
// survive execve. Async-signal-safe (for pre-exec stubs after clone3 in a multi-threaded process).
void resetSignalsForExec();

}  // namespace space::sys
