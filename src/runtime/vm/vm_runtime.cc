#include "runtime/vm/vm_runtime.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "runtime/vm/template_snapshot.h"
#include "runtime/vm/unix_socket.h"
#include "sys/process.h"

namespace space::vm {

using nlohmann::json;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

namespace {

std::string tailOf(const std::string& path, size_t max) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  return s.size() > max ? s.substr(s.size() - max) : s;
}

// Kills the VMM and reaps it when it is our child. Killing QEMU is the whole teardown of the guest.
void killQemu(pid_t pid) {
  if (pid <= 0) return;
  if (auto pidfd = sys::pidfdOpen(pid)) {
    (void)sys::pidfdSendSignal(pidfd->get(), SIGKILL);
  }
  // After a daemon restart QEMU is no longer our child: waitpid fails with ECHILD, init reaps it.
  while (waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
  }
}

}  // namespace

uint64_t hostTscKhz() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("cpu MHz", 0) != 0) continue;
    size_t colon = line.find(':');
    if (colon == std::string::npos) return 0;
    return static_cast<uint64_t>(std::stod(line.substr(colon + 1)) * 1000.0);
  }
  return 0;
}

Result<std::unique_ptr<VmRuntime>> VmRuntime::create(const VmConfig& config) {
  for (const auto& path : {config.kernel, config.initrd}) {
    if (access(path.c_str(), R_OK) != 0)
      return sysError(errno, "vm guest artifact {} (build it with scripts/vm/build-guest)", path);
  }
  Accel accel = Accel::kTcg;
  bool kvm = kvmUsable();
  if (config.accel == AccelMode::kKvm && !kvm) return makeError(ErrorKind::kUnsupported, "vm: /dev/kvm is not usable");
  if (config.accel != AccelMode::kTcg && kvm) accel = Accel::kKvm;
  if (accel == Accel::kTcg && !config.allow_tcg)
    return makeError(ErrorKind::kUnsupported, "vm: KVM is not usable and the TCG fallback is disabled");
  std::error_code ec;
  fs::create_directories(config.state_dir + "/vms", ec);
  if (ec) return makeError(ErrorKind::kInternal, "create {}/vms: {}", config.state_dir, ec.message());
  return std::unique_ptr<VmRuntime>(new VmRuntime(config, accel));
}

std::string VmRuntime::vmDir(const runtime::SandboxSpec& spec) const {
  return spec.dir.empty() ? config_.state_dir + "/vms/" + spec.id : spec.dir;
}

QemuSpec VmRuntime::qemuSpecFor(const runtime::SandboxSpec& spec, const std::string& dir) const {
  QemuSpec q;
  q.qemu = config_.qemu;
  q.accel = accel_;
  q.vcpus = std::max<uint32_t>(1, (spec.limits.cpu_millis + 999) / 1000);
  q.memory_mib = std::max<uint64_t>(64, spec.limits.memory_bytes >> 20);
  q.kernel = config_.kernel;
  q.initrd = config_.initrd;
  q.dir = dir;
  q.extra_cmdline = config_.extra_cmdline;
  if (accel_ == Accel::kTcg) {
    if (uint64_t khz = hostTscKhz()) {
      std::string tsc = "tsc_early_khz=" + std::to_string(khz) + " tsc=reliable";
      q.extra_cmdline = q.extra_cmdline.empty() ? tsc : tsc + " " + q.extra_cmdline;
    }
  }
  return q;
}

Result<runtime::Instance> VmRuntime::start(const runtime::SandboxSpec& spec) {
  return launchAndConnect(spec, qemuSpecFor(spec, vmDir(spec)));
}

Result<runtime::Instance> VmRuntime::launchAndConnect(const runtime::SandboxSpec& spec, const QemuSpec& qemu,
                                                      const std::function<Status(QmpClient&)>& before_agent) {
  auto deadline = Clock::now() + config_.start_timeout;
  const std::string& dir = qemu.dir;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return makeError(ErrorKind::kInternal, "create {}: {}", dir, ec.message());
  ASSIGN_OR_RETURN(QemuProcess proc, launchQemu(qemu));
  auto inst = connectInstance(spec.id, proc.pid, dir, deadline, before_agent);
  if (!inst) {
    Error e = inst.error();
    e.message += "; qemu: " + tailOf(VmPaths::in(dir).log, 400) + "; console: " + tailOf(VmPaths::in(dir).console, 800);
    killQemu(proc.pid);
    {
      std::lock_guard lock(mu_);
      qmp_.erase(spec.id);
    }
    return tl::unexpected(e.context(fmt::format("start vm {}", spec.id)));
  }
  return inst;
}

Result<runtime::Instance> VmRuntime::connectInstance(const std::string& id, pid_t pid, const std::string& dir,
                                                     Clock::time_point deadline,
                                                     const std::function<Status(QmpClient&)>& before_agent) {
  VmPaths paths = VmPaths::in(dir);
  auto left = [&] { return std::max(Duration(1), std::chrono::duration_cast<Duration>(deadline - Clock::now())); };
  ASSIGN_OR_RETURN(auto qmp, QmpClient::connect(paths.qmp, std::min(left(), Duration(30000))));
  if (before_agent) TRY(before_agent(*qmp));
  // The agent socket exists as soon as QEMU runs; the hello reply comes once the guest's agent has
  // opened its port, so the handshake timeout covers the boot (or the restore).
  ASSIGN_OR_RETURN(UniqueFd fd, connectUnixUntil(paths.agent, deadline));
  ASSIGN_OR_RETURN(auto agent, agent::AgentClient::adopt(fd.release(), left()));
  {
    std::lock_guard lock(mu_);
    qmp_[id] = std::move(qmp);
  }
  runtime::Instance inst;
  inst.id = id;
  inst.pid = pid;
  inst.agent = std::move(agent);
  inst.persisted.id = id;
  inst.persisted.runtime = "vm";
  inst.persisted.state = {{"pid", pid}, {"dir", dir}};
  return inst;
}

Result<QmpClient*> VmRuntime::qmpFor(const runtime::PersistedInstance& inst) {
  std::lock_guard lock(mu_);
  auto it = qmp_.find(inst.id);
  if (it != qmp_.end()) return it->second.get();
  std::string dir = inst.state.value("dir", "");
  pid_t pid = inst.state.value("pid", 0);
  if (!isQemuOf(pid, dir)) return makeError(ErrorKind::kNotFound, "vm {}: its QEMU is gone", inst.id);
  ASSIGN_OR_RETURN(auto qmp, QmpClient::connect(VmPaths::in(dir).qmp, Duration(5000)));
  QmpClient* raw = qmp.get();
  qmp_[inst.id] = std::move(qmp);
  return raw;
}

// QMP calls of one VM are serialised by the caller (the manager holds the sandbox's lock).
Status VmRuntime::pause(runtime::Instance& inst) {
  ASSIGN_OR_RETURN(QmpClient * qmp, qmpFor(inst.persisted));
  TRY(qmp->execute("stop"));
  return ok();
}

Status VmRuntime::resume(runtime::Instance& inst) {
  ASSIGN_OR_RETURN(QmpClient * qmp, qmpFor(inst.persisted));
  TRY(qmp->execute("cont"));
  return ok();
}

Result<runtime::SnapshotRef> VmRuntime::snapshot(runtime::Instance& inst, runtime::SnapshotKind kind) {
  return makeError(ErrorKind::kUnsupported, "vm snapshots are not implemented yet");
}

Result<runtime::SnapshotRef> VmRuntime::warmTemplate(const runtime::SandboxSpec& spec,
                                                     const std::string& template_dir) {
  std::error_code ec;
  fs::create_directories(template_dir, ec);
  if (ec) return makeError(ErrorKind::kInternal, "create {}: {}", template_dir, ec.message());
  TemplateFiles files = TemplateFiles::in(template_dir);
  QemuSpec qemu = qemuSpecFor(spec, template_dir + "/warm");
  qemu.memory_file = files.memory;
  qemu.memory_file_shared = true;
  runtime::SandboxSpec warm = spec;
  warm.id = spec.id + "-warm";
  ASSIGN_OR_RETURN(runtime::Instance inst, launchAndConnect(warm, qemu));
  // The agent answered: the guest is booted and its agent waits on the port. End the host session so
  // that every restored VM starts with the port idle.
  inst.agent.reset();
  auto saved = [&]() -> Status {
    ASSIGN_OR_RETURN(QmpClient * qmp, qmpFor(inst.persisted));
    return saveDeviceState(*qmp, files.state, std::chrono::seconds(60));
  }();
  // The memory file must not change after the state is saved: the VM ends here either way.
  TRY(destroy(inst.persisted));
  if (!saved) return tl::unexpected(saved.error().context("warm template"));
  json meta = {
      {"memory_mib", qemu.memory_mib}, {"vcpus", qemu.vcpus}, {"accel", accel_ == Accel::kKvm ? "kvm" : "tcg"}};
  std::ofstream(template_dir + "/template.json") << meta.dump() << "\n";
  return runtime::SnapshotRef{spec.id, template_dir};
}

Result<runtime::Instance> VmRuntime::restore(const runtime::SnapshotRef& ref, const runtime::SandboxSpec& spec) {
  std::ifstream in(ref.path + "/template.json");
  if (!in) return makeError(ErrorKind::kNotFound, "no template snapshot in {}", ref.path);
  json meta = json::parse(in, nullptr, false);
  if (meta.is_discarded()) return makeError(ErrorKind::kInternal, "{}/template.json is not JSON", ref.path);
  TemplateFiles files = TemplateFiles::in(ref.path);
  QemuSpec qemu = qemuSpecFor(spec, vmDir(spec));
  // The restored machine must be the saved one: memory size and vCPUs come from the snapshot.
  qemu.memory_mib = meta.value("memory_mib", qemu.memory_mib);
  qemu.vcpus = meta.value("vcpus", qemu.vcpus);
  qemu.memory_file = files.memory;
  qemu.memory_file_shared = false;
  qemu.incoming_defer = true;
  return launchAndConnect(spec, qemu,
                          [&](QmpClient& qmp) { return loadDeviceState(qmp, files.state, std::chrono::seconds(60)); });
}

Status VmRuntime::destroy(const runtime::PersistedInstance& inst) {
  {
    std::lock_guard lock(mu_);
    qmp_.erase(inst.id);
  }
  std::string dir = inst.state.value("dir", "");
  pid_t pid = inst.state.value("pid", 0);
  if (isQemuOf(pid, dir)) killQemu(pid);
  if (!dir.empty()) {
    std::error_code ec;
    fs::remove_all(dir, ec);
    if (ec) return makeError(ErrorKind::kInternal, "remove {}: {}", dir, ec.message());
  }
  return ok();
}

Result<runtime::Instance> VmRuntime::reattach(const runtime::PersistedInstance& inst) {
  std::string dir = inst.state.value("dir", "");
  pid_t pid = inst.state.value("pid", 0);
  if (!isQemuOf(pid, dir)) return makeError(ErrorKind::kNotFound, "vm {}: its QEMU is gone", inst.id);
  {
    std::lock_guard lock(mu_);
    qmp_.erase(inst.id);
  }
  return connectInstance(inst.id, pid, dir, Clock::now() + std::chrono::seconds(10));
}

Result<runtime::Usage> VmRuntime::usage(const runtime::PersistedInstance& inst) {
  pid_t pid = inst.state.value("pid", 0);
  if (!isQemuOf(pid, inst.state.value("dir", "")))
    return makeError(ErrorKind::kNotFound, "vm {}: its QEMU is gone", inst.id);
  runtime::Usage u;
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) u.memory_bytes = std::stoull(line.substr(6)) * 1024;
  }
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string s((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  size_t paren = s.rfind(')');
  if (paren != std::string::npos) {
    std::istringstream fields(s.substr(paren + 2));
    std::string f;
    uint64_t utime = 0, stime = 0;
    for (int i = 3; i <= 15 && fields >> f; ++i) {
      if (i == 14) utime = std::stoull(f);
      if (i == 15) stime = std::stoull(f);
    }
    u.cpu_usage_ns = (utime + stime) * (1000000000ull / static_cast<uint64_t>(sysconf(_SC_CLK_TCK)));
  }
  return u;
}

}  // namespace space::vm
