// Sandbox snapshots of the vm tier (docs/snapshots.md): a snapshot is the VM stopped for a moment and
//   state          its device state, without RAM (QMP xen-save-devices-state, through a passed descriptor)
//   memory         the guest pages that differ from the template's, at their offsets (sparse)
//   memory.pages   which pages those are (guest_memory.h), zero pages included
//   disk.qcow2     a block-sharing clone of its disk overlay (backing: the template's disk)
//   snapshot.json  template, build stamp and machine shape it belongs to
// A restore (fork) or rollback spawns a VMM like a template restore — the template's RAM mapped privately —
// writes the snapshot's pages into that mapping, loads the device state and lets the guest run on: its
// processes continue where they were. Memory shared with the template stays shared; nothing is copied
// whole.
#include <fcntl.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "common/defer.h"
#include "common/ids.h"
#include "net/veth.h"
#include "runtime/host/layer_volume.h"
#include "runtime/host/network.h"
#include "runtime/vm/confine.h"
#include "runtime/vm/guest_memory.h"
#include "runtime/vm/template_snapshot.h"
#include "runtime/vm/vm_runtime.h"

namespace space::vm {

using nlohmann::json;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

namespace {

constexpr uint64_t kMiB = 1ull << 20;

Status writeFileSynced(const std::string& path, const std::string& content) {
  UniqueFd fd(open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0400));
  if (!fd) return sysError(errno, "create {}", path);
  if (write(fd.get(), content.data(), content.size()) != static_cast<ssize_t>(content.size()))
    return sysError(errno ? errno : EIO, "write {}", path);
  if (fsync(fd.get()) < 0) return sysError(errno, "fsync {}", path);
  return ok();
}

Status syncFile(const std::string& path) {
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return sysError(errno, "open {}", path);
  if (fsync(fd.get()) < 0) return sysError(errno, "fsync {}", path);
  return ok();
}

Result<std::string> readWhole(const std::string& path, size_t max) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return sysError(errno ? errno : ENOENT, "open {}", path);
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (s.size() > max) return makeError(ErrorKind::kInvalidArgument, "{} is larger than {} bytes", path, max);
  return s;
}

Result<json> readSnapshotMeta(const std::string& dir) {
  ASSIGN_OR_RETURN(std::string text, readWhole(dir + "/snapshot.json", 64 * 1024));
  json meta = json::parse(text, nullptr, false);
  if (!meta.is_object() || meta.value("runtime", "") != "vm")
    return makeError(ErrorKind::kInvalidArgument, "{} does not hold a vm snapshot", dir);
  return meta;
}

uint64_t allocatedBytes(const std::string& dir) {
  uint64_t total = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    struct stat st;
    if (lstat(e.path().c_str(), &st) == 0) total += static_cast<uint64_t>(st.st_blocks) * 512;
  }
  return total;
}

}  // namespace

Result<ino_t> VmRuntime::memoryInode(const VmTemplate& tpl) {
  ASSIGN_OR_RETURN(int fd, memoryFd(tpl));
  struct stat st;
  if (fstat(fd, &st) < 0) return sysError(errno, "stat template memory");
  return st.st_ino;
}

Result<runtime::SnapshotRef> VmRuntime::snapshot(runtime::Instance& inst, runtime::SnapshotKind) {
  if (config_.snapshots_dir.empty())
    return makeError(ErrorKind::kUnsupported, "vm snapshots need the layer volume (not configured)");
  const json& st = inst.persisted.state;
  std::string dir = st.value("dir", "");
  pid_t pid = st.value("pid", 0);
  if (!st.value("restored", false) || st.value("parked", false))
    return makeError(ErrorKind::kConflict, "vm {} has not started from its template yet", inst.id);
  if (!isQemuOf(pid, dir)) return makeError(ErrorKind::kNotFound, "vm {}: its QEMU is gone", inst.id);
  ASSIGN_OR_RETURN(VmTemplate tpl, readTemplate(st.value("template", "")));
  if (tpl.stamp != st.value("template_stamp", ""))
    return makeError(ErrorKind::kConflict, "the VM template {} was rebuilt after vm {} started", tpl.dir, inst.id);
  ASSIGN_OR_RETURN(ino_t ram_inode, memoryInode(tpl));
  ASSIGN_OR_RETURN(QmpClient * qmp, qmpFor(inst.persisted));

  runtime::SnapshotRef ref;
  ref.id = "snap-" + randomHex(8);
  ref.path = config_.snapshots_dir + "/" + ref.id;
  ref.kind = "full";
  std::string tmp = ref.path + ".tmp";
  if (mkdir(tmp.c_str(), 0700) < 0) return sysError(errno, "create {}", tmp);
  Defer drop([&] {
    std::error_code ec;
    fs::remove_all(tmp, ec);
  });

  auto t0 = Clock::now();
  bool paused = st.value("paused", false);
  TRY(qmp->execute("stop"));  // also drains and flushes the disk
  bool running = !paused;
  Defer resume([&] {
    if (running) (void)qmp->execute("cont");
  });
  {
    UniqueFd out(open((tmp + "/state").c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0400));
    if (!out) return sysError(errno, "create {}/state", tmp);
    ASSIGN_OR_RETURN(json added, qmp->executeWithFd("add-fd", json::object(), out.get()));
    int64_t set = added.is_object() ? added.value("fdset-id", int64_t{-1}) : -1;
    if (set < 0) return makeError(ErrorKind::kInternal, "vm {}: add-fd returned no fd set", inst.id);
    auto saved =
        qmp->execute("xen-save-devices-state", {{"filename", fmt::format("/dev/fdset/{}", set)}, {"live", false}});
    (void)qmp->execute("remove-fd", {{"fdset-id", set}});
    if (!saved) return tl::unexpected(saved.error().context("save the device state of vm " + inst.id));
  }
  ASSIGN_OR_RETURN(RamMapping ram, findRamMapping(pid, ram_inode, tpl.memory_mib * kMiB));
  ASSIGN_OR_RETURN(PageSet pages, privatePages(pid, ram));
  uint64_t memory_bytes = 0;
  // With a key the clear pages go to a tmpfs (clear_memory_dir) and only their sealed form to disk.
  std::string clear;
  Defer drop_clear([&] {
    if (!clear.empty()) (void)unlink(clear.c_str());
  });
  if (config_.memory_sealer) {
    clear = fmt::format("{}/space-vm-memory-{}", config_.clear_memory_dir, randomHex(8));
    UniqueFd mem(open(clear.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!mem) return sysError(errno, "create {}", clear);
    ASSIGN_OR_RETURN(memory_bytes, saveGuestPages(pid, ram, pages, mem.get()));
  } else {
    UniqueFd mem(open((tmp + "/memory").c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0400));
    if (!mem) return sysError(errno, "create {}/memory", tmp);
    ASSIGN_OR_RETURN(memory_bytes, saveGuestPages(pid, ram, pages, mem.get()));
  }
  std::string disk = st.value("disk", "");
  if (!disk.empty()) TRY(host::cloneFile(disk, tmp + "/disk.qcow2", 0444, /*durable=*/false));
  // Everything the guest state consists of is captured: it runs on while the files are made durable.
  if (running) TRY(qmp->execute("cont"));
  running = false;
  auto stopped = Clock::now() - t0;

  if (!clear.empty()) {
    TRY(config_.memory_sealer->seal(clear, tmp + "/memory.sealed"));
    (void)unlink(clear.c_str());
    clear.clear();
    if (chmod((tmp + "/memory.sealed").c_str(), 0400) < 0) return sysError(errno, "chmod {}/memory.sealed", tmp);
  }
  for (const char* f : {"/state", config_.memory_sealer ? "/memory.sealed" : "/memory"}) TRY(syncFile(tmp + f));
  if (!disk.empty()) TRY(syncFile(tmp + "/disk.qcow2"));
  TRY(writeFileSynced(tmp + "/memory.pages", pages.serialize()));
  json meta = {{"runtime", "vm"},
               {"kind", "full"},
               {"sandbox", inst.id},
               {"template", tpl.dir},
               {"template_stamp", tpl.stamp},
               {"memory_mib", tpl.memory_mib},
               {"vcpus", tpl.vcpus},
               {"pages", pages.count()},
               {"disk", !disk.empty()},
               {"paused", paused},
               {"memory_sealed", config_.memory_sealer != nullptr}};
  TRY(writeFileSynced(tmp + "/snapshot.json", meta.dump(2) + "\n"));
  TRY(host::syncDir(tmp));
  if (rename(tmp.c_str(), ref.path.c_str()) < 0) return sysError(errno, "rename {}", tmp);
  drop.dismiss();
  TRY(host::syncDir(config_.snapshots_dir));
  ref.size_bytes = allocatedBytes(ref.path);
  spdlog::debug("vm {} snapshot {}: {} pages of its own ({} bytes written), guest stopped {} us", inst.id, ref.id,
                pages.count(), memory_bytes, std::chrono::duration_cast<std::chrono::microseconds>(stopped).count());
  return ref;
}

Result<runtime::Instance> VmRuntime::startFromSnapshot(const runtime::SandboxSpec& spec,
                                                       const std::string& snapshot_dir, const VmTemplate& tpl,
                                                       const std::string& overlay, UniqueFd tap, json extra) {
  auto deadline = Clock::now() + std::chrono::seconds(60);
  std::string dir = vmDir(spec);
  uid_t uid = spec.uid_base ? spec.uid_base : config_.warm_uid;
  int memory_fd = -1;
  std::vector<std::string> read_only;
  ASSIGN_OR_RETURN(QemuSpec qemu, restoringSpec(spec, tpl, dir, overlay, &memory_fd, &read_only));
  qemu.device_state_only = true;
  if (extra.contains("net")) qemu.mac = extra["net"].value("mac", "");
  ASSIGN_OR_RETURN(ino_t ram_inode, memoryInode(tpl));
  ASSIGN_OR_RETURN(std::string page_bits, readWhole(snapshot_dir + "/memory.pages", 64 << 20));
  ASSIGN_OR_RETURN(PageSet pages, PageSet::parse(page_bits, tpl.memory_mib * kMiB / kPageBytes));
  UniqueFd memory;
  if (access((snapshot_dir + "/memory.sealed").c_str(), F_OK) == 0) {
    if (!config_.memory_sealer)
      return makeError(ErrorKind::kConflict, "the memory of snapshot {} is sealed and no snapshot_kek is configured",
                       fs::path(snapshot_dir).filename().string());
    // Opened into a tmpfs, then unlinked: only this descriptor holds the clear pages.
    std::string clear = fmt::format("{}/space-vm-memory-{}", config_.clear_memory_dir, randomHex(8));
    auto opened = config_.memory_sealer->open(snapshot_dir + "/memory.sealed", clear);
    if (opened) memory.reset(open(clear.c_str(), O_RDONLY | O_CLOEXEC));
    int err = errno;
    (void)unlink(clear.c_str());
    if (!opened) return tl::unexpected(opened.error());
    if (!memory) return sysError(err, "open {}", clear);
  } else {
    memory.reset(open((snapshot_dir + "/memory").c_str(), O_RDONLY | O_CLOEXEC));
    if (!memory) return sysError(errno, "open {}/memory", snapshot_dir);
  }

  std::vector<std::string> writable;
  if (!tpl.disk.empty() && !config_.layers_dir.empty()) writable.push_back(overlay);
  auto t0 = Clock::now();
  ASSIGN_OR_RETURN(QemuProcess proc,
                   spawn(qemu, spec.id, uid, read_only, memory_fd, qemu.memory_mib, writable, tap.get()));
  auto t_spawn = Clock::now();
  Clock::time_point t_qmp, t_pages, t_state;
  tap.reset();
  std::string cgroup = spec.id;
  extra["cgroup"] = cgroup;
  extra["restored"] = true;
  std::unique_ptr<QmpClient> qmp;
  auto started = [&]() -> Result<std::shared_ptr<agent::AgentClient>> {
    ASSIGN_OR_RETURN(qmp, QmpClient::connect(VmPaths::in(dir).qmp, Duration(30000)));
    t_qmp = Clock::now();
    // The VMM is initialised (it answers QMP): its RAM is mapped, the guest not yet running.
    ASSIGN_OR_RETURN(RamMapping ram, findRamMapping(proc.pid, ram_inode, tpl.memory_mib * kMiB));
    TRY(loadGuestPages(proc.pid, ram, pages, memory.get()));
    t_pages = Clock::now();
    TRY(loadDeviceState(*qmp, snapshot_dir + "/state", std::chrono::seconds(60)));
    t_state = Clock::now();
    // The guest resumes inside the snapshot's agent session; a new hello starts a fresh one. Bytes of the
    // old session still in flight can spoil the first handshake: the second starts clean.
    auto agent = connectAgent(dir, std::min(deadline, Clock::now() + std::chrono::seconds(10)));
    if (agent) return agent;
    spdlog::debug("vm {}: first agent handshake after restore failed ({}); reconnecting", spec.id,
                  agent.error().message);
    return connectAgent(dir, deadline);
  }();
  if (!started) {
    Error e = started.error();
    e.message += "; qemu: " + tailOfFile(VmPaths::in(dir).log, 400);
    killAndClean(proc.pid, cgroup);
    return tl::unexpected(e.context(fmt::format("restore vm {} from snapshot", spec.id)));
  }
  auto us = [](auto d) { return std::chrono::duration_cast<std::chrono::microseconds>(d).count(); };
  spdlog::debug("vm {} from snapshot: spawn {} us, qmp {} us, {} pages {} us, device state {} us, agent {} us", spec.id,
                us(t_spawn - t0), us(t_qmp - t_spawn), pages.count(), us(t_pages - t_qmp), us(t_state - t_pages),
                us(Clock::now() - t_state));
  runtime::Instance inst = instanceOf(spec.id, proc.pid, dir, extra);
  inst.agent = std::move(*started);
  std::lock_guard lock(mu_);
  qmp_[spec.id] = std::move(qmp);
  return inst;
}

Result<runtime::Instance> VmRuntime::restore(const runtime::SnapshotRef& ref, const runtime::SandboxSpec& spec) {
  TRY(awaitAccel());
  if (config_.snapshots_dir.empty())
    return makeError(ErrorKind::kUnsupported, "vm snapshots need the layer volume (not configured)");
  ASSIGN_OR_RETURN(json meta, readSnapshotMeta(ref.path));
  ASSIGN_OR_RETURN(VmTemplate tpl, ensureTemplate(spec));
  if (tpl.dir != meta.value("template", "") || tpl.stamp != meta.value("template_stamp", ""))
    return makeError(ErrorKind::kConflict, "snapshot {} belongs to another build or shape of the template", ref.id);
  ASSIGN_OR_RETURN(std::string dir, makeVmDir(spec));
  uid_t uid = spec.uid_base ? spec.uid_base : config_.warm_uid;
  std::string overlay = overlayPath(spec.id, dir);
  json extra = {
      {"template", tpl.dir}, {"template_stamp", tpl.stamp}, {"memory_mib", tpl.memory_mib}, {"from_snapshot", ref.id}};
  if (meta.value("disk", false)) {
    TRY(host::cloneFile(ref.path + "/disk.qcow2", overlay, 0600, /*durable=*/false));
    if (chown(overlay.c_str(), uid, uid) < 0) return sysError(errno, "chown {}", overlay);
    extra["disk"] = overlay;
  }
  // Its own network: a /30 and tap of its own (the guest learns its address at hand-over).
  json net_state;
  UniqueFd tap;
  Defer undo_net([&] {
    if (config_.network_pool && !net_state.is_null())
      (void)host::detachNetwork(*config_.network_pool, {{"net", net_state}});
  });
  TRY(allocateNetwork(net_state, tap));
  if (!net_state.is_null()) extra["net"] = net_state;
  ASSIGN_OR_RETURN(runtime::Instance inst, startFromSnapshot(spec, ref.path, tpl, overlay, std::move(tap), extra));
  undo_net.dismiss();
  return inst;
}

Result<runtime::Instance> VmRuntime::rollback(runtime::Instance& inst, const runtime::SnapshotRef& ref) {
  TRY(awaitAccel());
  if (config_.snapshots_dir.empty())
    return makeError(ErrorKind::kUnsupported, "vm snapshots need the layer volume (not configured)");
  ASSIGN_OR_RETURN(json meta, readSnapshotMeta(ref.path));
  json state = inst.persisted.state;
  if (meta.value("template", "") != state.value("template", "") ||
      meta.value("template_stamp", "") != state.value("template_stamp", ""))
    return makeError(ErrorKind::kConflict, "snapshot {} belongs to another build or shape of the template", ref.id);
  ASSIGN_OR_RETURN(VmTemplate tpl, readTemplate(state.value("template", "")));
  std::string dir = state.value("dir", "");
  std::string overlay = state.value("disk", "");
  struct stat disk_st {};
  uid_t uid = config_.warm_uid;
  if (!overlay.empty()) {
    if (stat(overlay.c_str(), &disk_st) < 0) return sysError(errno, "stat {}", overlay);
    uid = disk_st.st_uid;
  }
  // The next disk first: a failure up to the kill leaves the VM as it was.
  if (meta.value("disk", false) && !overlay.empty()) {
    std::string next = overlay + ".next";
    (void)unlink(next.c_str());
    TRY(host::cloneFile(ref.path + "/disk.qcow2", next, 0600, /*durable=*/false));
    if (chown(next.c_str(), uid, uid) < 0) return sysError(errno, "chown {}", next);
  }
  auto t0 = Clock::now();
  {
    std::lock_guard lock(mu_);
    qmp_.erase(inst.id);
  }
  inst.agent.reset();
  pid_t pid = state.value("pid", 0);
  if (isQemuOf(pid, dir)) killVmm(pid);
  // A VMM of an earlier attempt that spaced's death cut short (finishing a rollback at start-up).
  for (int i = 0; i < 8; ++i) {
    pid_t stray = findQemuOf(dir);
    if (stray <= 0) break;
    killVmm(stray);
  }
  auto t_kill = Clock::now();
  std::string cgroup = state.value("cgroup", "");
  if (cgroups_ && !cgroup.empty()) {
    // Anything else left in the VMM's group (a launch of that attempt that never reached QEMU).
    if (auto left = cgroups_->processes(cgroup))
      for (pid_t p : *left) (void)kill(p, SIGKILL);
    TRY(cgroups_->remove(cgroup));
  }
  spdlog::debug("vm {} rollback: old VMM gone in {} us, cgroup {} us", inst.id,
                std::chrono::duration_cast<std::chrono::microseconds>(t_kill - t0).count(),
                std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t_kill).count());
  if (meta.value("disk", false) && !overlay.empty() && rename((overlay + ".next").c_str(), overlay.c_str()) < 0)
    return sysError(errno, "rename {}.next", overlay);
  // The same network identity: the same tap name on the same /30 (the old one went with its VMM).
  UniqueFd tap;
  if (auto subnet = host::persistedSubnet(state); subnet && config_.network_pool) {
    ASSIGN_OR_RETURN(tap, net::createSandboxTap(state["net"].value("link", host::linkNameFor(*subnet)), *subnet));
  }
  runtime::SandboxSpec spec;
  spec.id = inst.id;
  spec.dir = dir;
  spec.uid_base = uid;
  for (const char* transient : {"pid", "dir", "parked", "paused", "cgroup", "restored"}) state.erase(transient);
  state["from_snapshot"] = ref.id;
  return startFromSnapshot(spec, ref.path, tpl, overlay, std::move(tap), state);
}

}  // namespace space::vm
