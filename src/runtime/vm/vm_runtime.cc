#include "runtime/vm/vm_runtime.h"

#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <climits>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "common/defer.h"
#include "net/veth.h"
#include "runtime/host/network.h"
#include "runtime/vm/confine.h"
#include "runtime/vm/template_snapshot.h"
#include "runtime/vm/unix_socket.h"
#include "sys/host_command.h"
#include "sys/process.h"

namespace space::vm {

using nlohmann::json;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

namespace {

constexpr uint64_t kMiB = 1ull << 20;
constexpr const char* kRootDevice = "/dev/vda";

Result<std::string> realPath(const std::string& path) {
  char buf[PATH_MAX];
  if (!::realpath(path.c_str(), buf)) return sysError(errno, "resolve {}", path);
  return std::string(buf);
}

}  // namespace

std::string macFor(const net::SandboxSubnet& subnet) {
  uint32_t i = subnet.network >> 2;
  return fmt::format("02:53:50:{:02x}:{:02x}:{:02x}", (i >> 16) & 0xff, (i >> 8) & 0xff, i & 0xff);
}

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
  for (const char* sub : {"/vms", "/vm/templates", "/vm/root"}) {
    std::error_code ec;
    fs::create_directories(config.state_dir + sub, ec);
    if (ec) return makeError(ErrorKind::kInternal, "create {}{}: {}", config.state_dir, sub, ec.message());
  }
  ASSIGN_OR_RETURN(std::unique_ptr<host::CgroupBackend> cgroups, host::makeCgroupBackend(config.cgroup_parent));
  std::unique_ptr<VmRuntime> rt(new VmRuntime(config, std::move(cgroups)));
  rt->cleanInterruptedWarmups();
  TRY(rt->chooseAccel());
  return rt;
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
  // Real paths: a confined VMM sees only the files bound into its root, and symlinks are not followed
  // there.
  q.kernel = realPath(config_.kernel).value_or(config_.kernel);
  q.initrd = realPath(config_.initrd).value_or(config_.initrd);
  q.dir = dir;
  q.extra_cmdline = config_.extra_cmdline;
  if (accel_ == Accel::kTcg) {
    q.tcg_tb_cache_mib = config_.tcg_tb_cache_mib;
    if (uint64_t khz = tsc_khz_) {
      std::string tsc = "tsc_early_khz=" + std::to_string(khz) + " tsc=reliable";
      q.extra_cmdline = q.extra_cmdline.empty() ? tsc : tsc + " " + q.extra_cmdline;
    }
  }
  if (!spec.template_rootfs.empty()) q.extra_cmdline += std::string(" space.root=") + kRootDevice;
  return q;
}

Result<QemuProcess> VmRuntime::spawn(const QemuSpec& qemu, const std::string& cgroup_id, uid_t uid,
                                     const std::vector<std::string>& read_only, int memory_fd, uint64_t memory_mib,
                                     const std::vector<std::string>& writable, int tap_fd) {
  runtime::Limits limits;
  limits.memory_bytes = (memory_mib + config_.vmm_overhead_mib) * kMiB;
  limits.pids = config_.vmm_pids;
  // TCG spends host CPU beyond the guest's vCPUs (translation, device emulation threads).
  limits.cpu_millis = qemu.vcpus * 1000 + (qemu.accel == Accel::kTcg ? 500 : 0);
  TRY(cgroups_->create(cgroup_id, limits));
  VmmJail jail;
  jail.uid = uid;
  jail.gid = uid;
  jail.root_dir = config_.state_dir + "/vm/root";
  jail.read_only = read_only;
  jail.read_only.push_back(qemu.kernel);
  if (!qemu.initrd.empty()) jail.read_only.push_back(qemu.initrd);
  jail.writable = {qemu.dir};
  jail.writable.insert(jail.writable.end(), writable.begin(), writable.end());
  jail.devices = {"/dev/null", "/dev/urandom"};
  jail.kvm = qemu.accel == Accel::kKvm;
  jail.memory_fd = memory_fd;
  QemuSpec with_tap = qemu;
  if (tap_fd >= 0) {
    jail.tap_fd = tap_fd;
    with_tap.tap_fd = kTapFd;
  }
  jail.before_exec = [&](pid_t pid) { return cgroups_->addProcess(cgroup_id, pid); };
  auto proc = config_.launch_vmm(with_tap, jail);
  if (!proc) (void)cgroups_->remove(cgroup_id);
  return proc;
}

void VmRuntime::killAndClean(pid_t pid, const std::string& cgroup_id) {
  killVmm(pid);
  if (cgroups_ && !cgroup_id.empty()) (void)cgroups_->remove(cgroup_id);
}

void VmRuntime::exerciseGuest(agent::AgentClient& agent) {
  for (std::vector<std::string> argv :
       {std::vector<std::string>{"/bin/sh", "-c", "true"}, std::vector<std::string>{"uname", "-r"},
        std::vector<std::string>{"/bin/sh", "-c", "command -v python3 >/dev/null && python3 -c pass; true"}}) {
    agent::ExecRequest req;
    req.argv = std::move(argv);
    req.timeout_s = 60;
    auto stream = agent.exec(req);
    if (!stream) continue;  // a template without these programs
    for (;;) {
      auto ev = (*stream)->next(std::chrono::seconds(60));
      if (!ev || ev->kind == agent::ExecEvent::Kind::kExit) break;
    }
  }
}

Result<std::shared_ptr<agent::AgentClient>> VmRuntime::connectAgent(const std::string& dir,
                                                                    Clock::time_point deadline) {
  // The agent socket exists as soon as QEMU runs; the hello reply comes once the guest's agent has
  // opened its port, so the handshake timeout covers the boot (or the restore).
  ASSIGN_OR_RETURN(UniqueFd fd, connectUnixUntil(VmPaths::in(dir).agent, deadline));
  auto left = std::max(Duration(1), std::chrono::duration_cast<Duration>(deadline - Clock::now()));
  return agent::AgentClient::adopt(fd.release(), left);
}

runtime::Instance VmRuntime::instanceOf(const std::string& id, pid_t pid, const std::string& dir, json extra) {
  runtime::Instance inst;
  inst.id = id;
  inst.pid = pid;
  inst.persisted.id = id;
  inst.persisted.runtime = "vm";
  inst.persisted.state = {{"pid", pid}, {"dir", dir}};
  for (auto& [k, v] : extra.items()) inst.persisted.state[k] = v;
  return inst;
}

Result<runtime::Instance> VmRuntime::bootCold(const runtime::SandboxSpec& spec) {
  TRY(awaitAccel());
  auto deadline = Clock::now() + config_.start_timeout;
  std::string dir = vmDir(spec);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return makeError(ErrorKind::kInternal, "create {}: {}", dir, ec.message());
  QemuSpec qemu = qemuSpecFor(spec, dir);
  qemu.console_file = dir + "/console.log";
  std::vector<std::string> read_only;
  if (!spec.template_rootfs.empty()) {
    ASSIGN_OR_RETURN(std::string base, ensureBaseImage(spec, spec.limits.disk_bytes));
    TRY(createOverlay(base, "raw", dir + "/disk.qcow2"));
    uid_t uid = spec.uid_base ? spec.uid_base : config_.warm_uid;
    if (chown((dir + "/disk.qcow2").c_str(), uid, uid) < 0) return sysError(errno, "chown disk overlay");
    qemu.disks.push_back({dir + "/disk.qcow2", "qcow2", false});
    read_only.push_back(base);
  }
  uid_t uid = spec.uid_base ? spec.uid_base : config_.warm_uid;
  ASSIGN_OR_RETURN(QemuProcess proc, spawn(qemu, spec.id, uid, read_only, -1, qemu.memory_mib));
  auto connected = [&]() -> Result<runtime::Instance> {
    ASSIGN_OR_RETURN(auto qmp, QmpClient::connect(VmPaths::in(dir).qmp, Duration(30000)));
    ASSIGN_OR_RETURN(auto agent, connectAgent(dir, deadline));
    runtime::Instance inst = instanceOf(spec.id, proc.pid, dir, {{"cgroup", spec.id}});
    inst.agent = std::move(agent);
    std::lock_guard lock(mu_);
    qmp_[spec.id] = std::move(qmp);
    return inst;
  }();
  if (!connected) {
    Error e = connected.error();
    e.message +=
        "; qemu: " + tailOfFile(VmPaths::in(dir).log, 400) + "; console: " + tailOfFile(qemu.console_file, 800);
    killAndClean(proc.pid, spec.id);
    return tl::unexpected(e.context(fmt::format("boot vm {}", spec.id)));
  }
  return connected;
}

std::string VmRuntime::overlayPath(const std::string& id, const std::string& dir) const {
  return config_.layers_dir.empty() ? dir + "/disk.qcow2" : config_.layers_dir + "/" + id + ".qcow2";
}

Result<QemuSpec> VmRuntime::restoringSpec(const runtime::SandboxSpec& spec, const VmTemplate& tpl,
                                          const std::string& dir, const std::string& overlay, int* memory_fd,
                                          std::vector<std::string>* read_only) {
  QemuSpec qemu = qemuSpecFor(spec, dir);
  // The restored machine must be the saved one: memory size and vCPUs come from the template.
  qemu.memory_mib = tpl.memory_mib;
  qemu.vcpus = tpl.vcpus;
  qemu.memory_file_shared = false;
  qemu.incoming_defer = true;
  // QEMU reads the initramfs into its heap at start-up; a restored guest has it in RAM already and
  // never asks again. (The kernel stays: its presence adds the boot option ROM whose RAM block the
  // device state names.)
  qemu.initrd.clear();
  if (access((tpl.dir + "/kernel.stub").c_str(), R_OK) == 0) qemu.kernel = tpl.dir + "/kernel.stub";
  ASSIGN_OR_RETURN(*memory_fd, memoryFd(tpl));
  qemu.memory_file = kMemoryFdPath;
  read_only->clear();
  if (!tpl.disk.empty()) {
    qemu.disks.push_back({overlay, "qcow2", false});
    *read_only = {tpl.disk, tpl.base_image};
  }
  return qemu;
}

Status VmRuntime::allocateNetwork(json& net_state, UniqueFd& tap) {
  if (!config_.network_pool) return ok();
  ASSIGN_OR_RETURN(net::SandboxSubnet subnet, config_.network_pool->allocate());
  std::string link = host::linkNameFor(subnet);
  net_state = {{"subnet", subnet.cidr()}, {"network", subnet.network}, {"link", link}, {"mac", macFor(subnet)}};
  ASSIGN_OR_RETURN(tap, net::createSandboxTap(link, subnet));
  return ok();
}

Result<std::string> VmRuntime::makeVmDir(const runtime::SandboxSpec& spec) const {
  std::string dir = vmDir(spec);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return makeError(ErrorKind::kInternal, "create {}: {}", dir, ec.message());
  return dir;
}

Result<runtime::Instance> VmRuntime::prepare(const runtime::SandboxSpec& spec) {
  TRY(awaitAccel());
  ASSIGN_OR_RETURN(VmTemplate tpl, ensureTemplate(spec));
  ASSIGN_OR_RETURN(std::string dir, makeVmDir(spec));
  uid_t uid = spec.uid_base ? spec.uid_base : config_.warm_uid;
  std::string overlay = overlayPath(spec.id, dir);
  int memory_fd = -1;
  std::vector<std::string> read_only;
  ASSIGN_OR_RETURN(QemuSpec qemu, restoringSpec(spec, tpl, dir, overlay, &memory_fd, &read_only));
  if (!tpl.disk.empty()) {
    TRY(createOverlay(tpl.disk, "qcow2", overlay));
    if (chown(overlay.c_str(), uid, uid) < 0) return sysError(errno, "chown {}", overlay);
  }
  // The sandbox's network: a /30 and a host tap, recorded before the tap exists so that every later
  // failure (and destroy) can take both back.
  json net_state;
  UniqueFd tap;
  Defer undo_net([&] {
    if (config_.network_pool && !net_state.is_null())
      (void)host::detachNetwork(*config_.network_pool, {{"net", net_state}});
  });
  TRY(allocateNetwork(net_state, tap));
  if (!net_state.is_null()) qemu.mac = net_state["mac"];
  std::vector<std::string> writable;
  if (!tpl.disk.empty() && !config_.layers_dir.empty()) writable.push_back(overlay);
  ASSIGN_OR_RETURN(QemuProcess proc,
                   spawn(qemu, spec.id, uid, read_only, memory_fd, qemu.memory_mib, writable, tap.get()));
  tap.reset();  // QEMU holds it now: the tap lives as long as QEMU
  std::string cgroup = spec.id;
  auto qmp = QmpClient::connect(VmPaths::in(dir).qmp, Duration(30000));
  if (!qmp) {
    Error e = qmp.error();
    e.message += "; qemu: " + tailOfFile(VmPaths::in(dir).log, 400);
    killAndClean(proc.pid, cgroup);
    return tl::unexpected(e.context(fmt::format("prepare vm {}", spec.id)));
  }
  {
    std::lock_guard lock(mu_);
    qmp_[spec.id] = std::move(*qmp);
  }
  json extra = {{"cgroup", cgroup},
                {"template", tpl.dir},
                {"template_stamp", tpl.stamp},
                {"restored", false},
                {"memory_mib", tpl.memory_mib}};
  if (!tpl.disk.empty()) extra["disk"] = overlay;
  if (!net_state.is_null()) extra["net"] = net_state;
  undo_net.dismiss();  // from here on destroy() takes the network back with the rest
  runtime::Instance inst = instanceOf(spec.id, proc.pid, dir, extra);
  if (spec.pooled && config_.pool_restored) {
    // Restore now, run the common paths once, and stop the guest until a create takes it.
    auto parked = [&]() -> Status {
      TRY(activate(inst));
      exerciseGuest(*inst.agent);
      ASSIGN_OR_RETURN(QmpClient * q, qmpFor(inst.persisted));
      TRY(q->execute("stop"));
      inst.persisted.state["parked"] = true;
      return ok();
    }();
    if (!parked) {
      (void)destroy(inst.persisted);
      return tl::unexpected(parked.error().context(fmt::format("park pooled vm {}", spec.id)));
    }
  }
  return inst;
}

Status VmRuntime::activate(runtime::Instance& inst) {
  if (inst.persisted.state.value("parked", false)) {
    ASSIGN_OR_RETURN(QmpClient * qmp, qmpFor(inst.persisted));
    TRY(qmp->execute("cont"));
    inst.persisted.state.erase("parked");
    // A pooled VM reattached after a daemon restart has no host session yet.
    if (!inst.agent) {
      ASSIGN_OR_RETURN(inst.agent,
                       connectAgent(inst.persisted.state.value("dir", ""), Clock::now() + std::chrono::seconds(30)));
    }
    return ok();
  }
  if (inst.agent) return ok();
  std::string dir = inst.persisted.state.value("dir", "");
  std::string tpl = inst.persisted.state.value("template", "");
  ASSIGN_OR_RETURN(QmpClient * qmp, qmpFor(inst.persisted));
  auto deadline = Clock::now() + std::chrono::seconds(60);
  auto t0 = Clock::now();
  auto done = [&]() -> Status {
    std::ifstream meta_in(tpl + "/template.json");
    json meta = json::parse(meta_in, nullptr, false);
    if (meta.is_discarded() || meta.value("stamp", "") != inst.persisted.state.value("template_stamp", ""))
      return makeError(ErrorKind::kConflict, "the VM template {} was rebuilt after this VM was prepared", tpl);
    TRY(loadDeviceState(*qmp, tpl + "/state", std::chrono::seconds(60)));
    auto t1 = Clock::now();
    inst.persisted.state["restored"] = true;
    ASSIGN_OR_RETURN(inst.agent, connectAgent(dir, deadline));
    auto us = [](auto d) { return std::chrono::duration_cast<std::chrono::microseconds>(d).count(); };
    spdlog::debug("vm {} restored: device state {} us, agent handshake {} us", inst.id, us(t1 - t0),
                  us(Clock::now() - t1));
    return ok();
  }();
  if (!done) {
    Error e = done.error();
    e.message += "; qemu: " + tailOfFile(VmPaths::in(dir).log, 400);
    if (auto ring = qmp->execute("ringbuf-read", {{"device", kConsoleChardev}, {"size", 2048}, {"format", "utf8"}});
        ring && ring->is_string())
      e.message += "; console: " + ring->get<std::string>();
    return tl::unexpected(e.context(fmt::format("restore vm {}", inst.id)));
  }
  return ok();
}

Result<runtime::Instance> VmRuntime::start(const runtime::SandboxSpec& spec) {
  ASSIGN_OR_RETURN(runtime::Instance inst, prepare(spec));
  if (auto st = activate(inst); !st) {
    (void)destroy(inst.persisted);
    return tl::unexpected(st.error());
  }
  return inst;
}

bool VmRuntime::alive(const runtime::Instance& inst) {
  if (inst.agent) return inst.agent->alive();
  return isQemuOf(inst.pid, inst.persisted.state.value("dir", ""));
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

Status VmRuntime::destroy(const runtime::PersistedInstance& inst) {
  {
    std::lock_guard lock(mu_);
    qmp_.erase(inst.id);
  }
  std::string dir = inst.state.value("dir", "");
  pid_t pid = inst.state.value("pid", 0);
  // A VM whose prepare was cut short (spaced died in it) has only its directory persisted: its QEMU, if
  // it got that far, is found by the QMP socket its command line names, and its cgroup by the id.
  if (pid <= 0 && !dir.empty()) pid = findQemuOf(dir);
  if (isQemuOf(pid, dir)) killVmm(pid);
  std::string cgroup = inst.state.value("cgroup", !inst.state.contains("pid") ? inst.id : "");
  if (cgroups_ && !cgroup.empty()) TRY(cgroups_->remove(cgroup));
  if (!dir.empty()) {
    std::error_code ec;
    fs::remove_all(dir, ec);
    if (ec) return makeError(ErrorKind::kInternal, "remove {}: {}", dir, ec.message());
  }
  // The overlay on the layer volume (a prepare cut short has not persisted it yet: found by the id).
  if (!config_.layers_dir.empty()) {
    std::string overlay = inst.state.value("disk", overlayPath(inst.id, dir));
    if (overlay.rfind(config_.layers_dir + "/", 0) == 0 && unlink(overlay.c_str()) < 0 && errno != ENOENT)
      return sysError(errno, "remove {}", overlay);
    (void)unlink((overlay + ".next").c_str());
  }
  // The subnet, and the tap if it is still there (it went away with QEMU's descriptor).
  if (config_.network_pool) TRY(host::detachNetwork(*config_.network_pool, inst.state));
  return ok();
}

Result<runtime::Instance> VmRuntime::reattach(const runtime::PersistedInstance& inst) {
  std::string dir = inst.state.value("dir", "");
  pid_t pid = inst.state.value("pid", 0);
  if (!isQemuOf(pid, dir)) return makeError(ErrorKind::kNotFound, "vm {}: its QEMU is gone", inst.id);
  runtime::Instance out = instanceOf(inst.id, pid, dir, inst.state);
  ASSIGN_OR_RETURN(QmpClient * qmp, qmpFor(inst));
  if (auto subnet = host::persistedSubnet(inst.state); subnet && config_.network_pool) {
    if (auto st = config_.network_pool->reserve(*subnet); !st)
      spdlog::warn("vm {}: subnet {}: {}", inst.id, subnet->cidr(), st.error().message);
  }
  (void)qmp;
  // A VMM still waiting to restore (a pooled VM when spaced stopped) has no agent to reach yet.
  if (!inst.state.value("restored", true) || inst.state.value("parked", false)) return out;
  ASSIGN_OR_RETURN(out.agent, connectAgent(dir, Clock::now() + std::chrono::seconds(10)));
  return out;
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
  std::error_code ec;
  auto disk = fs::file_size(inst.state.value("disk", inst.state.value("dir", "") + "/disk.qcow2"), ec);
  if (!ec) u.disk_bytes = disk;
  return u;
}

}  // namespace space::vm
