#include "runtime/vm/confine.h"

#include <fcntl.h>
#include <linux/sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <set>

#include "runtime/vm/vmm_stub.h"
#include "sys/path.h"
#include "sys/process.h"

namespace space::vm {
namespace {

using sys::parentOf;
using sys::realPath;

// What a failed stub step reported, in words: the step's name, and for the mount plan its entry.
Error stubError(const VmmStubFailure& f, const std::vector<MountStep>& plan, const std::string& qemu_path) {
  const char* name = vmmStubStepName(f.step);
  std::string what = name ? fmt::format("vmm stub step '{}'", name) : fmt::format("vmm stub step {}", f.step);
  if (f.mount >= 0 && static_cast<size_t>(f.mount) < plan.size()) {
    const MountStep& m = plan[static_cast<size_t>(f.mount)];
    what += fmt::format(" (entry {}: {} {})", f.mount, m.a, m.b);
  } else if (name && std::string_view(name) == "execve") {
    what += " (" + qemu_path + ")";
  }
  return Error{ErrorKind::kInternal, f.err, fmt::format("confine VMM: {}: {}", what, describeErrno(f.err))};
}

Status runHostSide(const VmmJail& jail, pid_t pid) { return jail.before_exec ? jail.before_exec(pid) : ok(); }

}  // namespace

Result<std::vector<MountStep>> planVmmRoot(const VmmJail& jail) {
  std::vector<MountStep> steps;
  std::set<std::string> made;  // directories already made under the root
  const std::string& root = jail.root_dir;
  auto mkdirs = [&](const std::string& dir) {
    std::vector<std::string> chain;
    for (std::string d = dir; d != "/" && !made.count(d); d = parentOf(d)) chain.push_back(d);
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
      steps.push_back({MountStep::kMkdir, root + *it, ""});
      made.insert(*it);
    }
  };
  auto bind = [&](const std::string& host_path, bool read_only) -> Status {
    ASSIGN_OR_RETURN(std::string real, realPath(host_path));
    struct stat st;
    if (stat(real.c_str(), &st) < 0) return sysError(errno, "stat {}", real);
    if (S_ISDIR(st.st_mode)) {
      mkdirs(real);
    } else {
      mkdirs(parentOf(real));
      steps.push_back({MountStep::kTouch, root + real, ""});
    }
    steps.push_back({read_only ? MountStep::kBindReadOnly : MountStep::kBind, real, root + real});
    return ok();
  };
  // Debian's merged /usr: the loader and libraries are found through these links.
  TRY(bind("/usr", true));
  for (const char* link : {"bin", "sbin", "lib", "lib64"}) {
    std::string target = std::string("usr/") + link;
    if (access(("/usr/" + std::string(link)).c_str(), F_OK) == 0)
      steps.push_back({MountStep::kSymlink, target, root + "/" + link});
  }
  for (const auto& p : jail.read_only) TRY(bind(p, true));
  for (const auto& p : jail.writable) TRY(bind(p, false));
  mkdirs("/dev");
  // The root tmpfs is nodev; the VMM's device nodes live on a tmpfs of their own, read-only once filled.
  steps.push_back({MountStep::kDevTmpfs, root + "/dev", ""});
  for (const auto& d : jail.devices) {
    steps.push_back({MountStep::kTouch, root + d, ""});
    steps.push_back({MountStep::kBindReadOnly, d, root + d});
  }
  if (jail.kvm) {
    struct stat st;
    if (stat("/dev/kvm", &st) < 0) return sysError(errno, "stat /dev/kvm");
    if (!S_ISCHR(st.st_mode)) return makeError(ErrorKind::kUnsupported, "/dev/kvm is not a character device");
    steps.push_back({MountStep::kCharDevice, root + "/dev/kvm", "", st.st_rdev});
  }
  steps.push_back({MountStep::kRemountReadOnly, root + "/dev", ""});
  mkdirs("/proc");
  return steps;
}

Result<QemuProcess> launchConfinedQemu(const QemuSpec& spec, const VmmJail& jail) {
  if (jail.uid == 0 || jail.gid == 0) return makeError(ErrorKind::kInvalidArgument, "the VMM may not run as root");
  ASSIGN_OR_RETURN(std::vector<MountStep> plan, planVmmRoot(jail));
  VmPaths paths = VmPaths::in(spec.dir);
  unlink(paths.qmp.c_str());
  unlink(paths.agent.c_str());
  if (chown(spec.dir.c_str(), jail.uid, jail.gid) < 0) return sysError(errno, "chown {}", spec.dir);

  std::vector<std::string> argv = buildQemuArgv(spec);
  argv.insert(argv.end(), {"-sandbox", kQemuSandboxArg});
  ASSIGN_OR_RETURN(std::string qemu_path, findQemuBinary(argv[0]));
  std::vector<char*> cargv;
  for (auto& s : argv) cargv.push_back(s.data());
  cargv.push_back(nullptr);
  std::vector<VmmStubMount> mounts;
  for (auto& s : plan) mounts.push_back({s.kind, s.a.c_str(), s.b.c_str(), s.rdev});

  UniqueFd devnull(open("/dev/null", O_RDONLY | O_CLOEXEC));
  UniqueFd log(open(paths.log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640));
  if (!devnull || !log) return sysError(errno, "open {}", paths.log);
  int go_pipe[2], report_pipe[2];
  if (pipe2(go_pipe, O_CLOEXEC) < 0) return sysError(errno, "pipe");
  UniqueFd go_read(go_pipe[0]), go_write(go_pipe[1]);
  if (pipe2(report_pipe, O_CLOEXEC) < 0) return sysError(errno, "pipe");
  UniqueFd report_read(report_pipe[0]), report_write(report_pipe[1]);
  // The inherited descriptors are first moved above the numbers they get in the VMM, so that placing
  // one never overwrites the other.
  UniqueFd memory_high, tap_high;
  if (jail.memory_fd >= 0) {
    memory_high = UniqueFd(fcntl(jail.memory_fd, F_DUPFD_CLOEXEC, 16));
    if (!memory_high) return sysError(errno, "dup memory descriptor");
  }
  if (jail.tap_fd >= 0) {
    tap_high = UniqueFd(fcntl(jail.tap_fd, F_DUPFD_CLOEXEC, 16));
    if (!tap_high) return sysError(errno, "dup tap descriptor");
  }
  // Everything the stub reads, prepared here: after clone3 it may not allocate (vmm_stub.cc).
  VmmStubArgs stub{};
  stub.root = jail.root_dir.c_str();
  stub.mounts = mounts.data();
  stub.mount_count = static_cast<int>(mounts.size());
  stub.uid = jail.uid;
  stub.gid = jail.gid;
  stub.go_read_fd = go_read.get();
  stub.go_write_fd = go_write.get();
  stub.report_fd = report_write.get();
  stub.devnull_fd = devnull.get();
  stub.log_fd = log.get();
  stub.memory_fd = memory_high ? memory_high.get() : -1;
  stub.tap_fd = tap_high ? tap_high.get() : -1;
  stub.qemu_path = qemu_path.c_str();
  stub.argv = cargv.data();

  ASSIGN_OR_RETURN(sys::Clone3Result child, sys::clone3Fork(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC |
                                                            CLONE_NEWUTS | CLONE_PIDFD));
  if (child.pid == 0) runVmmStub(stub);

  QemuProcess proc;
  proc.pid = child.pid;
  proc.pidfd = std::move(child.pidfd);
  report_write.reset();
  go_read.reset();
  auto abandon = [&](Error e) -> Result<QemuProcess> {
    (void)sys::pidfdSendSignal(proc.pidfd.get(), SIGKILL);
    while (waitpid(proc.pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    return tl::unexpected(e.context("confine VMM"));
  };
  if (auto st = runHostSide(jail, proc.pid); !st) return abandon(st.error());
  char go = 1;
  if (write(go_write.get(), &go, 1) != 1) {
    // The stub failed before reading: its report says why.
  }
  go_write.reset();
  VmmStubFailure f{};
  ssize_t n;
  do n = read(report_read.get(), &f, sizeof f);
  while (n < 0 && errno == EINTR);
  if (n == static_cast<ssize_t>(sizeof f)) {
    while (waitpid(proc.pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    return tl::unexpected(stubError(f, plan, qemu_path));
  }
  return proc;
}

}  // namespace space::vm
