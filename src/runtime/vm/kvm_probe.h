// Whether this host's KVM really runs SPACE's guest. A /dev/kvm that opens proves little: a paravirtual
// KVM, nested virtualisation switched off or a broken module all give a node that opens and a guest that
// hangs. So "KVM usable" means a confined VM of the guest reached its agent under -accel kvm within a
// deadline. The boot itself is VmRuntime's (it owns confinement); this file holds what comes before and
// around it: the host-level checks that need no VM, the verdict, and its host-wide cache (one probe per
// host boot for a given kernel, QEMU and guest). docs/vm.md, "KVM or emulation".
#pragma once

#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "common/result.h"

namespace space::vm {

enum class KvmState {
  kProven,   // a guest reached its agent under KVM
  kFailed,   // /dev/kvm is there but spaced may not open it, or the guest did not answer under KVM
  kProbing,  // the probe VM is running
  kAbsent,   // no /dev/kvm
  kOff,      // vm_accel = tcg: KVM not tried
};

const char* kvmStateName(KvmState state);

struct KvmVerdict {
  KvmState state = KvmState::kProbing;
  std::string reason;      // why KVM is not used; empty when proven
  std::string checked_at;  // ISO-8601 UTC of the probe
  int64_t probe_ms = 0;    // how long the probe took (0: no VM was needed to decide)
  bool cached = false;     // read from the host-wide cache, not probed by this process

  bool usable() const { return state == KvmState::kProven; }
  nlohmann::json toJson() const;
  static std::optional<KvmVerdict> fromJson(const nlohmann::json& j);
};

// The checks that need no VM: the node exists, is a character device, opens read-write for spaced, and
// speaks the KVM API. A failing verdict, or nothing when only a VM can tell.
std::optional<KvmVerdict> kvmPreflight(const std::string& node = "/dev/kvm");

// What a verdict depends on: the host's boot, its kernel, the QEMU binary, the guest's kernel and
// initramfs (each by path, size and modification time). A change of any of them probes again.
std::string kvmProbeKey(const std::string& qemu, const std::string& kernel, const std::string& initrd);

// The host-wide cache: one JSON file per key in dir (default /run/space/kvm-probe, a tmpfs: gone with the
// boot, like the verdict's validity). A lock file serialises probes of one key across daemons, so
// that a second spaced waits for the first's verdict instead of probing beside it.
class KvmProbeCache {
 public:
  explicit KvmProbeCache(std::string dir) : dir_(std::move(dir)) {}
  std::optional<KvmVerdict> read(const std::string& key) const;
  Status write(const std::string& key, const KvmVerdict& verdict) const;
  // Holds the key's lock until destroyed (flock; released by the kernel if the process dies).
  class Lock {
   public:
    explicit Lock(int fd) : fd_(fd) {}
    Lock(Lock&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
    Lock& operator=(Lock&&) = delete;
    ~Lock();

   private:
    int fd_;
  };
  Result<Lock> lock(const std::string& key) const;

 private:
  std::string pathOf(const std::string& key, const char* suffix) const;
  std::string dir_;
};

// Now, as ISO-8601 UTC.
std::string isoNowUtc();

}  // namespace space::vm
