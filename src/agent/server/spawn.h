// Starting a child process. The agent uses clone(CLONE_VM | CLONE_VFORK), as posix_spawn does: no page
// tables are copied, so an exec costs tens of microseconds whatever the agent's size. Everything the
// child needs is prepared by the parent; the child only makes syscalls, then reports a failure through
// memory it shares with the parent until exec.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "common/result.h"

namespace space::agent {

struct SpawnSpec {
  std::vector<std::string> argv;
  std::vector<std::string> env;         // "KEY=VALUE"
  std::vector<std::string> candidates;  // executable paths to try in order (PATH lookup result)
  std::string cwd;
  bool cwd_fallback_to_root = false;  // cwd was a default: fall back to "/" if it cannot be entered
  bool set_user = false;
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;
  int stdin_fd = -1, stdout_fd = -1, stderr_fd = -1;  // become the child's 0, 1, 2
  bool controlling_tty = false;                       // make stdin (a pty slave) the controlling terminal
};

// The paths execve should try for argv0, searching path_env like execvp when argv0 has no slash.
std::vector<std::string> executableCandidates(const std::string& argv0, const std::string& path_env);

// Starts the child in its own session and process group (pgid == pid), with default signal
// dispositions, an empty signal mask and only fds 0-2. Fails with the child's errno and step.
Result<pid_t> spawnChild(const SpawnSpec& spec);

}  // namespace space::agent
