// space-agent: PID 1 of every sandbox.
//   space-agent --jail-init …         started by the jail runtime: contain, then serve
//   space-agent --listen PATH [--root DIR] [--vmstat FILE]   serve on a unix socket without containment (tests)
//   space-agent --vm-init             PID 1 of a SPACE microVM: mount, load modules, serve on virtio-serial
#include <sys/prctl.h>
#include <sys/reboot.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "agent/server/serve.h"
#include "runtime/jail/inside/jail_init.h"
#include "runtime/vm/inside/vm_init.h"

namespace {

int listenUnix(const std::string& path) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path) return -1;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  unlink(path.c_str());
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) < 0 || listen(fd, 8) < 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// The kernel passes init the arguments after `--` on its command line, behind any unknown boot options.
bool hasArg(int argc, char** argv, const char* want) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], want) == 0) return true;
  }
  return false;
}

// PID 1 of a VM must not return: the kernel would panic. Reboot instead; SPACE runs QEMU with
// -no-reboot, so the VM ends and the host sees the VMM exit.
int vmInitMain(int argc, char** argv) {
  int rc = 1;
  if (auto options = space::vm::vmInit(argc, argv); !options) {
    std::fprintf(stderr, "space-agent: %s\n", options.error().message.c_str());
  } else {
    rc = space::agent::serve(*options);
  }
  if (getpid() == 1) {
    sync();
    reboot(RB_AUTOBOOT);
  }
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  // The jail execs the agent from a sealed memfd, which would name the process "memfd:space-age".
  prctl(PR_SET_NAME, "space-agent");
  if (argc >= 2 && std::strcmp(argv[1], "--jail-init") == 0) {
    auto options = space::jail::jailInit(argc, argv);
    if (!options) {
      std::fprintf(stderr, "space-agent: jail init: %s\n", options.error().message.c_str());
      return 1;
    }
    return space::agent::serve(*options);
  }
  if (hasArg(argc, argv, "--vm-init")) return vmInitMain(argc, argv);
  if (argc >= 3 && std::strcmp(argv[1], "--listen") == 0) {
    space::agent::ServeOptions options;
    options.listen_fd = listenUnix(argv[2]);
    if (options.listen_fd < 0) {
      std::fprintf(stderr, "space-agent: listen on %s: %s\n", argv[2], std::strerror(errno));
      return 1;
    }
    for (int i = 3; i + 1 < argc; i += 2) {
      if (std::strcmp(argv[i], "--root") == 0) {
        options.root = argv[i + 1];
        options.publish_generation = true;  // never into the host's own /run
      } else if (std::strcmp(argv[i], "--vmstat") == 0) {
        options.vmstat_path = argv[i + 1];  // tests: a file of their own stands in for a guest's /proc/vmstat
      }
    }
    if (const char* path = getenv("PATH")) options.base_env["PATH"] = path;
    options.is_pid1 = getpid() == 1;
    return space::agent::serve(options);
  }
  std::fprintf(stderr,
               "usage: space-agent --jail-init …  |  space-agent --listen PATH [--root DIR] [--vmstat FILE]  |  "
               "space-agent --vm-init\n");
  return 2;
}
