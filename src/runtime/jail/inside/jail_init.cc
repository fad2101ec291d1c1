// space-agent --jail-init <sync fd> <listen fd>: runs as root of the sandbox's user namespace (the host's
// pre-exec stub already switched to uid/gid 0 there, i.e. the sandbox's host uid_base, before execve).
#include "runtime/jail/inside/jail_init.h"

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>

#include "common/unique_fd.h"
#include "runtime/jail/inside/contain.h"
#include "runtime/jail/inside/handshake.h"

namespace space::jail {

namespace {

Result<int> parseFd(const char* text) {
  char* end = nullptr;
  long v = std::strtol(text, &end, 10);
  if (!end || *end != '\0' || v < 3 || v > 1024) return makeError(ErrorKind::kInvalidArgument, "bad fd '{}'", text);
  if (fcntl(static_cast<int>(v), F_GETFD) < 0) return sysError(errno, "fd {}", v);
  return static_cast<int>(v);
}

}  // namespace

Result<agent::ServeOptions> jailInit(int argc, char** argv) {
  if (argc != 4 || std::strcmp(argv[1], kJailInitFlag) != 0)
    return makeError(ErrorKind::kInvalidArgument, "usage: space-agent --jail-init <sync fd> <listen fd>");
  ASSIGN_OR_RETURN(int sync_raw, parseFd(argv[2]));
  UniqueFd sync(sync_raw);
  const int sync_fd = sync.get();
  ASSIGN_OR_RETURN(int listen_fd, parseFd(argv[3]));
  // The stub cleared close-on-exec only so these two could cross execve; no command the agent starts
  // may inherit them (J13).
  fcntl(sync_fd, F_SETFD, FD_CLOEXEC);
  fcntl(listen_fd, F_SETFD, FD_CLOEXEC);

  ASSIGN_OR_RETURN(std::string config_text, receiveMessage(sync_fd, std::chrono::seconds(30)));
  auto config = JailInitConfig::fromJson(config_text);
  if (!config) {
    (void)sendMessage(sync_fd, formatError("read-config", 0, config.error().message));
    return tl::unexpected(config.error());
  }
  TRY(runContainment(*config, sync_fd));

  agent::ServeOptions options;
  options.listen_fd = listen_fd;
  // options.root keeps its default "/": after pivot_root that is the sandbox's root.
  options.is_pid1 = getpid() == 1;
  options.base_env = {{"PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
                      {"HOME", "/root"},
                      {"LANG", "C.UTF-8"},
                      {"TERM", "xterm-256color"}};
  for (const auto& [k, v] : config->env) options.base_env[k] = v;
  TRY(sendMessage(sync_fd, "ready"));
  return options;
}

}  // namespace space::jail
