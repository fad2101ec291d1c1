// Starting a QEMU `microvm` for one sandbox: the argv built from a spec (a pure function, tested), and
// the VMM process itself. Every host-side path of a VM lives in its directory: QMP and agent sockets,
// the console log, QEMU's own log.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"
#include "common/unique_fd.h"

namespace space::vm {

struct DiskSpec {
  std::string path;
  std::string format = "raw";  // "raw" | "qcow2"
  bool read_only = false;
};

enum class Accel { kKvm, kTcg };

struct QemuSpec {
  std::string qemu = "qemu-system-x86_64";
  Accel accel = Accel::kTcg;
  uint32_t vcpus = 1;
  uint64_t memory_mib = 256;
  std::string kernel;
  std::string initrd;           // empty: none (a VM restored from a snapshot has its initramfs in RAM already)
  std::string extra_cmdline;    // appended to the guest kernel's command line
  std::vector<DiskSpec> disks;  // /dev/vda, /dev/vdb, … in order
  std::string dir;              // the VM's directory (sockets, logs)
  // Guest RAM in this file instead of anonymous memory. shared: writes reach the file (a template being
  // warmed); private: a copy-on-write mapping of it (a VM restored from the template; the file never
  // changes, and untouched pages are shared by every VM of the template).
  std::string memory_file;
  bool memory_file_shared = false;
  bool incoming_defer = false;  // start stopped, waiting for QMP migrate-incoming
  // The incoming state holds devices only (a sandbox snapshot: xen-save-devices-state, the RAM is written
  // by the host): no configuration section, no VM description expected.
  bool device_state_only = false;
  uint32_t tcg_tb_cache_mib = 0;  // TCG translation cache size; 0 = QEMU's default
  // The guest's one NIC (virtio-net), part of every VM and so of every template snapshot. tap_fd >= 0: a
  // descriptor of the sandbox's host tap (`spc<N>`, see net/veth.h) that QEMU inherits at that number;
  // -1: the NIC hangs off an empty hub (template warm-up, VMs of a node without egress): nothing
  // reaches it and nothing it sends goes anywhere.
  int tap_fd = -1;
  std::string mac;  // "52:54:00:…"; empty = QEMU's default
  // The serial console into a file: only for boots SPACE runs itself (template warm-up, cold boot
  // before any user code), where the log explains a failure. Otherwise a bounded ring buffer.
  std::string console_file;
};

// Host paths inside the VM's directory.
struct VmPaths {
  std::string qmp, agent, log;
  static VmPaths in(const std::string& dir) { return {dir + "/qmp.sock", dir + "/agent.sock", dir + "/qemu.log"}; }
};

// The guest's serial console of a VM that runs user code goes to a ring buffer inside QEMU (chardev
// `console`, read with QMP ringbuf-read): a guest that floods its console cannot fill the host's disk.
inline constexpr const char* kConsoleChardev = "console";
inline constexpr uint32_t kConsoleRingBytes = 64 * 1024;

// The virtio devices of every SPACE VM, in the order QEMU places them on microvm's virtio-mmio slots. A
// template's device state is only valid for this set: it is part of the key of a template's artifacts,
// so a change here makes every template's VM artifacts again.
inline constexpr const char* kDeviceModel = "serial+blk+net1";
// The id QEMU gives the NIC's backend (netdev).
inline constexpr const char* kNetdevId = "net0";

// The guest kernel command line SPACE uses, before spec.extra_cmdline.
std::string guestCmdline(const QemuSpec& spec);
std::vector<std::string> buildQemuArgv(const QemuSpec& spec);

// Where a VMM binary named bare (as in QemuSpec::qemu) is found: /usr/bin, /usr/local/bin, /bin, in that order.
// A name with a slash is taken as it is.
Result<std::string> findQemuBinary(const std::string& name);

// The VMM process. Started in its own session so that it outlives spaced (reattach after a restart);
// the pidfd makes signalling and waiting immune to pid reuse.
struct QemuProcess {
  pid_t pid = -1;
  UniqueFd pidfd;
};

Result<QemuProcess> launchQemu(const QemuSpec& spec);

// Whether pid is still the QEMU of this VM directory (its command line names the QMP socket): guards
// destroy and reattach, which start from a persisted pid, against pid reuse.
bool isQemuOf(pid_t pid, const std::string& dir);

// The QEMU whose command line names this VM directory's QMP socket (0: none), found through /proc.
pid_t findQemuOf(const std::string& dir);

// Kills the VMM and waits until it has exited (its descriptors closed), reaping it when it is our child.
// Killing QEMU is the whole teardown of the guest.
void killVmm(pid_t pid);

// The last `max` bytes of a log file (QEMU's log, a console), for error messages.
std::string tailOfFile(const std::string& path, size_t max);

}  // namespace space::vm
