// VmRuntime: the microVM tier. Each sandbox is a QEMU `microvm` with its own kernel; space-agent is the
// guest's PID 1 and reaches spaced over a virtio-serial port bound to a unix socket in the VM's
// directory. QEMU is driven over QMP (pause = stop, resume = cont). KVM when /dev/kvm is usable, else
// TCG (software emulation: same boundary, slower). New VMs restore from a per-template memory snapshot
// (VmTemplates); the VMM is confined (confine.h). Design and figures: docs/vm.md,
// docs/decisions/0003-vm-tier.md.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "common/unique_fd.h"
#include "net/address_pool.h"
#include "runtime/host/cgroup.h"
#include "runtime/memory_sealer.h"
#include "runtime/runtime.h"
#include "runtime/vm/confine.h"
#include "runtime/vm/kvm_probe.h"
#include "runtime/vm/launch.h"
#include "runtime/vm/qmp.h"

namespace space::vm {

enum class AccelMode { kAuto, kKvm, kTcg };

struct VmConfig {
  std::string state_dir;  // VMs live in <state_dir>/vms/<id> unless the spec names a dir; templates in <state_dir>/vm
  std::string qemu = "qemu-system-x86_64";
  std::string kernel = "/var/cache/space/vm/vmlinuz";  // scripts/vm/build-guest
  std::string initrd = "/var/cache/space/vm/initramfs.cpio";
  // auto: KVM where a probe VM proved it runs the guest (kvm_probe.h), else TCG; kvm: the probe must
  // succeed (start-up fails with its reason); tcg: emulation, KVM never tried.
  AccelMode accel = AccelMode::kAuto;
  bool allow_tcg = true;  // false: KVM or nothing (operators who refuse emulation)
  std::string kvm_node = "/dev/kvm";
  // Where probe verdicts are cached host-wide (a tmpfs: one probe per host boot), and how long the probe
  // VM has to reach its agent under KVM.
  std::string kvm_probe_cache_dir = "/run/space/kvm-probe";
  std::chrono::milliseconds kvm_probe_timeout{20000};
  std::string extra_cmdline;
  // Cold boot of a generic kernel under TCG on a loaded 2-core host takes tens of seconds.
  std::chrono::milliseconds start_timeout{180000};
  // Starts every VMM (confined: SECURITY.md V2). A test may put a double here: it is handed what a real
  // VMM would be (its QemuSpec, and the VmmJail its uid, files and devices are confined to).
  std::function<Result<QemuProcess>(const QemuSpec&, const VmmJail&)> launch_vmm = launchConfinedQemu;
  std::string cgroup_parent = "space";
  uint64_t vmm_overhead_mib = 384;  // QEMU's own memory on top of guest RAM (TCG's translation cache)
  uint32_t vmm_pids = 128;          // QEMU's threads (vCPUs, I/O workers)
  uint32_t tcg_tb_cache_mib = 128;  // TCG translation-block cache (QEMU's default is 1 GiB)
  uid_t warm_uid = 0x0FFFFFF0;      // the host uid of template warm-up VMMs
  // What a pooled VM is: true = restored, its guest code paths exercised once, then stopped (a create is
  // `cont` plus the identity); false = a VMM waiting at -incoming defer (a create is the whole restore).
  // Under TCG the first run of every guest path costs a translation, so the difference is large there.
  bool pool_restored = true;
  // The sandbox network (docs/egress.md): each VM gets a /30 of this pool and a host tap into the egress
  // gateway at prepare; its guest configures the sandbox end at hand-over. Null: the VM's NIC hangs off
  // an empty hub (no network).
  std::shared_ptr<net::AddressPool> network_pool;
  // Where VM disk overlays and VM snapshots live: the layer volume's layers/ and snapshots/ (it shares
  // blocks between files, so a snapshot, rollback or fork clones an overlay instead of copying it;
  // runtime/host/layer_volume.h). Empty: overlays in each VM's directory, no snapshots.
  std::string layers_dir, snapshots_dir;
  // Null: a snapshot's memory is stored in the clear (root-only, mode 0400).
  std::shared_ptr<runtime::MemorySealer> memory_sealer;
  // Where a sealed memory is opened for a restore: a tmpfs, so the clear pages never reach a disk.
  std::string clear_memory_dir = "/dev/shm";
};

// A template's VM artifacts for one machine shape, made once (VmRuntime::ensureTemplate) and never
// changed after: the ext4 image of the template's tree (shared by all shapes with that disk size), the
// disk state of the warm-up VM on top of it, the guest RAM file and the device state.
struct VmTemplate {
  std::string dir;
  std::string base_image;  // raw ext4, read-only
  std::string disk;        // qcow2 on base_image: the warm-up VM's writes (mount, journal-less superblock)
  std::string memory, state;
  uint32_t vcpus = 1;
  uint64_t memory_mib = 256;
  std::string stamp;  // random, per build: VMMs prepared from an older build are refused
};

// The template artifacts made in dir (its template.json).
Result<VmTemplate> readTemplate(const std::string& dir);

class VmRuntime : public runtime::Runtime {
 public:
  // Checks the guest artifacts and chooses the accelerator. Under `auto` with no cached verdict the KVM
  // probe runs in the background: create returns at once, and every VM launch waits for the verdict.
  static Result<std::unique_ptr<VmRuntime>> create(const VmConfig& config);
  ~VmRuntime() override;

  std::string name() const override { return "vm"; }
  runtime::Capabilities capabilities() const override {
    bool snap = !config_.snapshots_dir.empty();
    return {.pause = true,
            .snapshot_filesystem = snap,
            .snapshot_memory = snap,
            .rollback = snap,
            .fork = snap,
            .networked = networked(),
            .own_kernel = true,
            .cold_boot = true,
            .warm_templates = true,
            .accelerated = accelIfDecided() == Accel::kKvm};
  }
  // The accelerator (once decided) and what is known of KVM on this host.
  nlohmann::json describe() const override;

  // The template's artifacts for spec's shape (vCPUs, memory, disk), made on first use: ext4 image of
  // spec.template_rootfs, then one VM booted from it whose RAM and device state are saved. Concurrent
  // callers for one key wait for one build. Without a template_rootfs the guest runs from its initramfs.
  Result<VmTemplate> ensureTemplate(const runtime::SandboxSpec& spec);
  // Whether ensureTemplate(spec) would find the artifacts made already.
  bool hasTemplate(const runtime::SandboxSpec& spec) const;

  // Boots spec's guest from the kernel, without a memory snapshot (cold boot), with the template's disk.
  Result<runtime::Instance> bootCold(const runtime::SandboxSpec& spec);
  Result<runtime::Instance> coldStart(const runtime::SandboxSpec& spec) override { return bootCold(spec); }
  // ensureTemplate(spec), as the manager's `template warm` reports it.
  Result<nlohmann::json> warmTemplate(const runtime::SandboxSpec& spec) override;
  bool templateReady(const runtime::SandboxSpec& spec) const override { return hasTemplate(spec); }
  // docs/vm.md's figures: about 2 s under KVM, 8 s under TCG; unknown until the KVM probe decided.
  std::optional<int64_t> typicalWarmMs() const override {
    auto accel = accelIfDecided();
    if (!accel) return std::nullopt;
    return *accel == Accel::kKvm ? 2000 : 8000;
  }
  // A VM restored from a template or snapshot is a copy of another machine: it gets its own hostname, RNG
  // state, clock and machine id (and, handed out, its network) before anyone may run code in it (V4).
  Status handOver(runtime::Instance& inst, const runtime::HandOver& h) override;
  Status renewIdentity(runtime::Instance& inst, const runtime::HandOver& h) override;
  std::optional<runtime::SandboxNetwork> network(const runtime::PersistedInstance& inst) const override;
  bool parked(const runtime::PersistedInstance& inst) const override { return inst.state.value("parked", false); }

  Result<runtime::Instance> start(const runtime::SandboxSpec& spec) override;
  Result<runtime::Instance> prepare(const runtime::SandboxSpec& spec) override;
  Status activate(runtime::Instance& inst) override;
  bool alive(const runtime::Instance& inst) override;
  Status pause(runtime::Instance& inst) override;
  Status resume(runtime::Instance& inst) override;
  Result<runtime::SnapshotRef> snapshot(runtime::Instance& inst, runtime::SnapshotKind kind) override;
  Result<runtime::Instance> restore(const runtime::SnapshotRef& ref, const runtime::SandboxSpec& spec) override;
  Result<runtime::Instance> rollback(runtime::Instance& inst, const runtime::SnapshotRef& ref) override;
  // A VM's rollback is a restore from the snapshot again (its old VMM, if any is left, is replaced).
  Result<runtime::Instance> finishRollback(runtime::Instance& old, const Result<runtime::SnapshotRef>& snap,
                                           uint32_t files_uid_base) override;
  std::string snapshotDirFor(const std::string& snapshot_id) const override;
  Result<runtime::SnapshotRef> adoptSnapshot(runtime::SnapshotRef ref, const runtime::PersistedInstance& target,
                                             uint64_t disk_bytes) override;
  Status destroy(const runtime::PersistedInstance& inst) override;
  Result<runtime::Instance> reattach(const runtime::PersistedInstance& inst) override;
  Result<runtime::Usage> usage(const runtime::PersistedInstance& inst) override;

  // The accelerator new VMs get; meaningful once decided (accelIfDecided), TCG until then.
  Accel accel() const { return accel_.load(); }
  std::optional<Accel> accelIfDecided() const;
  // Waits for the KVM probe's verdict (at most its timeout and a margin); an error when the tier turned
  // out unavailable (KVM failed and the TCG fallback is off).
  Status awaitAccel();
  // What is known of KVM on this host, and why the tier is unavailable (empty: it is available or still
  // probing).
  KvmVerdict kvm() const;
  std::string unavailableReason() const override;
  bool networked() const { return config_.network_pool != nullptr; }
  const VmConfig& config() const { return config_; }
  // The QemuSpec a VM of spec would get in dir (exposed for tests and the bench).
  QemuSpec qemuSpecFor(const runtime::SandboxSpec& spec, const std::string& dir) const;

 private:
  VmRuntime(VmConfig config, std::unique_ptr<host::CgroupBackend> cgroups)
      : config_(std::move(config)), cgroups_(std::move(cgroups)) {}
  Status chooseAccel();
  // Takes a verdict: the accelerator (or the tier's unavailability) follows from it and the settings.
  void decide(KvmVerdict verdict);
  // The verdict for key: the cache's, else a probe VM's (written to the cache), under the key's lock.
  KvmVerdict probeWithCache(const std::string& key);
  // Boots the guest from its initramfs in a confined VMM under -accel kvm and waits for its agent's hello.
  KvmVerdict probeBoot();
  std::string vmDir(const runtime::SandboxSpec& spec) const;
  void cleanInterruptedWarmups();
  std::string templateDir(const runtime::SandboxSpec& spec) const;
  Status buildTemplate(const runtime::SandboxSpec& spec, const std::string& dir);
  Result<std::string> ensureBaseImage(const runtime::SandboxSpec& spec, uint64_t disk_bytes);
  // The template's RAM as a sealed memfd (copied once per daemon): a confined VMM maps it privately
  // without any path to, or write access on, the template's file.
  Result<int> memoryFd(const VmTemplate& tpl);
  // The inode of the file a VMM of tpl maps as guest RAM (the memfd), to find the mapping.
  Result<ino_t> memoryInode(const VmTemplate& tpl);
  // The VM's directory, made.
  Result<std::string> makeVmDir(const runtime::SandboxSpec& spec) const;
  // The sandbox's network: a /30 and a host tap (nothing without a network pool). net_state is set before
  // the tap exists, so that the caller's undo (and destroy) can take both back after any failure.
  Status allocateNetwork(nlohmann::json& net_state, UniqueFd& tap);
  // Where the VM of sandbox `id` in `dir` keeps its disk overlay.
  std::string overlayPath(const std::string& id, const std::string& dir) const;
  // The QemuSpec of a VMM that restores tpl's machine (started stopped, waiting for a device state), with
  // the descriptor of the template's RAM it must inherit and the files it reads.
  Result<QemuSpec> restoringSpec(const runtime::SandboxSpec& spec, const VmTemplate& tpl, const std::string& dir,
                                 const std::string& overlay, int* memory_fd, std::vector<std::string>* read_only);
  // A VMM for a sandbox snapshot (vm_snapshot.cc): spawned like a template restore, then the snapshot's
  // guest pages written into its RAM, its device state loaded and its agent connected.
  Result<runtime::Instance> startFromSnapshot(const runtime::SandboxSpec& spec, const std::string& snapshot_dir,
                                              const VmTemplate& tpl, const std::string& overlay, UniqueFd tap,
                                              nlohmann::json extra);
  // Spawns a confined QEMU (config_.launch_vmm) in its cgroup; `cgroup_id` names the group.
  Result<QemuProcess> spawn(const QemuSpec& qemu, const std::string& cgroup_id, uid_t uid,
                            const std::vector<std::string>& read_only, int memory_fd, uint64_t memory_mib,
                            const std::vector<std::string>& writable = {}, int tap_fd = -1);
  // The QMP connection of a live VM, connecting (after a restart) from the persisted state on demand.
  Result<QmpClient*> qmpFor(const runtime::PersistedInstance& inst);
  Result<std::shared_ptr<agent::AgentClient>> connectAgent(const std::string& dir,
                                                           std::chrono::steady_clock::time_point deadline);
  runtime::Instance instanceOf(const std::string& id, pid_t pid, const std::string& dir, nlohmann::json extra);
  void killAndClean(pid_t pid, const std::string& cgroup_id);
  // Runs a few commands every sandbox starts with (a shell, exec of a program): their pages land in the
  // guest's page cache (template warm-up) or their code paths in TCG's translation cache (a pooled VM).
  void exerciseGuest(agent::AgentClient& agent);

  VmConfig config_;
  std::atomic<Accel> accel_{Accel::kTcg};
  mutable std::mutex accel_mu_;
  std::condition_variable accel_cv_;
  bool decided_ = false;
  KvmVerdict kvm_;
  std::string unavailable_;  // set when decided: why the tier cannot run VMs
  std::thread probe_thread_;
  std::atomic<pid_t> probe_pid_{0};  // the probe's VMM, killed if the runtime goes first
  std::atomic<bool> stopping_{false};
  uint64_t tsc_khz_ = 0;  // the host's TSC frequency, read once (TCG passes it to every guest)
  std::unique_ptr<host::CgroupBackend> cgroups_;
  std::mutex mu_;
  std::map<std::string, std::unique_ptr<QmpClient>> qmp_;        // by sandbox id
  std::map<std::string, std::shared_ptr<std::mutex>> building_;  // template key → build lock
  std::map<std::string, UniqueFd> memory_fds_;                   // template dir → sealed memfd
};

// The host's TSC frequency in kHz (0 when unknown). Under TCG the guest reads the host's TSC, and the
// guest kernel cannot calibrate it on microvm (no PIT/HPET reference): SPACE passes tsc_early_khz.
uint64_t hostTscKhz();

// The NIC's address of a VM on `subnet`: locally administered, unicast, unique per /30 (its index's low
// 24 bits).
std::string macFor(const net::SandboxSubnet& subnet);

// Builds a raw ext4 image of `tree` at `out` (size bytes, sparse), atomically (temporary name, fsync, rename).
Status buildExt4Image(const std::string& tree, const std::string& out, uint64_t size_bytes);
// A qcow2 overlay at `out` whose backing file is `backing` (its format `backing_format`).
Status createOverlay(const std::string& backing, const std::string& backing_format, const std::string& out);
// Bytes the tree takes on disk (allocated blocks), for sizing its image.
uint64_t treeBytes(const std::string& tree);

}  // namespace space::vm
