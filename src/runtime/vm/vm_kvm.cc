// VmRuntime's choice of accelerator: the KVM probe VM, its verdict, and the wait of VM launches for it
// (kvm_probe.h holds the checks and the cache around the probe).
#include <poll.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>

#include "runtime/vm/unix_socket.h"
#include "runtime/vm/vm_runtime.h"
#include "sys/process.h"

namespace space::vm {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

VmRuntime::~VmRuntime() {
  stopping_ = true;
  if (pid_t pid = probe_pid_.load()) (void)kill(pid, SIGKILL);
  if (probe_thread_.joinable()) probe_thread_.join();
}

Status VmRuntime::chooseAccel() {
  if (config_.accel == AccelMode::kTcg) {
    if (!config_.allow_tcg)
      return makeError(ErrorKind::kInvalidArgument,
                       "vm_accel is tcg but vm_allow_tcg is off: the vm tier has no accelerator");
    decide({.state = KvmState::kOff, .reason = "vm_accel is tcg (KVM not tried)", .checked_at = isoNowUtc()});
    return ok();
  }
  std::optional<KvmVerdict> verdict = kvmPreflight(config_.kvm_node);
  std::string key = kvmProbeKey(config_.qemu, config_.kernel, config_.initrd);
  if (!verdict) verdict = KvmProbeCache(config_.kvm_probe_cache_dir).read(key);
  // An operator who asked for KVM waits for the proof at start-up; it is the daemon's only accelerator.
  if (!verdict && config_.accel == AccelMode::kKvm) verdict = probeWithCache(key);
  if (verdict) {
    if (config_.accel == AccelMode::kKvm && !verdict->usable())
      return makeError(ErrorKind::kUnavailable, "KVM is not usable: {}", verdict->reason);
    if (!verdict->usable() && !config_.allow_tcg)
      return makeError(ErrorKind::kUnavailable, "KVM is not usable ({}) and the TCG fallback is off (vm_allow_tcg)",
                       verdict->reason);
    decide(std::move(*verdict));
    return ok();
  }
  // Not known yet: the probe runs beside the daemon. Jail creates never wait for it; VM launches do.
  {
    std::lock_guard lock(accel_mu_);
    kvm_ = {.state = KvmState::kProbing, .reason = "the KVM probe VM is running", .checked_at = isoNowUtc()};
  }
  spdlog::info("vm: probing KVM with a guest boot (at most {:g} s; the verdict is cached in {})",
               config_.kvm_probe_timeout.count() / 1000.0, config_.kvm_probe_cache_dir);
  probe_thread_ = std::thread([this, key] { decide(probeWithCache(key)); });
  return ok();
}

void VmRuntime::decide(KvmVerdict verdict) {
  std::string unavailable;
  Accel accel = verdict.usable() ? Accel::kKvm : Accel::kTcg;
  if (!verdict.usable() && !config_.allow_tcg)
    unavailable = fmt::format("KVM is not usable ({}) and the TCG fallback is off (vm_allow_tcg)", verdict.reason);
  if (accel == Accel::kTcg) tsc_khz_ = hostTscKhz();
  if (verdict.usable())
    spdlog::info("vm: KVM proven ({}{} ms); VMs run under KVM", verdict.cached ? "cached, " : "", verdict.probe_ms);
  else if (!unavailable.empty())
    spdlog::warn("vm: tier unavailable: {}", unavailable);
  else
    spdlog::warn("vm: KVM not used ({}); VMs run under TCG emulation", verdict.reason);
  {
    std::lock_guard lock(accel_mu_);
    accel_ = accel;
    kvm_ = std::move(verdict);
    unavailable_ = std::move(unavailable);
    decided_ = true;
  }
  accel_cv_.notify_all();
}

std::optional<Accel> VmRuntime::accelIfDecided() const {
  std::lock_guard lock(accel_mu_);
  if (!decided_ || !unavailable_.empty()) return std::nullopt;
  return accel_.load();
}

KvmVerdict VmRuntime::kvm() const {
  std::lock_guard lock(accel_mu_);
  return kvm_;
}

std::string VmRuntime::unavailableReason() const {
  std::lock_guard lock(accel_mu_);
  return unavailable_;
}

Status VmRuntime::awaitAccel() {
  std::unique_lock lock(accel_mu_);
  // The probe ends by its own deadline; the margin covers its set-up and teardown.
  auto limit = config_.kvm_probe_timeout + std::chrono::seconds(30);
  if (!accel_cv_.wait_for(lock, limit, [&] { return decided_; }))
    return makeError(ErrorKind::kUnavailable, "the KVM probe has not finished after {} s",
                     std::chrono::duration_cast<std::chrono::seconds>(limit).count());
  if (!unavailable_.empty()) return makeError(ErrorKind::kUnavailable, "the vm tier is unavailable: {}", unavailable_);
  return ok();
}

KvmVerdict VmRuntime::probeWithCache(const std::string& key) {
  KvmProbeCache cache(config_.kvm_probe_cache_dir);
  auto lock = cache.lock(key);
  if (!lock) spdlog::warn("vm: KVM probe without the host-wide lock: {}", lock.error().message);
  // Another daemon may have probed while this one waited for the lock.
  if (auto cached = cache.read(key)) return *cached;
  KvmVerdict verdict = probeBoot();
  if (stopping_) return verdict;  // cut short by shutdown: no verdict on KVM
  if (auto st = cache.write(key, verdict); !st) spdlog::warn("vm: KVM verdict not cached: {}", st.error().message);
  return verdict;
}

KvmVerdict VmRuntime::probeBoot() {
  auto start = Clock::now();
  auto deadline = start + config_.kvm_probe_timeout;
  KvmVerdict v{.state = KvmState::kFailed, .checked_at = isoNowUtc()};
  auto finish = [&](std::string reason) {
    v.reason = std::move(reason);
    if (v.reason.empty()) v.state = KvmState::kProven;
    v.probe_ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
    return v;
  };
  // Under vm/run/ with the warm-up prefix: a probe cut short by a dead spaced is cleaned at the next start.
  std::string name = fmt::format("warm-kvmprobe-{}", getpid());
  std::string dir = config_.state_dir + "/vm/run/" + name;
  std::error_code ec;
  fs::remove_all(dir, ec);
  fs::create_directories(dir, ec);
  if (ec) return finish(fmt::format("probe directory {}: {}", dir, ec.message()));
  runtime::SandboxSpec spec;
  spec.id = name;
  spec.limits.memory_bytes = 256ull << 20;
  QemuSpec qemu = qemuSpecFor(spec, dir);
  qemu.accel = Accel::kKvm;
  qemu.tcg_tb_cache_mib = 0;
  qemu.extra_cmdline = config_.extra_cmdline;  // none of TCG's clock options
  qemu.console_file = dir + "/console.log";
  auto proc = spawn(qemu, name, config_.warm_uid, {}, -1, qemu.memory_mib);
  if (!proc) {
    fs::remove_all(dir, ec);
    return finish("the probe VMM did not start: " + proc.error().message);
  }
  probe_pid_ = proc->pid;
  std::string cgroup = name;
  std::string reason = [&]() -> std::string {
    std::string timeout =
        fmt::format("guest did not answer in {:g} s under KVM", config_.kvm_probe_timeout.count() / 1000.0);
    auto qemuSays = [&] {
      std::string log = tailOfFile(VmPaths::in(dir).log, 300);
      while (!log.empty() && (log.back() == '\n' || log.back() == ' ')) log.pop_back();
      return log;
    };
    // Connected in short slices, so that a QEMU that dies (KVM refused, an unsupported CPU) ends the
    // probe with its own message at once instead of at the deadline.
    UniqueFd fd;
    while (!fd) {
      if (stopping_) return "probe cut short by shutdown";
      pollfd p{proc->pidfd.get(), POLLIN, 0};
      if (proc->pidfd && poll(&p, 1, 0) == 1) return "QEMU exited under -accel kvm: " + qemuSays();
      if (Clock::now() >= deadline) return timeout;
      auto slice = std::min(deadline, Clock::now() + std::chrono::milliseconds(200));
      if (auto c = connectUnixUntil(VmPaths::in(dir).agent, slice)) fd = std::move(*c);
    }
    auto left = std::chrono::duration_cast<Duration>(deadline - Clock::now());
    if (left <= Duration(0)) return timeout;
    auto agent = agent::AgentClient::adopt(fd.release(), left);
    if (agent) return "";
    // A QEMU that aborts closes the agent socket on its way out: give it a moment to be gone, so that
    // the reason is its own message rather than the reset connection.
    pollfd p{proc->pidfd.get(), POLLIN, 0};
    if (proc->pidfd && poll(&p, 1, 1000) == 1) return "QEMU exited under -accel kvm: " + qemuSays();
    if (Clock::now() >= deadline - std::chrono::milliseconds(50)) return timeout;
    return "the guest's agent did not complete its handshake under KVM: " + agent.error().message;
  }();
  killAndClean(proc->pid, cgroup);
  probe_pid_ = 0;
  fs::remove_all(dir, ec);
  return finish(reason);
}

}  // namespace space::vm
