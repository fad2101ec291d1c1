#include "runtime/jail/jail_runtime.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "common/defer.h"
#include "common/ids.h"
#include "runtime/host/layer_volume.h"
#include "runtime/jail/inside/handshake.h"
#include "runtime/jail/inside/seccomp.h"
#include "runtime/jail/launch.h"
#include "runtime/jail/launch_steps.h"
#include "runtime/jail/layer_disk.h"
#include "runtime/jail/userns.h"
#include "sys/process.h"

namespace space::jail {

using runtime::Instance;
using runtime::PersistedInstance;
using runtime::SandboxSpec;

namespace {

constexpr auto kAgentConnectTimeout = std::chrono::milliseconds(5000);
constexpr auto kKillTimeoutMs = 5000;

Result<std::string> readFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return sysError(errno ? errno : ENOENT, "open {}", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Status validateSpec(const SandboxSpec& spec) {
  if (spec.id.empty() || spec.id.size() > 64)
    return makeError(ErrorKind::kInvalidArgument, "sandbox id '{}': 1-64 characters", spec.id);
  for (char c : spec.id)
    if (!(isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_'))
      return makeError(ErrorKind::kInvalidArgument, "sandbox id '{}': only [A-Za-z0-9_-]", spec.id);
  // The overlay option string is comma- and colon-separated; such paths cannot be expressed safely.
  for (const std::string* p : {&spec.dir, &spec.template_rootfs})
    if (p->empty() || (*p)[0] != '/' || p->find_first_of(",:\\") != std::string::npos)
      return makeError(ErrorKind::kInvalidArgument, "path '{}' must be absolute, without , : or \\", *p);
  TRY(validateIdRange(spec.uid_base, spec.uid_count));
  return ok();
}

// True if `pid` is still the process recorded at start (same start time), i.e. not a recycled pid.
bool sameProcess(int pid, uint64_t start_time) {
  if (pid <= 0) return false;
  auto now = processStartTime(pid);
  return now && *now == start_time;
}

Status killAndWait(int pid, uint64_t start_time) {
  auto pidfd = sys::pidfdOpen(pid);
  if (!pidfd) return ok();  // gone
  // Check identity after taking the pidfd: from here on the pid cannot be recycled under us.
  if (!sameProcess(pid, start_time)) return ok();
  // SIGKILL to the pid namespace's init: the kernel then kills every other process of the namespace.
  if (auto st = sys::pidfdSendSignal(pidfd->get(), SIGKILL); !st && st.error().sys_errno != ESRCH) return st;
  pollfd p{pidfd->get(), POLLIN, 0};
  if (poll(&p, 1, kKillTimeoutMs) <= 0) return sysError(ETIMEDOUT, "wait for sandbox init {} to exit", pid);
  // Reap if it is our child (it is not after a daemon restart: then init reaps it).
  siginfo_t info{};
  (void)waitid(P_PIDFD, static_cast<id_t>(pidfd->get()), &info, WEXITED | WNOHANG);
  return ok();
}

Status writeFileDurably(const std::string& path, const std::string& text) {
  UniqueFd fd(open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0400));
  if (!fd) return sysError(errno, "create {}", path);
  for (size_t off = 0; off < text.size();) {
    ssize_t n = write(fd.get(), text.data() + off, text.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return sysError(errno, "write {}", path);
    off += static_cast<size_t>(n);
  }
  if (fsync(fd.get()) < 0) return sysError(errno, "fsync {}", path);
  return ok();
}

}  // namespace

namespace {

// Copies the agent binary into a memfd and seals it against every change.
Result<UniqueFd> sealedCopy(const std::string& path) {
  UniqueFd src(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!src) return sysError(errno, "open agent binary {}", path);
  UniqueFd mem(memfd_create("space-agent", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!mem) return sysError(errno, "memfd_create for the agent");
  std::vector<char> buf(1 << 20);
  for (;;) {
    ssize_t n = read(src.get(), buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return sysError(errno, "read agent binary {}", path);
    if (n == 0) break;
    for (ssize_t off = 0; off < n;) {
      ssize_t w = write(mem.get(), buf.data() + off, static_cast<size_t>(n - off));
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) return sysError(errno, "copy agent binary into memfd");
      off += w;
    }
  }
  if (fcntl(mem.get(), F_ADD_SEALS, F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE) < 0)
    return sysError(errno, "seal the agent memfd");
  return mem;
}

}  // namespace

JailRuntime::JailRuntime(JailConfig config, std::unique_ptr<CgroupBackend> cgroups, std::string policy)
    : config_(std::move(config)), cgroups_(std::move(cgroups)), seccomp_policy_text_(std::move(policy)) {}

Result<std::unique_ptr<JailRuntime>> JailRuntime::create(const JailConfig& config) {
  if (access(config.agent_binary.c_str(), X_OK) < 0) return sysError(errno, "agent binary {}", config.agent_binary);
  ASSIGN_OR_RETURN(std::string policy, readFile(config.seccomp_policy));
  // Compile once here so a broken policy stops spaced at start-up, not every sandbox later.
  ASSIGN_OR_RETURN(SeccompProgram program, compileSeccompPolicy(policy));
  for (const auto& name : program.unknown_syscalls)
    spdlog::warn("seccomp policy names {}, unknown to this libseccomp: it stays denied", name);
  ASSIGN_OR_RETURN(auto cgroups, makeCgroupBackend(config.cgroup_parent));
  std::error_code ec;
  std::filesystem::create_directories(config.state_dir + "/sandboxes", ec);
  if (ec) return sysError(ec.value(), "create {}/sandboxes", config.state_dir);
  spdlog::info("jail runtime: cgroup {}", cgroups->kind() == CgroupKind::kV1 ? "v1" : "v2");
  ASSIGN_OR_RETURN(UniqueFd agent_fd, sealedCopy(config.agent_binary));
  ASSIGN_OR_RETURN(LayerVolume volume, openLayerVolume(config.state_dir, config.volume_bytes));
  spdlog::info("jail runtime: layers and snapshots on {}{}", volume.root,
               volume.own_mount ? " (SPACE's XFS volume)" : "");
  auto runtime = std::unique_ptr<JailRuntime>(new JailRuntime(config, std::move(cgroups), std::move(policy)));
  runtime->agent_fd_ = std::move(agent_fd);
  ensureVolumeReserve(volume);
  runtime->volume_ = std::move(volume);
  return runtime;
}

Result<Instance> JailRuntime::start(const SandboxSpec& spec) { return startFrom(spec, "", 0); }

Result<Instance> JailRuntime::startFrom(const SandboxSpec& spec, const std::string& base_image, uint32_t base_uid) {
  TRY(validateSpec(spec));
  PersistedInstance persisted{spec.id, "jail", nlohmann::json::object()};
  persisted.state["dir"] = spec.dir;
  persisted.state["image"] = volume_.layersDir() + "/" + spec.id + ".img";
  persisted.state["uid_base"] = spec.uid_base;
  persisted.state["uid_count"] = spec.uid_count;
  // What a restart in place (rollback) needs to launch the sandbox again.
  persisted.state["rootfs_template"] = spec.template_rootfs;
  persisted.state["hostname"] = spec.hostname;
  persisted.state["nofile"] = spec.limits.nofile;
  // Anything half-made is unwound by the same code that destroys a finished sandbox.
  Defer unwind([&] {
    if (auto st = destroy(persisted); !st) spdlog::error("unwind sandbox {}: {}", spec.id, st.error().message);
  });
  LaunchVariant variant = base_image.empty() ? LaunchVariant::kFresh : LaunchVariant::kFork;
  Status launched = launch(variant, spec, persisted, base_image, base_uid);
  if (!launched) return tl::unexpected(launched.error().context("start sandbox " + spec.id));
  ASSIGN_OR_RETURN(auto agent,
                   connectAgent(persisted).map_error([&](Error e) { return e.context("start sandbox " + spec.id); }));
  unwind.dismiss();
  return Instance{spec.id, persisted.state["pid"].get<int>(), std::move(agent), std::move(persisted)};
}

Result<std::shared_ptr<agent::AgentClient>> JailRuntime::connectAgent(const PersistedInstance& persisted) {
  auto agent =
      agent::AgentClient::connectUnix(persisted.state["dir"].get<std::string>() + "/agent.sock", kAgentConnectTimeout);
  if (!agent) return tl::unexpected(agent.error().context("connect agent"));
  if (auto subnet = persistedSubnet(persisted.state)) {
    // The resolver is space-egress's, reached at the host end (nftables redirects UDP/53 to it).
    auto written = agent::writeWholeFile(**agent, "/etc/resolv.conf", "nameserver " + subnet->hostText() + "\n");
    if (!written) return tl::unexpected(written.error().context("resolv.conf"));
  }
  return std::move(*agent);
}

Status JailRuntime::launch(LaunchVariant variant, const SandboxSpec& spec, PersistedInstance& persisted,
                           const std::string& base_image, uint32_t base_uid) {
  HostLaunch launch{config_, *cgroups_, agent_fd_.get(), seccomp_policy_text_, spec, persisted, base_image, base_uid};
  return runLaunchSteps(launch, variant);
}

Status JailRuntime::killCgroupProcesses(const std::string& cgroup) {
  for (int round = 0; round < 50; ++round) {
    ASSIGN_OR_RETURN(auto left, cgroups_->processes(cgroup));
    if (left.empty()) return ok();
    for (pid_t pid : left)
      if (auto start = processStartTime(pid)) (void)killAndWait(pid, *start);
  }
  return makeError(ErrorKind::kInternal, "the processes of cgroup {} do not exit", cgroup);
}

Status JailRuntime::releaseNode() {
  // The loop device is attached with autoclear: the unmount detaches it too.
  if (volume_.own_mount) TRY(closeLayerVolume(config_.state_dir));
  cgroups_->removeParent();
  return ok();
}

Status JailRuntime::destroy(const PersistedInstance& in) {
  PersistedInstance inst = in;
  auto& s = inst.state;
  std::string dir = s.value("dir", std::string());
  // A row written before the start got far (spaced died meanwhile) names only the sandbox's directory.
  // That directory and the layer image have the sandbox's id in spaced's own state: both are its.
  if (!s.contains("image") && dir == config_.state_dir + "/sandboxes/" + inst.id) {
    s["image"] = volume_.layersDir() + "/" + inst.id + ".img";
    s["dir_created"] = true;
  }
  // A frozen task takes SIGKILL only once thawed (v1 freezer): thaw a paused sandbox first.
  (void)cgroups_->freeze(s.value("cgroup", inst.id), false);
  if (s.contains("pid") && s.contains("start_time"))
    TRY(killAndWait(s["pid"].get<int>(), s["start_time"].get<uint64_t>()));
  // An init whose pid never reached the row (a start or restart cut short).
  TRY(killCgroupProcesses(s.value("cgroup", inst.id)));
  TRY(cgroups_->remove(s.value("cgroup", inst.id)));
  // Only a directory this runtime created: a failed start must not delete a pre-existing one.
  if (!dir.empty() && s.value("dir_created", false)) TRY(removeLayerDisk(dir, s.value("image", dir + "/disk.img")));
  if (config_.network_pool) TRY(detachNetwork(*config_.network_pool, s));
  return ok();
}

Result<Instance> JailRuntime::reattach(const PersistedInstance& inst) {
  int pid = inst.state.value("pid", 0);
  if (!sameProcess(pid, inst.state.value("start_time", uint64_t{0})))
    return makeError(ErrorKind::kNotFound, "sandbox {}: init process {} is gone", inst.id, pid);
  std::string sock = inst.state.value("dir", std::string()) + "/agent.sock";
  auto agent = agent::AgentClient::connectUnix(sock, kAgentConnectTimeout);
  if (!agent) return tl::unexpected(agent.error().context("reattach sandbox " + inst.id));
  if (auto subnet = persistedSubnet(inst.state); subnet && config_.network_pool) {
    if (auto st = config_.network_pool->reserve(*subnet); !st)
      spdlog::warn("reattach sandbox {}: subnet {}: {}", inst.id, subnet->cidr(), st.error().message);
  }
  return Instance{inst.id, pid, std::move(*agent), inst};
}

Result<runtime::Usage> JailRuntime::usage(const PersistedInstance& inst) {
  ASSIGN_OR_RETURN(CgroupUsage cg, cgroups_->usage(inst.state.value("cgroup", inst.id)));
  runtime::Usage u;
  u.memory_bytes = cg.memory_bytes;
  u.cpu_usage_ns = cg.cpu_usage_ns;
  u.pids = cg.pids;
  u.oom_kills = cg.oom_kills;
  std::string dir = inst.state.value("dir", std::string());
  if (auto disk = layerDiskUsage(inst.state.value("image", dir + "/disk.img"))) u.disk_bytes = *disk;
  return u;
}

Result<uint64_t> JailRuntime::oomKills(const PersistedInstance& inst) {
  return cgroups_->oomKills(inst.state.value("cgroup", inst.id));
}

// The layer's write counter: the sectors written to its loop device (/sys/dev/block/<maj:min>/stat,
// field 7), after a syncfs through the sandbox's root has pushed every dirty page of the overlay's upper
// ext4 to that device. Why this counter: it is the block layer's own (ext4's lifetime_write_kbytes is
// derived from the same numbers), moves with every write bio (data, metadata, the superblock), costs
// one small read, and walks nothing. Reads do not move it: the layer is mounted noatime, and its inode
// tables are not zeroed lazily (noinit_itable). It restarts with a new loop device (rollback); while the
// sandbox lives its mount holds the device, so the number cannot belong to anyone else.
Result<uint64_t> JailRuntime::writeGeneration(const PersistedInstance& inst) {
  const auto& state = inst.state;
  std::string device = state.value("layer_dev", std::string());
  int pid = state.value("pid", 0);
  if (device.empty() || pid <= 0)
    return makeError(ErrorKind::kUnsupported, "sandbox {}: its layer device is not recorded", inst.id);
  if (!sameProcess(pid, state.value("start_time", uint64_t{0})))
    return makeError(ErrorKind::kNotFound, "sandbox {}: init process {} is gone", inst.id, pid);
  std::string root = fmt::format("/proc/{}/root", pid);
  UniqueFd rootfd(open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!rootfd) return sysError(errno, "open {}", root);
  if (syncfs(rootfd.get()) < 0) return sysError(errno, "syncfs of sandbox {}", inst.id);
  ASSIGN_OR_RETURN(std::string stat, readFile("/sys/dev/block/" + device + "/stat"));
  std::istringstream fields(stat);
  uint64_t v[7] = {};
  for (auto& x : v)
    if (!(fields >> x))
      return makeError(ErrorKind::kInternal, "sandbox {}: unreadable /sys/dev/block/{}/stat", inst.id, device);
  return v[6];  // sectors written
}

Status JailRuntime::checkVolumeSpace(const std::string& what) const {
  ensureVolumeReserve(volume_);  // again, if a rollback used it and there is room now
  struct statvfs vfs;
  if (statvfs(volume_.root.c_str(), &vfs) < 0) return sysError(errno, "statvfs {}", volume_.root);
  uint64_t total = static_cast<uint64_t>(vfs.f_blocks) * vfs.f_frsize;
  uint64_t free = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
  // A clone is metadata only, but every block the sandboxes write afterwards is a new one (copy on write):
  // keep 32 MiB or 2% for that.
  uint64_t reserve = std::max<uint64_t>(32ull << 20, total / 50);
  if (free >= reserve) return ok();
  return tl::unexpected(Error{ErrorKind::kResourceExhausted, ENOSPC,
                              fmt::format("{}: the layer volume {} is full ({} MiB free of {} MiB, {} MiB kept in "
                                          "reserve); delete snapshots or sandboxes",
                                          what, volume_.root, free >> 20, total >> 20, reserve >> 20)});
}

// Pause is the cgroup freezer: every process of the sandbox, the agent included, stops where it is;
// memory, files and open connections stay. The agent answers again after resume.
Status JailRuntime::pause(Instance& inst) {
  return cgroups_->freeze(inst.persisted.state.value("cgroup", inst.id), true);
}
Status JailRuntime::resume(Instance& inst) {
  return cgroups_->freeze(inst.persisted.state.value("cgroup", inst.id), false);
}
// A snapshot is a clone of the layer image, taken with every process of the sandbox frozen and the
// layer's filesystem synced, so the image is a consistent ext4 (as after a clean unmount, minus open
// files' unlinked inodes). Cost: freeze + syncfs of what is dirty + FICLONE, which shares the image's
// extents instead of copying them: independent of how much the sandbox wrote.
Result<runtime::SnapshotRef> JailRuntime::snapshot(Instance& inst, runtime::SnapshotKind kind) {
  if (kind != runtime::SnapshotKind::kFilesystem)
    return makeError(ErrorKind::kUnsupported, "jail snapshots capture the filesystem only, not processes");
  const auto& state = inst.persisted.state;
  std::string dir = state.value("dir", std::string());
  std::string image = state.value("image", dir + "/disk.img");
  if (image.rfind(volume_.layersDir() + "/", 0) != 0)
    return makeError(ErrorKind::kUnsupported,
                     "sandbox {} was made before snapshots existed (its layer is not "
                     "on the layer volume)",
                     inst.id);
  TRY(checkVolumeSpace("snapshot " + inst.id));
  runtime::SnapshotRef ref;
  ref.id = "snap-" + randomHex(8);
  ref.kind = "filesystem";
  ref.path = volume_.snapshotsDir() + "/" + ref.id;
  std::string tmp = ref.path + ".tmp";
  if (mkdir(tmp.c_str(), 0700) < 0) return sysError(errno, "mkdir {}", tmp);
  Defer drop_tmp([&] {
    std::error_code ec;
    std::filesystem::remove_all(tmp, ec);
  });
  std::string cgroup = state.value("cgroup", inst.id);
  int pid = state.value("pid", 0);
  {
    TRY(cgroups_->freeze(cgroup, true));
    Defer thaw([&] {
      // A sandbox paused by its owner stays paused.
      if (!state.value("paused", false)) (void)cgroups_->freeze(cgroup, false);
    });
    // syncfs through the sandbox's root (its overlay) writes the upper layer's dirty data and metadata
    // into the ext4 image, and the loop device's flush writes the image file.
    std::string root = fmt::format("/proc/{}/root", pid);
    UniqueFd rootfd(open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!rootfd) return sysError(errno, "open {}", root);
    if (syncfs(rootfd.get()) < 0) return sysError(errno, "syncfs of sandbox {}", inst.id);
    TRY(cloneFile(image, tmp + "/disk.img", 0400));
  }
  nlohmann::json meta = {{"id", ref.id},
                         {"sandbox", inst.id},
                         {"kind", ref.kind},
                         {"runtime", "jail"},
                         {"created_ms", nowUnixMs()},
                         {"template_rootfs", state.value("rootfs_template", std::string())},
                         {"uid_base", state.value("uid_base", 0u)}};
  TRY(writeFileDurably(tmp + "/snapshot.json", meta.dump(2) + "\n"));
  TRY(syncDir(tmp));
  if (rename(tmp.c_str(), ref.path.c_str()) < 0) return sysError(errno, "rename {} to {}", tmp, ref.path);
  drop_tmp.dismiss();
  TRY(syncDir(volume_.snapshotsDir()));
  struct stat st;
  if (stat((ref.path + "/disk.img").c_str(), &st) == 0) ref.size_bytes = static_cast<uint64_t>(st.st_blocks) * 512;
  return ref;
}

Result<Instance> JailRuntime::restore(const runtime::SnapshotRef& ref, const SandboxSpec& spec) {
  if (ref.kind != "filesystem")
    return makeError(ErrorKind::kInvalidArgument, "snapshot {} is not a jail snapshot", ref.id);
  std::ifstream in(ref.path + "/snapshot.json");
  auto meta = nlohmann::json::parse(in, nullptr, false);
  if (!meta.is_object() || !meta.contains("uid_base"))
    return makeError(ErrorKind::kInvalidArgument, "snapshot {}: snapshot.json unreadable", ref.id);
  TRY(checkVolumeSpace("fork " + spec.id + " from " + ref.id));
  return startFrom(spec, ref.path + "/disk.img", meta["uid_base"].get<uint32_t>());
}

// Rollback: every process of the sandbox stops, the layer image becomes a clone of the snapshot's, and
// the sandbox starts again on it in place: same directory, cgroup, uid range and network address.
Result<Instance> JailRuntime::rollback(Instance& inst, const runtime::SnapshotRef& ref) {
  if (ref.kind != "filesystem")
    return makeError(ErrorKind::kInvalidArgument, "snapshot {} is not a jail snapshot", ref.id);
  PersistedInstance persisted = inst.persisted;
  auto& state = persisted.state;
  std::string dir = state.value("dir", std::string());
  std::string image = state.value("image", std::string());
  if (image.empty() || !state.contains("rootfs_template"))
    return makeError(ErrorKind::kUnsupported, "sandbox {} was made before rollback existed", inst.id);
  // The new layer first: a failure here leaves the sandbox as it was.
  std::string next = image + ".next";
  unlink(next.c_str());
  // Not synced: after a host crash the rename may be lost too, and the sandbox keeps its old layer.
  auto cloned = cloneFile(ref.path + "/disk.img", next, 0600, /*durable=*/false);
  // A full volume: the ballast kept for this makes room (the old layer's blocks are freed after).
  if (!cloned && cloned.error().sys_errno == ENOSPC && releaseVolumeReserve(volume_)) {
    unlink(next.c_str());
    cloned = cloneFile(ref.path + "/disk.img", next, 0600, /*durable=*/false);
  }
  TRY(std::move(cloned));
  if (chmod(next.c_str(), 0600) < 0) return sysError(errno, "chmod {}", next);
  uint32_t snap_uid = 0;
  {
    std::ifstream in(ref.path + "/snapshot.json");
    auto meta = nlohmann::json::parse(in, nullptr, false);
    if (meta.is_object()) snap_uid = meta.value("uid_base", 0u);
  }
  std::string cgroup = state.value("cgroup", inst.id);
  (void)cgroups_->freeze(cgroup, false);
  TRY(killAndWait(state["pid"].get<int>(), state["start_time"].get<uint64_t>()));
  unmountHostCopies(dir);
  // The old image's inode lives on until the old mount namespace is fully gone; the path is the new one.
  if (rename(next.c_str(), image.c_str()) < 0) return sysError(errno, "rename {} to {}", next, image);
  auto restarted = relaunchInPlace(persisted, snap_uid);
  ensureVolumeReserve(volume_);
  return restarted;
}

// The second half of a rollback, also what finishes one that a dead spaced left half-done: whatever
// layer image the sandbox has now (the old one, or the snapshot's clone: the rename is atomic) is
// mounted again and the sandbox started on it in place.
Result<Instance> JailRuntime::restartInPlace(const PersistedInstance& inst, uint32_t files_uid_base) {
  PersistedInstance persisted = inst;
  auto& state = persisted.state;
  std::string dir = state.value("dir", std::string());
  std::string image = state.value("image", std::string());
  if (image.empty() || dir.empty() || !state.contains("rootfs_template"))
    return makeError(ErrorKind::kUnsupported, "sandbox {} was made before rollback existed", inst.id);
  std::string cgroup = state.value("cgroup", inst.id);
  (void)cgroups_->freeze(cgroup, false);
  if (state.contains("pid") && state.contains("start_time"))
    TRY(killAndWait(state["pid"].get<int>(), state["start_time"].get<uint64_t>()));
  // An init the interrupted relaunch started is in the cgroup but in no row: every process there goes
  // (each is the init of a pid namespace or dies with one).
  TRY(killCgroupProcesses(cgroup));
  // Whatever a launch cut short left mounted on the host (the layer, the rootfs).
  unmountHostCopies(dir);
  std::string next = image + ".next";
  unlink(next.c_str());  // a clone whose rename never happened: the sandbox keeps its old layer
  return relaunchInPlace(persisted, files_uid_base);
}

Result<Instance> JailRuntime::relaunchInPlace(PersistedInstance persisted, uint32_t files_uid_base) {
  auto& state = persisted.state;
  SandboxSpec spec;
  spec.id = persisted.id;
  spec.dir = state.value("dir", std::string());
  spec.template_rootfs = state["rootfs_template"].get<std::string>();
  spec.hostname = state.value("hostname", persisted.id);
  spec.uid_base = state.value("uid_base", 0u);
  spec.uid_count = state.value("uid_count", 65536u);
  spec.limits.nofile = state.value("nofile", 4096u);
  TRY(launch(LaunchVariant::kRelaunch, spec, persisted, "", files_uid_base));
  ASSIGN_OR_RETURN(auto agent,
                   connectAgent(persisted).map_error([&](Error e) { return e.context("restart " + persisted.id); }));
  int pid = state["pid"].get<int>();
  return Instance{persisted.id, pid, std::move(agent), std::move(persisted)};
}

}  // namespace space::jail
