#include "runtime/vm/unix_socket.h"

#include <sys/socket.h>
#include <sys/un.h>

#include <cstring>
#include <thread>

namespace space::vm {

Result<UniqueFd> connectUnixUntil(const std::string& path, std::chrono::steady_clock::time_point deadline) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path)
    return makeError(ErrorKind::kInvalidArgument, "socket path too long: {}", path);
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  for (;;) {
    UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd) return sysError(errno, "socket AF_UNIX");
    if (connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) return fd;
    int err = errno;
    if ((err != ENOENT && err != ECONNREFUSED) || std::chrono::steady_clock::now() > deadline) {
      Error e = sysError(err, "connect {}", path).value();
      e.kind = ErrorKind::kUnavailable;
      return tl::unexpected(e);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace space::vm
