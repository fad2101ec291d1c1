// exec: foreground processes on a channel (pipes or a pty), their stdin, timeouts, reaping and the exit
// event. A foreground process's output is read only while its channel has credit, so a process that
// writes faster than the host reads blocks in write() instead of growing the agent's memory.
#include <fcntl.h>
#include <pty.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>

#include "agent/protocol/message.h"
#include "agent/server/server.h"
#include "agent/server/spawn.h"
#include "agent/server/users.h"
#include "sys/pipe.h"

namespace space::agent {
namespace {

using sys::makePipe;
using sys::Pipe;

bool hasNul(const std::string& s) { return s.find('\0') != std::string::npos; }

Result<std::vector<std::string>> parseArgv(const json& msg) {
  auto it = msg.find("argv");
  if (it == msg.end() || !it->is_array() || it->empty())
    return makeError(ErrorKind::kInvalidArgument, "argv must be a non-empty array of strings");
  std::vector<std::string> argv;
  for (const auto& a : *it) {
    if (!a.is_string() || hasNul(a.get<std::string>()))
      return makeError(ErrorKind::kInvalidArgument, "argv must hold strings without NUL bytes");
    argv.push_back(a.get<std::string>());
  }
  return argv;
}

Result<std::map<std::string, std::string>> parseEnv(const json& msg) {
  std::map<std::string, std::string> env;
  auto it = msg.find("env");
  if (it == msg.end() || it->is_null()) return env;
  if (!it->is_object()) return makeError(ErrorKind::kInvalidArgument, "env must be an object of strings");
  for (auto& [k, v] : it->items()) {
    if (!v.is_string() || k.empty() || k.find('=') != std::string::npos || hasNul(k) || hasNul(v.get<std::string>()))
      return makeError(ErrorKind::kInvalidArgument, "bad env entry \"{}\"", k);
    env[k] = v.get<std::string>();
  }
  return env;
}

Status setNonBlocking(int fd) {
  int fl = fcntl(fd, F_GETFL);
  if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) return sysError(errno, "fcntl O_NONBLOCK fd {}", fd);
  return ok();
}

}  // namespace

json exitEvent(const Process& p) {
  int code = -1, sig = 0;
  if (WIFEXITED(p.wait_status)) code = WEXITSTATUS(p.wait_status);
  if (WIFSIGNALED(p.wait_status)) sig = WTERMSIG(p.wait_status);
  json ev = {{"event", "exit"}, {"exit_code", code}, {"signal", sig}, {"timed_out", p.timed_out}};
  if (p.oom_killed) ev["oom_killed"] = true;
  return ev;
}

Process* Server::process(uint64_t key) {
  auto it = procs_.find(key);
  return it == procs_.end() ? nullptr : it->second.get();
}

Result<Process*> Server::startProcess(const json& msg, bool background) {
  ASSIGN_OR_RETURN(auto argv, parseArgv(msg));
  ASSIGN_OR_RETURN(auto req_env, parseEnv(msg));
  std::string user = protocol::optString(msg, "user");
  std::string cwd = protocol::optString(msg, "cwd");
  bool pty = !background && protocol::optBool(msg, "pty", false);
  bool stdin_open = !background && protocol::optBool(msg, "stdin", false);
  double timeout_s = msg.contains("timeout_s") && msg["timeout_s"].is_number() ? msg["timeout_s"].get<double>() : 0;
  if (hasNul(cwd) || hasNul(user)) return makeError(ErrorKind::kInvalidArgument, "NUL in cwd or user");
  if (!std::isfinite(timeout_s) || timeout_s < 0 || timeout_s > 1e9)
    return makeError(ErrorKind::kInvalidArgument, "timeout_s out of range");
  if (background) {
    size_t running = 0;
    for (auto& [k, p] : procs_) running += !p->bg_id.empty() && !p->exited;
    if (running >= kMaxBackground)
      return makeError(ErrorKind::kResourceExhausted, "{} background processes already running", running);
  }

  ASSIGN_OR_RETURN(UserInfo who, lookupUser(root_.get(), user));
  std::map<std::string, std::string> env = env_;
  if (!user.empty()) {
    env["HOME"] = who.home;
    if (!who.name.empty()) env["USER"] = env["LOGNAME"] = who.name;
  }
  for (auto& [k, v] : req_env) env[k] = v;

  SpawnSpec spec;
  spec.argv = argv;
  for (auto& [k, v] : env) spec.env.push_back(k + "=" + v);
  spec.candidates = executableCandidates(argv[0], env.count("PATH") ? env["PATH"] : std::string());
  spec.cwd = cwd.empty() ? who.home : cwd;
  spec.cwd_fallback_to_root = cwd.empty();
  if (!user.empty()) {
    spec.set_user = true;
    spec.uid = who.uid;
    spec.gid = who.gid;
    spec.groups = who.groups;
  }

  auto proc = std::make_unique<Process>();
  UniqueFd child_in, child_out, child_err;
  if (pty) {
    winsize ws{};
    ws.ws_row = static_cast<unsigned short>(protocol::optInt(msg, "rows", 24));
    ws.ws_col = static_cast<unsigned short>(protocol::optInt(msg, "cols", 80));
    int master = -1, slave = -1;
    if (openpty(&master, &slave, nullptr, nullptr, &ws) < 0) return sysError(errno, "openpty");
    proc->out.reset(master);
    child_in.reset(slave);
    fcntl(master, F_SETFD, FD_CLOEXEC);
    fcntl(slave, F_SETFD, FD_CLOEXEC);
    TRY(setNonBlocking(master));
    proc->in.reset(fcntl(master, F_DUPFD_CLOEXEC, 3));
    if (!proc->in) return sysError(errno, "dup pty master");
    spec.stdin_fd = spec.stdout_fd = spec.stderr_fd = slave;
    spec.controlling_tty = true;
  } else {
    if (stdin_open) {
      ASSIGN_OR_RETURN(Pipe in, makePipe());
      TRY(setNonBlocking(in.write.get()));
      proc->in = std::move(in.write);
      child_in = std::move(in.read);
    } else {
      child_in.reset(open("/dev/null", O_RDONLY | O_CLOEXEC));
      if (!child_in) return sysError(errno, "open /dev/null");
    }
    ASSIGN_OR_RETURN(Pipe out, makePipe());
    ASSIGN_OR_RETURN(Pipe err, makePipe());
    TRY(setNonBlocking(out.read.get()));
    TRY(setNonBlocking(err.read.get()));
    proc->out = std::move(out.read);
    proc->err = std::move(err.read);
    child_out = std::move(out.write);
    child_err = std::move(err.write);
    spec.stdin_fd = child_in.get();
    spec.stdout_fd = child_out.get();
    spec.stderr_fd = child_err.get();
  }
  if (timeout_s > 0) {
    proc->timer.reset(timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
    if (!proc->timer) return sysError(errno, "timerfd_create");
    itimerspec its{};
    its.it_value.tv_sec = static_cast<time_t>(timeout_s);
    its.it_value.tv_nsec = static_cast<long>((timeout_s - std::floor(timeout_s)) * 1e9);
    if (its.it_value.tv_sec == 0 && its.it_value.tv_nsec == 0) its.it_value.tv_nsec = 1;
    if (timerfd_settime(proc->timer.get(), 0, &its, nullptr) < 0) return sysError(errno, "timerfd_settime");
  }

  proc->oom_kills_at_start = oomKillCount();
  ASSIGN_OR_RETURN(proc->pid, spawnChild(spec));
  proc->key = next_key_++;
  proc->argv = std::move(argv);
  proc->started_ms = nowUnixMs();
  proc->pty = pty;
  if (background) proc->bg_id = "p" + std::to_string(next_bg_++);
  Process* p = proc.get();
  by_pid_[p->pid] = p->key;
  procs_[p->key] = std::move(proc);
  return p;
}

void Server::opExec(uint32_t ch, const json& msg, bool background) {
  auto started = startProcess(msg, background);
  if (!started) return endChannelError(ch, started.error());
  Process& p = **started;
  if (background) {
    forgetOldBackground();
    return endChannel(
        ch, {{"event", "done"}, {"id", p.bg_id}, {"pid", p.pid}, {"argv", p.argv}, {"started_unix_ms", p.started_ms}});
  }
  Channel& c = openChannel(ch, Channel::Kind::kExec);
  c.proc_key = p.key;
  p.channel = ch;
  sendControl(ch, {{"event", "started"}, {"pid", p.pid}});
}

void Server::pumpProcessFd(Process& p, bool is_err, bool draining) {
  UniqueFd& fd = is_err ? p.err : p.out;
  uint32_t& w = is_err ? p.err_watch : p.out_watch;
  while (fd) {
    ssize_t n;
    Channel* c = p.bg_id.empty() ? channel(p.channel) : nullptr;
    if (!p.bg_id.empty() || (c && c->cancelled)) {
      char buf[65536];
      n = read(fd.get(), buf, sizeof buf);
      if (n > 0 && !p.bg_id.empty()) p.ring.append(is_err, buf, static_cast<size_t>(n));
      if (n > 0) p.output_bytes += static_cast<uint64_t>(n);
    } else {
      if (!c)
        n = 0;  // detached: nobody will read it
      else if (c->send_credit <= 0 || !outRoom())
        return;
      else {
        size_t max = std::min<size_t>(protocol::kDataChunk, static_cast<size_t>(c->send_credit));
        char* dst = beginData(is_err ? protocol::FrameType::kDataErr : protocol::FrameType::kDataOut, c->id, max);
        n = read(fd.get(), dst, max);
        commitData(n > 0 ? static_cast<size_t>(n) : 0);
        if (n > 0) {
          c->send_credit -= n;
          p.output_bytes += static_cast<uint64_t>(n);
        }
      }
    }
    if (n < 0 && errno == EINTR) continue;
    // A pty master reports EIO once no slave is open: that is its end of file.
    bool at_end = n == 0 || (n < 0 && errno != EAGAIN) || (n < 0 && errno == EAGAIN && draining);
    if (at_end) {
      unwatch(fd.get(), &w);
      fd.reset();
      return;
    }
    if (n < 0 || !draining) return;
  }
}

void Server::writeStdin(Process& p) {
  size_t written = 0;
  bool broken = false;
  while (p.in && written < p.stdin_buf.size()) {
    ssize_t n = write(p.in.get(), p.stdin_buf.data() + written, p.stdin_buf.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      broken = errno != EAGAIN;
      break;
    }
    written += static_cast<size_t>(n);
  }
  p.stdin_buf.erase(0, written);
  if (broken) {
    // The reader went away: what is left will never be written, so its credit goes back too.
    written += p.stdin_buf.size();
    p.stdin_buf.clear();
    unwatch(p.in.get(), &p.in_watch);
    p.in.reset();
  }
  if (Channel* c = channel(p.channel); c && written > 0) {
    c->recv_allowed += static_cast<int64_t>(written);
    sendCredit(c->id, static_cast<uint32_t>(written));
  }
  if (p.stdin_eof && p.stdin_buf.empty()) closeStdin(p);
}

void Server::closeStdin(Process& p) {
  if (!p.in) return;
  if (p.pty) {
    // A terminal has no half-close: end of input is the EOF character at the start of a line.
    char eof = 4;
    (void)!write(p.in.get(), &eof, 1);
    p.stdin_eof = false;
    return;
  }
  unwatch(p.in.get(), &p.in_watch);
  p.in.reset();
}

void Server::killGroup(Process& p, int signo) {
  // pgid == pid (the child called setsid); while the leader is unreaped its pid cannot be reused.
  if (!p.exited) kill(-p.pid, signo);
}

void Server::onTimer(Process& p) {
  p.timed_out = true;
  killGroup(p, SIGKILL);
  unwatch(p.timer.get(), &p.timer_watch);
  p.timer.reset();
}

void Server::reapChildren() {
  for (;;) {
    int status = 0;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid <= 0) return;  // as PID 1 this also collects orphans re-parented to us
    auto it = by_pid_.find(pid);
    if (it == by_pid_.end()) continue;
    Process* p = process(it->second);
    by_pid_.erase(it);
    if (!p) continue;
    p->exited = true;
    p->wait_status = status;
    noteOomKill(*p);
    unwatch(p->timer.get(), &p->timer_watch);
    p->timer.reset();
    finishIfDone(*p);
  }
}

void Server::closeProcessFds(Process& p) {
  unwatch(p.out.get(), &p.out_watch);
  unwatch(p.err.get(), &p.err_watch);
  unwatch(p.in.get(), &p.in_watch);
  unwatch(p.timer.get(), &p.timer_watch);
  p.out.reset();
  p.err.reset();
  p.in.reset();
  p.timer.reset();
  p.stdin_buf.clear();
}

void Server::finishIfDone(Process& p) {
  if (!p.exited || p.out || p.err) return;
  if (!p.bg_id.empty()) {
    closeProcessFds(p);  // the record stays for list/output
    return;
  }
  if (channel(p.channel)) endChannel(p.channel, exitEvent(p));
  closeProcessFds(p);
  procs_.erase(p.key);
}

void Server::detachForeground(Process& p) {
  killGroup(p, SIGKILL);
  p.channel = 0;
  closeProcessFds(p);
  if (p.exited) procs_.erase(p.key);  // otherwise removed when reaped
}

void Server::signalForeground(Channel& c, const json& msg) {
  int64_t sig = protocol::optInt(msg, "signal", 0);
  Process* p = process(c.proc_key);
  if (p && sig > 0 && sig < NSIG) killGroup(*p, static_cast<int>(sig));
}

void Server::resizePty(Channel& c, const json& msg) {
  Process* p = process(c.proc_key);
  if (!p || !p->pty || !p->in) return;
  winsize ws{};
  ws.ws_row = static_cast<unsigned short>(protocol::optInt(msg, "rows", 24));
  ws.ws_col = static_cast<unsigned short>(protocol::optInt(msg, "cols", 80));
  // TIOCSWINSZ on the master: the kernel updates the size and sends SIGWINCH to the foreground group.
  ioctl(p->in.get(), TIOCSWINSZ, &ws);
}

}  // namespace space::agent
