// VmRuntime: the microVM tier. Each sandbox is a QEMU `microvm` with its own kernel; space-agent is the
// guest's PID 1 and reaches spaced over a virtio-serial port bound to a unix socket in the VM's
// directory. QEMU is driven over QMP (pause = stop, resume = cont). KVM when /dev/kvm is usable, else
// TCG (software emulation: same boundary, slower). Design and figures: docs/vm.md,
// docs/decisions/0003-vm-tier.md.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "runtime/runtime.h"
#include "runtime/vm/launch.h"
#include "runtime/vm/qmp.h"

namespace space::vm {

enum class AccelMode { kAuto, kKvm, kTcg };

struct VmConfig {
  std::string state_dir;  // VMs live in <state_dir>/vms/<id> unless the spec names a dir
  std::string qemu = "qemu-system-x86_64";
  std::string kernel = "/var/cache/space/vm/vmlinuz";  // scripts/vm/build-guest
  std::string initrd = "/var/cache/space/vm/initramfs.cpio";
  AccelMode accel = AccelMode::kAuto;
  bool allow_tcg = true;  // false: KVM or nothing (operators who refuse emulation)
  std::string extra_cmdline;
  // Cold boot of a generic kernel under TCG on a loaded 2-core host takes tens of seconds.
  std::chrono::milliseconds start_timeout{180000};
};

class VmRuntime : public runtime::Runtime {
 public:
  // Checks the guest artifacts and the accelerator choice.
  static Result<std::unique_ptr<VmRuntime>> create(const VmConfig& config);

  std::string name() const override { return "vm"; }
  runtime::Capabilities capabilities() const override { return {.pause = true}; }

  // Boots one VM for spec with its RAM in <template_dir>/memory, waits for the agent, saves the device
  // state to <template_dir>/state and ends the VM. restore() of the returned ref starts new VMs from it.
  Result<runtime::SnapshotRef> warmTemplate(const runtime::SandboxSpec& spec, const std::string& template_dir);

  Result<runtime::Instance> start(const runtime::SandboxSpec& spec) override;
  Status pause(runtime::Instance& inst) override;
  Status resume(runtime::Instance& inst) override;
  Result<runtime::SnapshotRef> snapshot(runtime::Instance& inst, runtime::SnapshotKind kind) override;
  Result<runtime::Instance> restore(const runtime::SnapshotRef& ref, const runtime::SandboxSpec& spec) override;
  Status destroy(const runtime::PersistedInstance& inst) override;
  Result<runtime::Instance> reattach(const runtime::PersistedInstance& inst) override;
  Result<runtime::Usage> usage(const runtime::PersistedInstance& inst) override;

  Accel accel() const { return accel_; }
  // The QemuSpec start() would use for spec (exposed for tests and the bench).
  QemuSpec qemuSpecFor(const runtime::SandboxSpec& spec, const std::string& dir) const;

 private:
  VmRuntime(VmConfig config, Accel accel) : config_(std::move(config)), accel_(accel) {}
  std::string vmDir(const runtime::SandboxSpec& spec) const;
  // The QMP connection of a live VM, connecting (after a restart) from the persisted state on demand.
  Result<QmpClient*> qmpFor(const runtime::PersistedInstance& inst);
  // Connects QMP, runs before_agent on it (loading a snapshot), then completes the agent handshake.
  Result<runtime::Instance> connectInstance(const std::string& id, pid_t pid, const std::string& dir,
                                            std::chrono::steady_clock::time_point deadline,
                                            const std::function<Status(QmpClient&)>& before_agent = {});
  Result<runtime::Instance> launchAndConnect(const runtime::SandboxSpec& spec, const QemuSpec& qemu,
                                             const std::function<Status(QmpClient&)>& before_agent = {});

  VmConfig config_;
  Accel accel_;
  std::mutex mu_;
  std::map<std::string, std::unique_ptr<QmpClient>> qmp_;  // by sandbox id
};

// The host's TSC frequency in kHz (0 when unknown). Under TCG the guest reads the host's TSC, and the
// guest kernel cannot calibrate it on microvm (no PIT/HPET reference): SPACE passes tsc_early_khz.
uint64_t hostTscKhz();

}  // namespace space::vm
