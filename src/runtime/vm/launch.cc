#include "runtime/vm/launch.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "sys/process.h"

extern char** environ;

namespace space::vm {

std::string guestCmdline(const QemuSpec& spec) {
  // pci=off: microvm has no PCI bus; probing for one only costs time.
  // console=ttyS0: the kernel's log goes to the console chardev. quiet: every console byte is a trapped I/O
  // write, costly under TCG. panic=-1 and reboot=t with QEMU's -no-reboot: a dying guest ends the VMM
  // instead of hanging. --vm-init (no '=', no '.') is passed by the kernel to init as an argument.
  std::string cmdline =
      "console=ttyS0 quiet loglevel=3 panic=-1 reboot=t random.trust_cpu=on pci=off rdinit=/sbin/space-agent --vm-init";
  if (!spec.extra_cmdline.empty()) cmdline += " " + spec.extra_cmdline;
  return cmdline;
}

Result<std::string> findQemuBinary(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  for (const char* dir : {"/usr/bin/", "/usr/local/bin/", "/bin/"}) {
    std::string p = std::string(dir) + name;
    if (access(p.c_str(), X_OK) == 0) return p;
  }
  return makeError(ErrorKind::kNotFound, "{} not found in /usr/bin, /usr/local/bin or /bin", name);
}

std::vector<std::string> buildQemuArgv(const QemuSpec& spec) {
  VmPaths paths = VmPaths::in(spec.dir);
  std::vector<std::string> a = {spec.qemu, "-nodefaults", "-no-user-config", "-nographic", "-no-reboot"};
  // microvm: no PCI, no firmware tables beyond what the kernel needs; devices are virtio-mmio. The
  // guest stalls at boot without the RTC here (calibration), hence rtc=on.
  std::string machine = "microvm,rtc=on";
  if (!spec.memory_file.empty()) machine += ",memory-backend=mem";
  if (spec.device_state_only) machine += ",suppress-vmdesc=on";
  a.insert(a.end(), {"-machine", machine});
  if (spec.device_state_only) a.insert(a.end(), {"-global", "migration.send-configuration=off"});
  if (spec.accel == Accel::kKvm) {
    a.insert(a.end(), {"-accel", "kvm", "-cpu", "host"});
  } else {
    std::string tcg = "tcg";
    if (spec.tcg_tb_cache_mib) tcg += ",tb-size=" + std::to_string(spec.tcg_tb_cache_mib);
    a.insert(a.end(), {"-accel", tcg});
  }
  a.insert(a.end(), {"-smp", std::to_string(spec.vcpus), "-m", std::to_string(spec.memory_mib) + "M"});
  if (!spec.memory_file.empty()) {
    a.insert(a.end(), {"-object", "memory-backend-file,id=mem,size=" + std::to_string(spec.memory_mib) + "M,mem-path=" +
                                      spec.memory_file + ",share=" + (spec.memory_file_shared ? "on" : "off")});
  }
  a.insert(a.end(), {"-kernel", spec.kernel});
  if (!spec.initrd.empty()) a.insert(a.end(), {"-initrd", spec.initrd});
  a.insert(a.end(), {"-append", guestCmdline(spec)});
  std::string console = spec.console_file.empty()
                            ? fmt::format("ringbuf,id={},size={}", kConsoleChardev, kConsoleRingBytes)
                            : fmt::format("file,id={},path={}", kConsoleChardev, spec.console_file);
  a.insert(a.end(), {"-chardev", console, "-serial", fmt::format("chardev:{}", kConsoleChardev)});
  a.insert(a.end(), {"-device", "virtio-serial-device,max_ports=2", "-chardev",
                     "socket,id=agent,path=" + paths.agent + ",server=on,wait=off", "-device",
                     "virtserialport,chardev=agent,name=space.agent"});
  for (size_t i = 0; i < spec.disks.size(); ++i) {
    const DiskSpec& d = spec.disks[i];
    std::string id = "disk" + std::to_string(i);
    a.insert(a.end(), {"-drive",
                       "id=" + id + ",file=" + d.path + ",format=" + d.format + ",if=none,cache=unsafe" +
                           (d.read_only ? ",read-only=on" : ""),
                       "-device", "virtio-blk-device,drive=" + id});
  }
  // The NIC after the disks: its virtio-mmio slot must be the one the template's device state names.
  std::string netdev = spec.tap_fd >= 0 ? fmt::format("tap,id={},fd={}", kNetdevId, spec.tap_fd)
                                        : fmt::format("hubport,id={},hubid=0", kNetdevId);
  std::string nic = fmt::format("virtio-net-device,netdev={}", kNetdevId);
  if (!spec.mac.empty()) nic += ",mac=" + spec.mac;
  a.insert(a.end(), {"-netdev", netdev, "-device", nic});
  a.insert(a.end(), {"-qmp", "unix:" + paths.qmp + ",server=on,wait=off"});
  if (spec.incoming_defer) a.insert(a.end(), {"-incoming", "defer"});
  return a;
}

Result<QemuProcess> launchQemu(const QemuSpec& spec) {
  VmPaths paths = VmPaths::in(spec.dir);
  // Stale sockets of an earlier run would let us connect to nothing.
  unlink(paths.qmp.c_str());
  unlink(paths.agent.c_str());
  std::vector<std::string> argv = buildQemuArgv(spec);
  std::vector<char*> cargv;
  for (auto& s : argv) cargv.push_back(s.data());
  cargv.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&actions);
  posix_spawnattr_init(&attr);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, paths.log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  // Own session: a signal to spaced's process group (Ctrl-C, a restart) does not reach the VMMs.
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  sigset_t empty, all;
  sigemptyset(&empty);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &empty);
  posix_spawnattr_setsigdefault(&attr, &all);
  pid_t pid = -1;
  int rc = posix_spawnp(&pid, spec.qemu.c_str(), &actions, &attr, cargv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) return sysError(rc, "spawn {}", spec.qemu);
  QemuProcess proc;
  proc.pid = pid;
  auto pidfd = sys::pidfdOpen(pid);
  if (pidfd) proc.pidfd = std::move(*pidfd);
  return proc;
}

bool isQemuOf(pid_t pid, const std::string& dir) {
  if (pid <= 0) return false;
  std::ifstream in("/proc/" + std::to_string(pid) + "/cmdline");
  if (!in) return false;
  std::stringstream ss;
  ss << in.rdbuf();
  std::string cmdline = ss.str();
  return cmdline.find("unix:" + VmPaths::in(dir).qmp + ",") != std::string::npos;
}

std::string tailOfFile(const std::string& path, size_t max) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  return s.size() > max ? s.substr(s.size() - max) : s;
}

void killVmm(pid_t pid) {
  if (pid <= 0) return;
  if (auto pidfd = sys::pidfdOpen(pid)) {
    (void)sys::pidfdSendSignal(pidfd->get(), SIGKILL);
    // Until it has exited (its descriptors closed: the tap gone), also when it is not our child.
    pollfd pfd{pidfd->get(), POLLIN, 0};
    while (poll(&pfd, 1, 5000) < 0 && errno == EINTR) {
    }
  }
  // After a daemon restart QEMU is no longer our child: waitpid fails with ECHILD, init reaps it.
  while (waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
  }
}

pid_t findQemuOf(const std::string& dir) {
  for (const auto& e :
       std::filesystem::directory_iterator("/proc", std::filesystem::directory_options::skip_permission_denied)) {
    const std::string name = e.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    pid_t pid = static_cast<pid_t>(std::stol(name));
    if (isQemuOf(pid, dir)) return pid;
  }
  return 0;
}

}  // namespace space::vm
