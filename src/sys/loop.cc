#include "sys/loop.h"

#include <fcntl.h>
#include <linux/loop.h>
#include <sys/ioctl.h>

#include <cstring>

namespace space::sys {

Result<LoopDevice> attachLoopDevice(const std::string& backing_file) {
  UniqueFd backing(open(backing_file.c_str(), O_RDWR | O_CLOEXEC));
  if (!backing) return sysError(errno, "open {}", backing_file);
  UniqueFd control(open("/dev/loop-control", O_RDWR | O_CLOEXEC));
  if (!control) return sysError(errno, "open /dev/loop-control");
  // Another process may take the free device between GET_FREE and CONFIGURE (EBUSY): retry a few times.
  for (int attempt = 0; attempt < 8; ++attempt) {
    int n = ioctl(control.get(), LOOP_CTL_GET_FREE);
    if (n < 0) return sysError(errno, "LOOP_CTL_GET_FREE");
    LoopDevice dev;
    dev.path = "/dev/loop" + std::to_string(n);
    dev.fd.reset(open(dev.path.c_str(), O_RDWR | O_CLOEXEC));
    if (!dev.fd) return sysError(errno, "open {}", dev.path);
    loop_config config;
    std::memset(&config, 0, sizeof config);
    config.fd = static_cast<uint32_t>(backing.get());
    config.info.lo_flags = LO_FLAGS_AUTOCLEAR;
    std::strncpy(reinterpret_cast<char*>(config.info.lo_file_name), backing_file.c_str(), LO_NAME_SIZE - 1);
    if (ioctl(dev.fd.get(), LOOP_CONFIGURE, &config) == 0) return dev;
    if (errno != EBUSY) return sysError(errno, "LOOP_CONFIGURE {} <- {}", dev.path, backing_file);
  }
  return sysError(EBUSY, "attach loop device for {}", backing_file);
}

}  // namespace space::sys
