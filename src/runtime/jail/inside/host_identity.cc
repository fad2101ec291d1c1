// UTS, loopback and resource limits: the sandbox's own view of "this machine".
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "common/unique_fd.h"
#include "runtime/jail/inside/steps.h"

namespace space::jail {

Status setHostname(const JailInitConfig& config) {
  std::string name = config.hostname.empty() ? "sandbox" : config.hostname;
  if (sethostname(name.data(), name.size()) < 0) return sysError(errno, "sethostname {}", name);
  return ok();
}

Status bringUpLoopback() {
  // A fresh network namespace has only "lo", and it is down. Needs CAP_NET_ADMIN over our netns, which we
  // still hold at this point (dropped later).
  UniqueFd sock(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!sock) return sysError(errno, "socket(AF_INET) for lo");
  ifreq req{};
  std::strncpy(req.ifr_name, "lo", IFNAMSIZ - 1);
  if (ioctl(sock.get(), SIOCGIFFLAGS, &req) < 0) return sysError(errno, "SIOCGIFFLAGS lo");
  req.ifr_flags |= IFF_UP | IFF_RUNNING;
  if (ioctl(sock.get(), SIOCSIFFLAGS, &req) < 0) return sysError(errno, "SIOCSIFFLAGS lo up");
  return ok();
}

Status setResourceLimits(const JailInitConfig& config) {
  // NOFILE: hard = soft, so no process inside can raise it (CAP_SYS_RESOURCE is dropped too).
  rlimit nofile{config.nofile, config.nofile};
  if (setrlimit(RLIMIT_NOFILE, &nofile) < 0) return sysError(errno, "setrlimit(NOFILE, {})", config.nofile);
  // No core dumps: they would be written by the host kernel's core_pattern handler, outside the quota.
  rlimit core{0, 0};
  if (setrlimit(RLIMIT_CORE, &core) < 0) return sysError(errno, "setrlimit(CORE, 0)");
  return ok();
}

}  // namespace space::jail
