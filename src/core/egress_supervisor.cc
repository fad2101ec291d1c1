#include "core/egress_supervisor.h"

#include <fcntl.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>

#include "common/unique_fd.h"
#include "egress/control.h"

namespace space::core {
namespace {

using nlohmann::json;

constexpr auto kStartTimeout = std::chrono::milliseconds(5000);
constexpr auto kControlTimeoutSec = 5;
constexpr auto kWatchInterval = std::chrono::milliseconds(500);
constexpr int kMissedPingsBeforeRestart = 3;
constexpr size_t kMaxReplyBytes = 1 << 20;
constexpr int kControlFd = 3;  // where space-egress finds its listening control socket (--control-fd)

ErrorKind kindOf(const std::string& name) {
  if (name == "invalid_argument") return ErrorKind::kInvalidArgument;
  if (name == "not_found") return ErrorKind::kNotFound;
  if (name == "conflict") return ErrorKind::kConflict;
  if (name == "resource_exhausted") return ErrorKind::kResourceExhausted;
  return ErrorKind::kInternal;
}

Result<std::string> roundTrip(const std::string& path, const std::string& line) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path) return sysError(ENAMETOOLONG, "egress control socket {}", path);
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) return sysError(errno, "socket(AF_UNIX)");
  timeval tv{kControlTimeoutSec, 0};
  setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  if (connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) < 0)
    return sysError(errno, "connect egress control socket {}", path);
  std::string out = line + "\n";
  for (size_t off = 0; off < out.size();) {
    ssize_t n = send(fd.get(), out.data() + off, out.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return sysError(errno, "write egress control socket {}", path);
    off += static_cast<size_t>(n);
  }
  std::string reply;
  char buf[4096];
  for (;;) {
    ssize_t n = recv(fd.get(), buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return sysError(errno, "read egress control socket {}", path);
    if (n == 0) return makeError(ErrorKind::kUnavailable, "egress control socket {} closed without a reply", path);
    reply.append(buf, static_cast<size_t>(n));
    if (auto nl = reply.find('\n'); nl != std::string::npos) return reply.substr(0, nl);
    if (reply.size() > kMaxReplyBytes) return makeError(ErrorKind::kInternal, "egress control reply too long");
  }
}

// "exit 1", "killed by signal 31 (SIGSYS: a syscall outside policies/seccomp/egress.json)".
std::string describeExit(int status) {
  if (WIFEXITED(status)) return fmt::format("exit {}", WEXITSTATUS(status));
  if (!WIFSIGNALED(status)) return fmt::format("status {:#x}", status);
  int sig = WTERMSIG(status);
  if (sig == SIGSYS) return "killed by SIGSYS: a syscall outside its seccomp policy (the kernel's audit log names it)";
  return fmt::format("killed by signal {} ({})", sig, strsignal(sig));
}

bool processAlive(int pid) { return pid > 0 && (kill(pid, 0) == 0 || errno == EPERM); }

// True when pid runs space-egress with our config file (so an adopted pid is never a recycled stranger).
bool isOurGateway(int pid, const std::string& config_path) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/cmdline");
  std::string cmdline((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return cmdline.find(config_path) != std::string::npos;
}

}  // namespace

json egressConfigJson(const EgressSettings& s) {
  std::string dir = s.state_dir + "/egress";
  // The audit has a directory of its own: it is the one host directory the confined gateway sees and
  // writes, as its uid; the config, pid file, log and control socket beside it stay root's.
  json j = {{"control_socket", dir + "/control.sock"},
            {"transparent_listen", "0.0.0.0:" + std::to_string(s.ports.transparent)},
            {"proxy_listen", "0.0.0.0:" + std::to_string(s.ports.proxy)},
            {"dns_listen", "0.0.0.0:" + std::to_string(s.ports.dns)},
            {"audit_log", dir + "/audit/audit.jsonl"},
            {"sandbox_pools", json::array({s.pool})},
            {"protected_listeners", s.protected_listeners}};
  if (!s.upstream_resolvers.empty()) j["upstream_resolvers"] = s.upstream_resolvers;
  if (!s.upstream_ca_file.empty()) j["upstream_ca_file"] = s.upstream_ca_file;
  if (!s.test_external_subnets.empty()) j["test_external_subnets"] = s.test_external_subnets;
  if (s.uid != 0)
    j["confine"] = {{"uid", s.uid}, {"gid", s.gid}, {"root_dir", dir + "/root"}, {"seccomp_policy", s.seccomp_policy}};
  return j;
}

EgressSupervisor::EgressSupervisor(EgressSettings settings) : settings_(std::move(settings)) {
  dir_ = settings_.state_dir + "/egress";
  config_path_ = dir_ + "/egress.json";
  control_socket_ = dir_ + "/control.sock";
  audit_dir_ = dir_ + "/audit";
  audit_log_ = audit_dir_ + "/audit.jsonl";
  pid_file_ = dir_ + "/egress.pid";
  log_file_ = dir_ + "/egress.log";
}

EgressSupervisor::~EgressSupervisor() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (watcher_.joinable()) watcher_.join();
}

Status EgressSupervisor::stopGateway() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (watcher_.joinable()) watcher_.join();
  int pid = pid_.exchange(0);
  if (pid > 0 && isOurGateway(pid, config_path_)) {
    kill(pid, SIGTERM);
    for (int i = 0; i < 100 && processAlive(pid); ++i) {
      if (spawned_ && waitpid(pid, nullptr, WNOHANG) == pid) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (processAlive(pid)) kill(pid, SIGKILL);
    if (spawned_) (void)waitpid(pid, nullptr, 0);
  }
  unlink(pid_file_.c_str());
  return net::removeTable();
}

Status EgressSupervisor::writeConfig() {
  if (mkdir(dir_.c_str(), 0700) < 0 && errno != EEXIST) return sysError(errno, "create {}", dir_);
  std::string tmp = config_path_ + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    if (!out) return sysError(errno ? errno : EIO, "write {}", tmp);
    out << egressConfigJson(settings_).dump(2) << "\n";
    if (!out) return sysError(EIO, "write {}", tmp);
  }
  if (chmod(tmp.c_str(), 0600) < 0) return sysError(errno, "chmod {}", tmp);
  if (rename(tmp.c_str(), config_path_.c_str()) < 0) return sysError(errno, "rename {} to {}", tmp, config_path_);
  return ok();
}

Status EgressSupervisor::spawn() {
  // Everything the child needs is prepared before fork: a forked child of a threaded process may only make
  // async-signal-safe calls until exec.
  std::string binary = settings_.binary;
  // spaced binds the control socket and the gateway inherits it: the path lives in spaced's state
  // directory, which the confined gateway never sees, and it stays root's (mode 0600).
  ASSIGN_OR_RETURN(UniqueFd control, egress::bindControlSocket(control_socket_));
  std::vector<std::string> args = {binary, "--config", config_path_, "--control-fd", std::to_string(kControlFd)};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  UniqueFd log(open(log_file_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600));
  if (!log) return sysError(errno, "open {}", log_file_);
  UniqueFd devnull(open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (!devnull) return sysError(errno, "open /dev/null");
  pid_t pid = fork();
  if (pid < 0) return sysError(errno, "fork space-egress");
  if (pid == 0) {
    // Its own session: signals to spaced's process group (a terminal, a test harness) do not reach it.
    setsid();
    dup2(devnull.get(), 0);
    dup2(log.get(), 1);
    dup2(log.get(), 2);
    // The control socket goes to kControlFd without close-on-exec: where it sits there already (it is never
    // 0-2, spaced's own stdio when it was opened), only the flag is cleared; dup2 makes a copy without it.
    if (control.get() == kControlFd)
      fcntl(kControlFd, F_SETFD, 0);
    else
      dup2(control.get(), kControlFd);
    syscall(SYS_close_range, kControlFd + 1u, ~0u, 0u);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  pid_ = pid;
  spawned_ = true;
  std::ofstream(pid_file_, std::ios::trunc) << pid << "\n";
  spdlog::info("egress: started space-egress pid {} (config {}, log {})", pid, config_path_, log_file_);
  return ok();
}

bool EgressSupervisor::waitServing(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (call({{"op", "ping"}})) return true;
    if (spawned_) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        spdlog::error("egress: space-egress pid {} exited during start-up ({}); see {}", pid_.load(),
                      describeExit(status), log_file_);
        pid_ = 0;
        return false;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

Result<std::unique_ptr<EgressSupervisor>> EgressSupervisor::start(const EgressSettings& settings) {
  if (access(settings.binary.c_str(), X_OK) < 0) return sysError(errno, "space-egress binary {}", settings.binary);
  auto sup = std::unique_ptr<EgressSupervisor>(new EgressSupervisor(settings));
  if (auto st = net::installTable(settings.ports); !st)
    return tl::unexpected(st.error().context("install nftables table inet space"));
  TRY(sup->writeConfig());
  for (const auto& cidr : settings.test_external_subnets)
    spdlog::warn("egress: DANGER egress_test_external_subnets: {} counts as PUBLIC for every sandbox (test setting)",
                 cidr);
  // A gateway serving this state directory already (spaced restarted): keep it and its live connections.
  if (sup->call({{"op", "ping"}})) {
    int pid = 0;
    std::ifstream(sup->pid_file_) >> pid;
    sup->pid_ = isOurGateway(pid, sup->config_path_) ? pid : 0;
    spdlog::info("egress: adopted the running space-egress (pid {})", sup->pid_.load());
    return sup;
  }
  TRY(sup->spawn());
  if (!sup->waitServing(kStartTimeout))
    return makeError(ErrorKind::kUnavailable, "space-egress did not answer on {} (see {})", sup->control_socket_,
                     sup->log_file_);
  return sup;
}

void EgressSupervisor::setOnRestart(std::function<void()> fn) {
  std::lock_guard lock(mu_);
  on_restart_ = std::move(fn);
}

void EgressSupervisor::startWatching() {
  watcher_ = std::thread([this] { watchLoop(); });
}

void EgressSupervisor::watchLoop() {
  int missed = 0;
  for (;;) {
    {
      std::unique_lock lock(mu_);
      if (cv_.wait_for(lock, kWatchInterval, [&] { return stopping_; })) return;
    }
    bool dead = false;
    if (spawned_ && pid_ > 0) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        spdlog::error("egress: space-egress pid {} died ({}); restarting it", pid_.load(), describeExit(status));
        dead = true;
      }
    } else if (pid_ > 0 && !processAlive(pid_)) {
      spdlog::error("egress: adopted space-egress pid {} is gone; starting a new one", pid_.load());
      dead = true;
    }
    if (!dead) {
      if (call({{"op", "ping"}})) {
        missed = 0;
        continue;
      }
      if (++missed < kMissedPingsBeforeRestart) continue;
      spdlog::error("egress: space-egress does not answer on {}; restarting it", control_socket_);
      if (pid_ > 0 && isOurGateway(pid_, config_path_)) {
        kill(pid_, SIGKILL);
        if (spawned_) waitpid(pid_, nullptr, 0);
      }
    }
    missed = 0;
    pid_ = 0;
    spawned_ = false;
    if (auto st = spawn(); !st) {
      spdlog::error("egress: restart space-egress: {}", st.error().message);
      continue;
    }
    if (!waitServing(kStartTimeout)) continue;
    std::function<void()> fn;
    {
      std::lock_guard lock(mu_);
      fn = on_restart_;
    }
    if (fn) fn();
  }
}

Result<json> EgressSupervisor::call(const json& request) {
  auto line = roundTrip(control_socket_, request.dump());
  if (!line) return makeError(ErrorKind::kUnavailable, "space-egress: {}", line.error().message);
  auto reply = json::parse(*line, nullptr, false);
  if (reply.is_discarded() || !reply.is_object())
    return makeError(ErrorKind::kInternal, "space-egress: malformed reply");
  if (!reply.value("ok", false)) {
    const auto& e = reply.contains("error") ? reply["error"] : json::object();
    return makeError(kindOf(e.value("kind", "")), "space-egress: {}", e.value("message", std::string("error")));
  }
  return reply;
}

Result<json> EgressSupervisor::registerSandbox(const json& sandbox) {
  auto reply = call({{"op", "register"}, {"sandbox", sandbox}});
  if (!reply && reply.error().kind == ErrorKind::kConflict) {
    // Known already (this gateway outlived a spaced restart): replace it whole, so sources and CA match.
    TRY(remove(sandbox.value("id", "")));
    reply = call({{"op", "register"}, {"sandbox", sandbox}});
  }
  return reply;
}

Status EgressSupervisor::update(const std::string& id, const std::optional<json>& policy,
                                const std::optional<json>& secrets) {
  json req = {{"op", "update"}, {"id", id}};
  if (policy) req["policy"] = *policy;
  if (secrets) req["secrets"] = *secrets;
  ASSIGN_OR_RETURN(auto reply, call(req));
  (void)reply;
  return ok();
}

Status EgressSupervisor::remove(const std::string& id) {
  auto reply = call({{"op", "remove"}, {"id", id}});
  if (!reply && reply.error().kind != ErrorKind::kNotFound) return tl::unexpected(reply.error());
  return ok();
}

}  // namespace space::core
