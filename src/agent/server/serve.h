// The agent's serving loop: accepts the host's connection on a listening unix socket and executes
// protocol requests until terminated. Single-threaded (epoll); PID 1 duties (reaping every child,
// including orphans) included.
#pragma once

#include <map>
#include <string>

namespace space::agent {

struct ServeOptions {
  int listen_fd = -1;  // listening SOCK_STREAM socket; one host connection at a time
  // Instead of listen_fd: an already-connected stream that is never closed, such as a VM's virtio-serial
  // port (a char device). The host may come and go behind it; each host session starts with a hello.
  int device_fd = -1;
  std::string root = "/";                       // file operations resolve beneath it (RESOLVE_IN_ROOT)
  std::map<std::string, std::string> base_env;  // environment of every process the agent starts
  bool is_pid1 = false;                         // reap orphans; exit ends the sandbox
  // Keep run/space/generation beneath root (generation.cc). Off where root is the host's own /.
  bool publish_generation = false;
  // The kernel's vmstat file where that kernel is the sandbox's own (a VM guest's /proc/vmstat): its
  // oom_kill counter tells an exec the OOM killer ended from any other SIGKILL. Empty where the kernel
  // is the host's (a jail, whose host reads the sandbox's cgroup instead).
  std::string vmstat_path;
};

// Returns the process exit code.
int serve(const ServeOptions& options);

}  // namespace space::agent
