// Steps of the guest's init, in order: mounts → modules → port. Failures carry errno and the path.
#include "runtime/vm/inside/vm_init.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "common/unique_fd.h"
#include "sys/rtnetlink.h"

namespace space::vm {
namespace {

using Clock = std::chrono::steady_clock;

constexpr auto kPortWait = std::chrono::seconds(20);
constexpr const char* kGuestPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

Status mountOne(const char* source, const char* target, const char* type, unsigned long flags, const char* data) {
  mkdir(target, 0755);
  if (mount(source, target, type, flags, data) < 0 && errno != EBUSY)
    return sysError(errno, "mount {} at {}", type, target);
  return ok();
}

Status mountKernelFilesystems() {
  TRY(mountOne("devtmpfs", "/dev", "devtmpfs", MS_NOSUID, "mode=0755"));
  TRY(mountOne("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr));
  TRY(mountOne("sysfs", "/sys", "sysfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr));
  // PTY sessions need devpts; /dev/ptmx from devtmpfs multiplexes onto it.
  TRY(mountOne("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, "mode=0620,ptmxmode=0666"));
  TRY(mountOne("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777"));
  TRY(mountOne("tmpfs", "/run", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755"));
  return ok();
}

// The kernel starts init without fds 0-2 when the initramfs lacks /dev/console; now that devtmpfs is
// mounted, give the agent the serial console for its log.
void attachConsole() {
  int fd = open("/dev/console", O_RDWR | O_NOCTTY);
  if (fd < 0) return;
  for (int target = 0; target <= 2; ++target) {
    if (fcntl(target, F_GETFD) < 0) dup2(fd, target);
  }
  if (fd > 2) close(fd);
}

// finit_module(2) has no glibc wrapper. An empty parameter string lets the kernel apply parameters
// from its command line (virtio_mmio.device=… from QEMU's microvm machine).
Status loadModule(const std::string& path) {
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return sysError(errno, "open module {}", path);
  // EEXIST: built in or already loaded. ENODEV: the module declines this (virtual) CPU, as crc32c-intel
  // does without SSE4.2 under TCG; a generic fallback is in the list too.
  if (syscall(SYS_finit_module, fd.get(), "", 0) < 0 && errno != EEXIST && errno != ENODEV)
    return sysError(errno, "finit_module {}", path);
  return ok();
}

Status loadModules() {
  std::ifstream in(kModuleListPath);
  if (!in) return ok();  // a kernel with everything built in needs no list
  std::stringstream text;
  text << in.rdbuf();
  for (const auto& path : parseModuleList(text.str())) TRY(loadModule(path));
  return ok();
}

std::string readFirstLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// virtio_console names each port's device after its position (vport0p1); the name the host gave it
// is in sysfs. Ports appear asynchronously after the driver has bound, hence the wait.
Result<UniqueFd> openAgentPort() {
  auto deadline = Clock::now() + kPortWait;
  for (;;) {
    if (DIR* dir = opendir("/sys/class/virtio-ports")) {
      std::string found;
      while (dirent* e = readdir(dir)) {
        if (e->d_name[0] == '.') continue;
        std::string entry = e->d_name;
        if (readFirstLine("/sys/class/virtio-ports/" + entry + "/name") == kAgentPortName) found = entry;
      }
      closedir(dir);
      if (!found.empty()) {
        std::string dev = "/dev/" + found;
        UniqueFd fd(open(dev.c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC | O_NOCTTY));
        if (fd) return fd;
        if (errno != ENOENT) return sysError(errno, "open {}", dev);
      }
    }
    if (Clock::now() > deadline)
      return makeError(ErrorKind::kNotFound, "no virtio-serial port named {} after {} s", kAgentPortName,
                       std::chrono::duration_cast<std::chrono::seconds>(kPortWait).count());
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

// The root device named on the kernel command line (`space.root=/dev/vda`), empty when the guest runs
// from the initramfs alone. The kernel keeps dotted parameters to itself, so init reads /proc/cmdline.
std::string rootDeviceFromCmdline() {
  std::ifstream in("/proc/cmdline");
  std::string word;
  while (in >> word) {
    if (word.rfind("space.root=", 0) == 0) return word.substr(11);
  }
  return "";
}

// Mounts the template's filesystem from virtio-blk and makes it the root, keeping the kernel
// filesystems mounted above. The initramfs stays in memory underneath (it cannot be unmounted); its few
// MiB are part of the template's shared memory image.
Status switchRoot(const std::string& device) {
  constexpr const char* kNewRoot = "/newroot";
  auto deadline = Clock::now() + kPortWait;
  // virtio_blk registers the disk asynchronously after the driver loads.
  while (access(device.c_str(), F_OK) != 0) {
    if (Clock::now() > deadline) return makeError(ErrorKind::kNotFound, "root device {} did not appear", device);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  mkdir(kNewRoot, 0755);
  if (mount(device.c_str(), kNewRoot, "ext4", MS_NOATIME, nullptr) < 0)
    return sysError(errno, "mount {} (ext4) at {}", device, kNewRoot);
  for (const char* m : {"/dev", "/proc", "/sys", "/run"}) {
    std::string target = std::string(kNewRoot) + m;
    mkdir(target.c_str(), 0755);
    if (mount(m, target.c_str(), nullptr, MS_MOVE, nullptr) < 0) return sysError(errno, "move {} to {}", m, target);
  }
  if (chdir(kNewRoot) < 0) return sysError(errno, "chdir {}", kNewRoot);
  if (mount(".", "/", nullptr, MS_MOVE, nullptr) < 0) return sysError(errno, "move {} to /", kNewRoot);
  if (chroot(".") < 0) return sysError(errno, "chroot {}", kNewRoot);
  if (chdir("/") < 0) return sysError(errno, "chdir /");
  return ok();
}

}  // namespace

std::vector<std::string> parseModuleList(const std::string& text) {
  std::vector<std::string> paths;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    size_t b = line.find_first_not_of(" \t\r");
    if (b == std::string::npos || line[b] == '#') continue;
    size_t e = line.find_last_not_of(" \t\r");
    paths.push_back(line.substr(b, e - b + 1));
  }
  return paths;
}

Result<agent::ServeOptions> vmInit(int argc, char** argv) {
  TRY(mountKernelFilesystems().map_error([](Error e) { return e.context("vm init"); }));
  attachConsole();
  TRY(loadModules().map_error([](Error e) { return e.context("vm init: load modules"); }));
  if (std::string device = rootDeviceFromCmdline(); !device.empty())
    TRY(switchRoot(device).map_error([](Error e) { return e.context("vm init: switch root"); }));
  sethostname("space", 5);
  // Loopback works in every VM (part of the template); the NIC is configured at hand-over, when the
  // host has given the sandbox its subnet (set_identity).
  if (auto rtnl = sys::Rtnl::open()) (void)rtnl->setUp("lo");
  mkdir("/root", 0700);
  mkdir("/tmp", 01777);
  ASSIGN_OR_RETURN(UniqueFd port, openAgentPort().map_error([](Error e) { return e.context("vm init"); }));

  agent::ServeOptions options;
  options.device_fd = port.release();
  options.root = "/";
  options.base_env["PATH"] = kGuestPath;
  options.base_env["HOME"] = "/root";
  options.base_env["TERM"] = "xterm";
  options.is_pid1 = getpid() == 1;
  options.publish_generation = true;     // on the /run tmpfs, which is guest memory like the processes
  options.vmstat_path = "/proc/vmstat";  // the guest's own kernel: its OOM kills are this sandbox's
  return options;
}

}  // namespace space::vm
