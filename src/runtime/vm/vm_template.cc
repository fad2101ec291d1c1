// The vm tier's templates: per template and machine shape, the ext4 image of its tree, the qcow2 of the
// warm-up VM's disk writes, its RAM file and device state (made once by booting one VM, never changed
// after), the sealed memfd of that RAM each VMM maps, and the clean-up of a warm-up cut short.
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>

#include "runtime/vm/confine.h"
#include "runtime/vm/template_snapshot.h"
#include "runtime/vm/vm_runtime.h"
#include "sys/host_command.h"

namespace space::vm {

using nlohmann::json;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

namespace {

constexpr uint64_t kMiB = 1ull << 20;

// Waits up to `timeout` for our child to exit by itself.
bool waitExit(const QemuProcess& proc, std::chrono::milliseconds timeout) {
  if (!proc.pidfd) return false;
  pollfd pfd{proc.pidfd.get(), POLLIN, 0};
  if (poll(&pfd, 1, static_cast<int>(timeout.count())) <= 0) return false;
  while (waitpid(proc.pid, nullptr, 0) < 0 && errno == EINTR) {
  }
  return true;
}

Status fsyncPath(const std::string& path, int flags = O_RDONLY) {
  UniqueFd fd(open(path.c_str(), flags | O_CLOEXEC));
  if (!fd) return sysError(errno, "open {}", path);
  if (fsync(fd.get()) < 0) return sysError(errno, "fsync {}", path);
  return ok();
}

// Identifies the guest build: a template snapshot is only valid for the kernel and initramfs that made it.
std::string guestKey(const std::string& kernel, const std::string& initrd, const std::string& cmdline, Accel accel) {
  // The device model is part of the key: a snapshot holds the state of exactly these devices.
  std::string id = cmdline + (accel == Accel::kKvm ? "|kvm" : "|tcg") + "|" + kDeviceModel;
  for (const auto& p : {kernel, initrd}) {
    struct stat st {};
    stat(p.c_str(), &st);
    id += fmt::format("|{}:{}:{}:{}", p, st.st_ino, st.st_size, st.st_mtim.tv_sec);
  }
  return fmt::format("{:016x}", std::hash<std::string>{}(id));
}

// The directory name of a template's VM artifacts: its content hash, shortened (paths of unix sockets
// are limited to 108 bytes).
std::string templateKey(const runtime::SandboxSpec& spec) {
  if (spec.template_id.empty())
    return spec.template_rootfs.empty() ? std::string("bare")
                                        : fmt::format("tree-{:016x}", std::hash<std::string>{}(spec.template_rootfs));
  std::string id = spec.template_id;
  if (size_t colon = id.find(':'); colon != std::string::npos) id = id.substr(colon + 1);
  return id.substr(0, 24);
}

// A restored VMM still needs -kernel (its presence adds the boot option ROM whose RAM block the device
// state names) but never boots it, while QEMU keeps the whole image in its heap. The stub is the
// kernel's real setup header (what QEMU parses) followed by one page: 8 MiB less per VM.
Status writeKernelStub(const std::string& kernel, const std::string& out) {
  std::ifstream in(kernel, std::ios::binary);
  std::string head(0x2000, '\0');
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  if (in.gcount() < 0x300 || head.compare(0x202, 4, "HdrS") != 0)
    return makeError(ErrorKind::kInvalidArgument, "{} is not a bzImage", kernel);
  size_t setup_sects = static_cast<unsigned char>(head[0x1f1]);
  if (setup_sects == 0) setup_sects = 4;
  size_t setup = (setup_sects + 1) * 512;
  std::string stub(setup + 4096, '\0');
  in.clear();
  in.seekg(0);
  in.read(stub.data(), static_cast<std::streamsize>(setup));
  if (static_cast<size_t>(in.gcount()) != setup)
    return makeError(ErrorKind::kInvalidArgument, "{}: short setup", kernel);
  std::ofstream o(out + ".tmp", std::ios::binary | std::ios::trunc);
  o.write(stub.data(), static_cast<std::streamsize>(stub.size()));
  o.close();
  if (!o) return makeError(ErrorKind::kInternal, "write {}", out);
  if (rename((out + ".tmp").c_str(), out.c_str()) < 0) return sysError(errno, "rename {}", out);
  return ok();
}

}  // namespace

uint64_t treeBytes(const std::string& tree) {
  static thread_local uint64_t total;
  total = 0;
  nftw(
      tree.c_str(),
      [](const char*, const struct stat* st, int, FTW*) {
        total += static_cast<uint64_t>(st->st_blocks) * 512;
        return 0;
      },
      64, FTW_PHYS);
  return total;
}

Status buildExt4Image(const std::string& tree, const std::string& out, uint64_t size_bytes) {
  std::string tmp = out + ".tmp";
  unlink(tmp.c_str());
  {
    UniqueFd fd(open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (!fd) return sysError(errno, "create {}", tmp);
    if (ftruncate(fd.get(), static_cast<off_t>(size_bytes)) < 0) return sysError(errno, "size {}", tmp);
  }
  // No journal: the image is written once here and each VM writes only its own throw-away overlay; the
  // guest's consistency points are SPACE's snapshots, taken with the VM stopped. -m 0: no blocks
  // reserved for root (the sandbox's user is root anyway).
  auto st = sys::runCommand({"mkfs.ext4", "-q", "-F", "-O", "^has_journal", "-m", "0", "-L", "space-root", "-E",
                             "lazy_itable_init=0,lazy_journal_init=0", "-d", tree, tmp},
                            [](const std::string&) {});
  if (!st) {
    unlink(tmp.c_str());
    return tl::unexpected(st.error().context("build ext4 image of " + tree));
  }
  TRY(fsyncPath(tmp));
  // Shared by every VM of the template, below their overlays: never written again.
  if (chmod(tmp.c_str(), 0444) < 0) return sysError(errno, "seal {}", tmp);
  if (rename(tmp.c_str(), out.c_str()) < 0) return sysError(errno, "rename {}", tmp);
  return ok();
}

Status createOverlay(const std::string& backing, const std::string& backing_format, const std::string& out) {
  unlink(out.c_str());
  auto st = sys::runCommand(
      {"qemu-img", "create", "-q", "-f", "qcow2", "-o", "lazy_refcounts=on", "-F", backing_format, "-b", backing, out},
      [](const std::string&) {});
  if (!st) return tl::unexpected(st.error().context("create disk overlay " + out));
  return ok();
}

// A template warm-up is not in the database: when spaced dies during one, its VMM (in a session of its
// own) keeps running and its half-made files stay. The next start kills it and removes what it left.
void VmRuntime::cleanInterruptedWarmups() {
  std::string run_root = config_.state_dir + "/vm/run";
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(run_root, ec)) {
    std::string name = entry.path().filename().string();
    if (name.rfind("warm-", 0) != 0) continue;
    std::string dir = entry.path().string();
    std::string needle = "unix:" + VmPaths::in(dir).qmp + ",";
    for (const auto& proc : fs::directory_iterator("/proc", ec)) {
      std::string pid = proc.path().filename().string();
      if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
      std::ifstream in(proc.path() / "cmdline");
      std::string cmdline((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      if (cmdline.find(needle) != std::string::npos) {
        spdlog::warn("vm: killing the VMM of an interrupted template warm-up ({})", name);
        killVmm(static_cast<pid_t>(std::stol(pid)));
      }
    }
    if (cgroups_) (void)cgroups_->remove(name);
    fs::remove_all(dir, ec);
  }
  // Half-made template directories: a build renames into place only when complete.
  for (const auto& tpl : fs::directory_iterator(config_.state_dir + "/vm/templates", ec)) {
    for (const auto& shape : fs::directory_iterator(tpl.path(), ec)) {
      std::string p = shape.path().string();
      if (p.size() > 4 && (p.compare(p.size() - 4, 4, ".tmp") == 0)) fs::remove_all(p, ec);
    }
  }
}

Result<std::string> VmRuntime::ensureBaseImage(const runtime::SandboxSpec& spec, uint64_t disk_bytes) {
  std::string dir = config_.state_dir + "/vm/templates/" + templateKey(spec);
  std::string path = fmt::format("{}/base-d{}.ext4", dir, disk_bytes / kMiB);
  if (access(path.c_str(), R_OK) == 0) return path;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return makeError(ErrorKind::kInternal, "create {}: {}", dir, ec.message());
  // The guest's free space is the sandbox's disk limit: the tree plus the limit, plus ext4's metadata.
  uint64_t size = treeBytes(spec.template_rootfs) * 11 / 10 + disk_bytes + 64 * kMiB;
  size = (size + kMiB - 1) / kMiB * kMiB;
  TRY(buildExt4Image(spec.template_rootfs, path, size));
  return path;
}

std::string VmRuntime::templateDir(const runtime::SandboxSpec& spec) const {
  QemuSpec shape = qemuSpecFor(spec, "");
  return fmt::format("{}/vm/templates/{}/c{}-m{}-d{}-{}", config_.state_dir, templateKey(spec), shape.vcpus,
                     shape.memory_mib, spec.limits.disk_bytes / kMiB,
                     guestKey(shape.kernel, shape.initrd, shape.extra_cmdline, accel_));
}

bool VmRuntime::hasTemplate(const runtime::SandboxSpec& spec) const {
  if (!accelIfDecided()) return false;  // the key names the accelerator
  return access((templateDir(spec) + "/template.json").c_str(), R_OK) == 0;
}

Result<VmTemplate> readTemplate(const std::string& dir) {
  std::ifstream in(dir + "/template.json");
  if (!in) return makeError(ErrorKind::kNotFound, "no VM template in {}", dir);
  json meta = json::parse(in, nullptr, false);
  if (meta.is_discarded()) return makeError(ErrorKind::kInternal, "{}/template.json is not JSON", dir);
  VmTemplate t;
  t.dir = dir;
  t.base_image = meta.value("base_image", "");
  t.disk = meta.value("disk", false) ? dir + "/disk.qcow2" : "";
  t.memory = dir + "/memory";
  t.state = dir + "/state";
  t.vcpus = meta.value("vcpus", 1u);
  t.memory_mib = meta.value("memory_mib", 256u);
  t.stamp = meta.value("stamp", "");
  return t;
}

Result<VmTemplate> VmRuntime::ensureTemplate(const runtime::SandboxSpec& spec) {
  TRY(awaitAccel());
  std::string dir = templateDir(spec);
  auto load = [&] { return readTemplate(dir); };
  if (auto t = load()) return t;
  std::shared_ptr<std::mutex> lock_of_key;
  {
    std::lock_guard lock(mu_);
    auto& l = building_[dir];
    if (!l) l = std::make_shared<std::mutex>();
    lock_of_key = l;
  }
  std::lock_guard build_lock(*lock_of_key);
  if (auto t = load()) return t;
  auto t0 = Clock::now();
  TRY(buildTemplate(spec, dir));
  spdlog::info("vm template {} made in {} ms", dir,
               std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count());
  return load();
}

Status VmRuntime::buildTemplate(const runtime::SandboxSpec& spec, const std::string& dir) {
  std::string tmp = dir + ".tmp";
  std::error_code ec;
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  if (ec) return makeError(ErrorKind::kInternal, "create {}: {}", tmp, ec.message());
  std::string run;
  auto cleanup = [&] {
    fs::remove_all(tmp, ec);
    if (!run.empty()) fs::remove_all(run, ec);
  };

  runtime::SandboxSpec warm = spec;
  warm.id = "warm-" + fmt::format("{:08x}", static_cast<uint32_t>(std::hash<std::string>{}(dir)));
  // The warm-up VMM's sockets and logs live in a short directory of its own; it writes the template's
  // directory too: its RAM becomes tmp/memory, its disk writes tmp/disk.qcow2.
  run = config_.state_dir + "/vm/run/" + warm.id;
  fs::remove_all(run, ec);
  fs::create_directories(run, ec);
  if (ec) return makeError(ErrorKind::kInternal, "create {}: {}", run, ec.message());
  QemuSpec qemu = qemuSpecFor(spec, run);
  qemu.memory_file = tmp + "/memory";
  qemu.memory_file_shared = true;
  qemu.console_file = run + "/console.log";
  std::vector<std::string> read_only;
  std::string base;
  if (!spec.template_rootfs.empty()) {
    auto b = ensureBaseImage(spec, spec.limits.disk_bytes);
    if (!b) {
      cleanup();
      return tl::unexpected(b.error());
    }
    base = *b;
    if (auto st = createOverlay(base, "raw", tmp + "/disk.qcow2"); !st) {
      cleanup();
      return tl::unexpected(st.error());
    }
    qemu.disks.push_back({tmp + "/disk.qcow2", "qcow2", false});
    read_only.push_back(base);
  }
  uid_t uid = config_.warm_uid;
  for (const auto& p : {tmp, run, tmp + "/disk.qcow2"})
    if (access(p.c_str(), F_OK) == 0 && chown(p.c_str(), uid, uid) < 0) {
      cleanup();
      return sysError(errno, "chown {}", p);
    }
  auto proc = spawn(qemu, warm.id, uid, read_only, -1, qemu.memory_mib, {tmp});
  if (!proc) {
    cleanup();
    return tl::unexpected(proc.error().context("warm vm template"));
  }
  auto deadline = Clock::now() + config_.start_timeout;
  auto saved = [&]() -> Status {
    ASSIGN_OR_RETURN(auto qmp, QmpClient::connect(VmPaths::in(qemu.dir).qmp, Duration(30000)));
    ASSIGN_OR_RETURN(auto agent, connectAgent(qemu.dir, deadline));
    // The agent answered: the guest is booted and waits on its port. Read what every sandbox needs into
    // its page cache, then end the host session so that every restored VM starts with the port idle.
    exerciseGuest(*agent);
    agent.reset();
    TRY(saveDeviceState(*qmp, tmp + "/state", std::chrono::seconds(60)));
    // A clean exit closes the disk image; the memory file is complete once the state is saved.
    (void)qmp->execute("quit", nullptr, Duration(5000));
    return ok();
  }();
  if (!waitExit(*proc, std::chrono::seconds(10))) killVmm(proc->pid);
  (void)cgroups_->remove(warm.id);
  if (!saved) {
    Error e = saved.error();
    e.message +=
        "; qemu: " + tailOfFile(VmPaths::in(qemu.dir).log, 400) + "; console: " + tailOfFile(qemu.console_file, 1200);
    cleanup();
    return tl::unexpected(e.context("warm vm template"));
  }
  fs::remove_all(run, ec);
  // Read-only from here on, owned by root: no VMM may change a template (SECURITY.md V3).
  for (const auto& f : {tmp + "/memory", tmp + "/state", tmp + "/disk.qcow2"}) {
    if (access(f.c_str(), F_OK) != 0) continue;
    if (chown(f.c_str(), 0, 0) < 0 || chmod(f.c_str(), 0444) < 0) return sysError(errno, "seal {}", f);
    TRY(fsyncPath(f));
  }
  if (auto st = writeKernelStub(qemu.kernel, tmp + "/kernel.stub"); !st) {
    cleanup();
    return st;
  }
  if (chmod((tmp + "/kernel.stub").c_str(), 0444) < 0) return sysError(errno, "seal kernel stub");
  // The stamp ties VMMs prepared from this template to this very build: a VMM waiting to restore must
  // load the device state that belongs to the memory it mapped.
  std::random_device rd;
  std::string stamp = fmt::format("{:08x}{:08x}", rd(), rd());
  json meta = {{"stamp", stamp},        {"memory_mib", qemu.memory_mib},
               {"vcpus", qemu.vcpus},   {"accel", accel_ == Accel::kKvm ? "kvm" : "tcg"},
               {"base_image", base},    {"disk", !base.empty()},
               {"kernel", qemu.kernel}, {"initrd", qemu.initrd}};
  {
    std::ofstream out(tmp + "/template.json");
    out << meta.dump() << "\n";
    if (!out) return makeError(ErrorKind::kInternal, "write {}/template.json", tmp);
  }
  TRY(fsyncPath(tmp + "/template.json"));
  if (chown(tmp.c_str(), 0, 0) < 0 || chmod(tmp.c_str(), 0755) < 0) return sysError(errno, "seal {}", tmp);
  if (rename(tmp.c_str(), dir.c_str()) < 0) return sysError(errno, "rename {} to {}", tmp, dir);
  TRY(fsyncPath(fs::path(dir).parent_path().string(), O_RDONLY | O_DIRECTORY));
  return ok();
}

Result<int> VmRuntime::memoryFd(const VmTemplate& tpl) {
  std::lock_guard lock(mu_);
  std::string key = tpl.dir + "#" + tpl.stamp;
  if (auto it = memory_fds_.find(key); it != memory_fds_.end()) return it->second.get();
  UniqueFd src(open(tpl.memory.c_str(), O_RDONLY | O_CLOEXEC));
  if (!src) return sysError(errno, "open {}", tpl.memory);
  struct stat st;
  if (fstat(src.get(), &st) < 0) return sysError(errno, "stat {}", tpl.memory);
  UniqueFd mem(memfd_create("space-vm-template", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!mem) return sysError(errno, "memfd_create");
  if (ftruncate(mem.get(), st.st_size) < 0) return sysError(errno, "size template memory");
  // Only the pages the warm-up guest touched hold data; the rest of the file is holes and stays so.
  std::vector<char> buf(1 << 20);
  off_t pos = 0;
  while (pos < st.st_size) {
    off_t data = lseek(src.get(), pos, SEEK_DATA);
    if (data < 0) break;  // ENXIO: only a hole is left
    off_t hole = lseek(src.get(), data, SEEK_HOLE);
    if (hole < 0) hole = st.st_size;
    for (off_t off = data; off < hole;) {
      size_t want = static_cast<size_t>(std::min<off_t>(hole - off, static_cast<off_t>(buf.size())));
      ssize_t n = pread(src.get(), buf.data(), want, off);
      if (n <= 0) return sysError(n < 0 ? errno : EIO, "read {}", tpl.memory);
      bool zero = std::all_of(buf.data(), buf.data() + n, [](char c) { return c == 0; });
      if (!zero && pwrite(mem.get(), buf.data(), static_cast<size_t>(n), off) != n)
        return sysError(errno, "copy template memory");
      off += n;
    }
    pos = hole;
  }
  if (fcntl(mem.get(), F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL) < 0)
    return sysError(errno, "seal template memory");
  int fd = mem.get();
  memory_fds_[key] = std::move(mem);
  return fd;
}

}  // namespace space::vm
