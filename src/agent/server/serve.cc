// The agent's event loop and its one host connection: framing, handshake, request dispatch and flow
// control. Everything runs on one thread; producers (pipes, files, output rings) are only read while the
// channel has credit and the connection's unsent bytes are below kOutHighWater, so memory stays bounded
// however fast a process writes or however slowly the host reads.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "agent/protocol/message.h"
#include "agent/server/server.h"

namespace space::agent {
namespace {

using protocol::Frame;
using protocol::FrameType;

constexpr size_t kReadChunk = 256u << 10;
constexpr int64_t kMaxCredit = int64_t{1} << 40;

const char* const kFeatures[] = {"exec",         "pty",     "background", "files",
                                 "set_identity", "credits", "net_config", "generation"};

// Signals PID 1 ignores so that processes inside cannot stop the sandbox by signalling the agent. The
// kernel already drops unhandled signals to a namespace's init from inside it; ignoring them explicitly
// also covers the --listen mode and signals a VM guest's kernel might deliver.
const int kIgnoredAsInit[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGTSTP, SIGTTIN, SIGTTOU};

void log(const std::string& msg) { std::fprintf(stderr, "space-agent: %s\n", msg.c_str()); }

// Children inherit fds 0-2 by number; make sure they exist so that no pipe or socket the agent opens
// lands on them by accident.
Status ensureStandardFds() {
  for (int fd = 0; fd <= 2; ++fd) {
    if (fcntl(fd, F_GETFD) >= 0) continue;
    int null_fd = open("/dev/null", O_RDWR);
    if (null_fd < 0) return sysError(errno, "open /dev/null");
    if (null_fd != fd) {
      dup2(null_fd, fd);
      close(null_fd);
    }
  }
  return ok();
}

}  // namespace

int64_t nowUnixMs() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t{ts.tv_sec} * 1000 + ts.tv_nsec / 1000000;
}

Server::Server(const ServeOptions& options) : options_(options), env_(options.base_env) {}

Status Server::setup() {
  TRY(ensureStandardFds());
  // Sandbox processes may run as the same uid as the agent: without this they could ptrace it or read
  // its fds through /proc/1/fd, including the host connection.
  if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0) return sysError(errno, "prctl PR_SET_DUMPABLE");
  // Outside a pid namespace orphans of our children should still come back to us to be reaped.
  if (!options_.is_pid1) prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);

  signal(SIGPIPE, SIG_IGN);
  if (options_.is_pid1) {
    for (int s : kIgnoredAsInit) signal(s, SIG_IGN);
  }
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGCHLD);
  if (sigprocmask(SIG_BLOCK, &mask, nullptr) < 0) return sysError(errno, "sigprocmask SIGCHLD");
  signal_fd_.reset(signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC));
  if (!signal_fd_) return sysError(errno, "signalfd SIGCHLD");

  root_.reset(open(options_.root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!root_) return sysError(errno, "open root {}", options_.root);

  epoll_.reset(epoll_create1(EPOLL_CLOEXEC));
  if (!epoll_) return sysError(errno, "epoll_create1");
  uint32_t w = 0;
  if (options_.device_fd >= 0) {
    device_.reset(options_.device_fd);
    fcntl(device_.get(), F_SETFD, FD_CLOEXEC);
    int flags = fcntl(device_.get(), F_GETFL);
    if (flags < 0 || fcntl(device_.get(), F_SETFL, flags | O_NONBLOCK) < 0)
      return sysError(errno, "set O_NONBLOCK on the host device");
    armDevice();
  } else {
    // The listening fd may come from a launcher; it must not reach sandbox processes.
    fcntl(options_.listen_fd, F_SETFD, FD_CLOEXEC);
    listen_.reset(options_.listen_fd);
    watch(listen_.get(), kListen, 0, &w, EPOLLIN);
  }
  w = 0;
  watch(signal_fd_.get(), kSignal, 0, &w, EPOLLIN);
  // A sandbox without its generation file still serves: processes that read it just find none.
  if (auto st = startFirstGeneration(); !st) log("generation: " + st.error().message);
  return ok();
}

int Server::run() {
  if (auto s = setup(); !s) {
    log(s.error().message);
    return 1;
  }
  epoll_event events[64];
  for (;;) {
    bool busy = pumpAll();
    flushConnection();
    updateWatches();
    int n = epoll_wait(epoll_.get(), events, 64, busy ? 0 : -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      log(sysError(errno, "epoll_wait").value().message);
      return 1;
    }
    for (int i = 0; i < n; ++i) dispatch(events[i]);
  }
}

void Server::watch(int fd, Tag t, uint64_t key, uint32_t* current, uint32_t wanted) {
  if (fd < 0 || *current == wanted) return;
  epoll_event ev{};
  ev.events = wanted;
  ev.data.u64 = tag(t, key);
  int op = *current == 0 ? EPOLL_CTL_ADD : wanted == 0 ? EPOLL_CTL_DEL : EPOLL_CTL_MOD;
  if (epoll_ctl(epoll_.get(), op, fd, &ev) < 0) {
    log(sysError(errno, "epoll_ctl fd {}", fd).value().message);
    return;
  }
  *current = wanted;
}

// Removes fd from the epoll set before it is closed: a dup of the same file (the pty master) would
// otherwise keep the registration, and its events, alive.
void Server::unwatch(int fd, uint32_t* current) {
  if (fd >= 0 && *current != 0) epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd, nullptr);
  *current = 0;
}

void Server::dispatch(const epoll_event& ev) {
  auto kind = static_cast<Tag>(ev.data.u64 >> 56);
  uint64_t key = ev.data.u64 & ((uint64_t{1} << 56) - 1);
  switch (kind) {
    case kListen:
      if (device_) return acceptDeviceSession();
      return acceptConnection();
    case kConn:
      if (ev.events & (EPOLLIN | EPOLLHUP | EPOLLERR)) readConnection();
      if (conn_ && (ev.events & EPOLLOUT)) flushConnection();
      return;
    case kSignal: {
      signalfd_siginfo info[16];
      while (read(signal_fd_.get(), info, sizeof info) > 0) {
      }
      reapChildren();
      return;
    }
    case kOut:
    case kErr:
      if (Process* p = process(key)) {
        pumpProcessFd(*p, kind == kErr, false);
        finishIfDone(*p);
      }
      return;
    case kIn:
      if (Process* p = process(key)) writeStdin(*p);
      return;
    case kTimer:
      if (Process* p = process(key)) onTimer(*p);
      return;
  }
}

void Server::acceptConnection() {
  UniqueFd fd(accept4(listen_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
  if (!fd) return;
  // A new host connection replaces the old one: spaced reconnects after its own restart.
  if (conn_) dropConnection("replaced by a new connection");
  beginSession(std::move(fd));
}

// Waits for a host on the device. Edge-triggered because a virtio-serial port reports POLLHUP for as
// long as no host is connected: level-triggered, that would spin. The driver wakes its poll queue when
// the host connects, and EPOLL_CTL_ADD reports the current state once, so no connection is missed.
// A fresh protocol session on a new host stream (accepted socket or device dup): hello comes first again.
void Server::beginSession(UniqueFd fd) {
  conn_ = std::move(fd);
  conn_hello_ = false;
  decoder_ = protocol::Decoder();
  out_.clear();
  out_pos_ = 0;
  watch(conn_.get(), kConn, 0, &conn_watch_, EPOLLIN);
}

void Server::armDevice() { watch(device_.get(), kListen, 0, &device_watch_, EPOLLIN | EPOLLOUT | EPOLLET); }

void Server::acceptDeviceSession() {
  if (conn_) return;
  pollfd pfd{device_.get(), POLLIN, 0};
  if (::poll(&pfd, 1, 0) < 0) return;
  // No host behind the port. The driver reports POLLIN with POLLHUP then (a read would not block: it
  // returns 0), so POLLHUP alone decides; starting a session would end at once and re-arm into a spin.
  if (pfd.revents & POLLHUP) return;
  unwatch(device_.get(), &device_watch_);
  // A dup, so that closing the session (conn_) keeps the device open for the next host.
  UniqueFd fd(fcntl(device_.get(), F_DUPFD_CLOEXEC, 3));
  if (!fd) {
    log(sysError(errno, "dup host device").value().message);
    return armDevice();
  }
  beginSession(std::move(fd));
}

void Server::dropConnection(const std::string& why) {
  if (!conn_) return;
  log("dropping host connection: " + why);
  unwatch(conn_.get(), &conn_watch_);
  conn_.reset();
  // Foreground work belongs to the connection; background processes outlive it.
  std::vector<uint32_t> ids;
  for (auto& [id, c] : channels_) ids.push_back(id);
  for (uint32_t id : ids) {
    Channel& c = channels_.at(id);
    if (c.kind == Channel::Kind::kExec) {
      if (Process* p = process(c.proc_key)) detachForeground(*p);
    } else if (c.kind == Channel::Kind::kWriteFile) {
      abandonUpload(c);
    }
  }
  channels_.clear();
  out_.clear();
  out_pos_ = 0;
  decoder_ = protocol::Decoder();
  if (device_) armDevice();
}

void Server::readConnection() {
  char buf[kReadChunk];
  ssize_t n = read(conn_.get(), buf, sizeof buf);
  if (n == 0) return dropConnection("host closed the connection");
  if (n < 0) {
    if (errno == EAGAIN || errno == EINTR) return;
    return dropConnection(sysError(errno, "read host connection").value().message);
  }
  decoder_.feed(std::string_view(buf, static_cast<size_t>(n)));
  while (conn_) {
    auto next = decoder_.next();
    if (!next) return dropConnection("malformed frame: " + next.error().message);
    if (!*next) return;
    handleFrame(**next);
  }
}

void Server::flushConnection() {
  if (!conn_) return;
  while (out_pos_ < out_.size()) {
    // A char device is not a socket: send() would fail with ENOTSOCK there.
    ssize_t n = device_
                    ? write(conn_.get(), out_.data() + out_pos_, out_.size() - out_pos_)
                    : send(conn_.get(), out_.data() + out_pos_, out_.size() - out_pos_, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) break;
      return dropConnection(sysError(errno, "write host connection").value().message);
    }
    out_pos_ += static_cast<size_t>(n);
  }
  if (out_pos_ == out_.size()) {
    out_.clear();
    out_pos_ = 0;
  } else if (out_pos_ > (1u << 20)) {
    out_.erase(0, out_pos_);
    out_pos_ = 0;
  }
  watch(conn_.get(), kConn, 0, &conn_watch_, out_.empty() ? EPOLLIN : EPOLLIN | EPOLLOUT);
}

void Server::handleHello(const Frame& frame) {
  auto msg = protocol::parseControl(frame.payload);
  if (!msg) return dropConnection("bad hello: " + msg.error().message);
  int64_t version = protocol::optInt(*msg, "version", -1);
  if (version != protocol::kVersion) {
    sendControl(0, protocol::errorEvent(Error{
                       ErrorKind::kUnsupported, 0,
                       fmt::format("protocol version {} unsupported, agent speaks {}", version, protocol::kVersion)}));
    flushConnection();
    return dropConnection("protocol version mismatch");
  }
  json hello = {{"version", protocol::kVersion}, {"role", "agent"}, {"pid", getpid()}, {"features", kFeatures}};
  std::string payload = hello.dump();
  char header[protocol::kHeaderSize];
  protocol::encodeHeader(FrameType::kHello, 0, static_cast<uint32_t>(payload.size()), header);
  out_.append(header, sizeof header);
  out_.append(payload);
  conn_hello_ = true;
}

void Server::handleFrame(Frame& frame) {
  if (!conn_hello_) {
    if (frame.type != FrameType::kHello || frame.channel != 0) return dropConnection("first frame is not a hello");
    return handleHello(frame);
  }
  if (frame.type == FrameType::kHello && device_) {
    // Behind a device the host can reconnect before the agent sees the hang-up: a new hello starts a
    // new session on the same stream.
    dropConnection("host started a new session");
    acceptDeviceSession();
    if (!conn_) return;
    return handleHello(frame);
  }
  switch (frame.type) {
    case FrameType::kHello:
    case FrameType::kDataOut:
    case FrameType::kDataErr:
      return dropConnection(fmt::format("host sent frame type {}", static_cast<int>(frame.type)));
    case FrameType::kControl: {
      auto msg = protocol::parseControl(frame.payload);
      if (!msg) return dropConnection("bad control message: " + msg.error().message);
      if (frame.channel == 0) return dropConnection("request on channel 0");
      if (Channel* c = channel(frame.channel)) return handleChannelControl(*c, *msg);
      return handleRequest(frame.channel, *msg);
    }
    case FrameType::kDataIn: {
      Channel* c = channel(frame.channel);
      if (!c) return;  // the operation already ended; late data is dropped
      c->recv_allowed -= static_cast<int64_t>(frame.payload.size());
      if (c->recv_allowed < 0)
        return dropConnection(fmt::format("host exceeded its credit on channel {}", frame.channel));
      return handleDataIn(*c, frame.payload);
    }
    case FrameType::kEofIn:
      if (Channel* c = channel(frame.channel)) handleEofIn(*c);
      return;
    case FrameType::kCredit: {
      auto bytes = protocol::decodeCredit(frame.payload);
      if (!bytes) return dropConnection(bytes.error().message);
      if (Channel* c = channel(frame.channel)) c->send_credit = std::min(kMaxCredit, c->send_credit + *bytes);
      return;
    }
    case FrameType::kCancel:
      if (Channel* c = channel(frame.channel)) cancelChannel(*c);
      return;
  }
}

void Server::handleRequest(uint32_t ch, const json& msg) {
  std::string op = protocol::optString(msg, "op");
  try {
    if (op == "exec") return opExec(ch, msg, false);
    if (op == "spawn") return opExec(ch, msg, true);
    if (op == "ps") return opPs(ch);
    if (op == "kill") return opKill(ch, msg);
    if (op == "output") return opOutput(ch, msg);
    if (op == "read_file") return opReadFile(ch, msg);
    if (op == "write_file") return opWriteFile(ch, msg);
    if (op == "stat") return opStat(ch, msg);
    if (op == "list") return opList(ch, msg);
    if (op == "mkdir") return opMkdir(ch, msg);
    if (op == "move") return opMove(ch, msg);
    if (op == "remove") return opRemove(ch, msg);
    if (op == "set_identity") return opSetIdentity(ch, msg);
    if (op == "usage") return opUsage(ch);
    if (op == "ping") return sendControl(ch, {{"event", "done"}});
    sendControl(ch, protocol::errorEvent(Error{ErrorKind::kUnsupported, 0, fmt::format("unknown op \"{}\"", op)}));
  } catch (const json::exception& e) {
    // A field of the wrong type deep inside a request: the request is refused, the connection kept.
    channels_.erase(ch);
    sendControl(ch,
                protocol::errorEvent(Error{ErrorKind::kInvalidArgument, 0, fmt::format("op {}: {}", op, e.what())}));
  }
}

void Server::handleChannelControl(Channel& c, const json& msg) {
  std::string op = protocol::optString(msg, "op");
  if (c.kind == Channel::Kind::kExec && op == "signal") return signalForeground(c, msg);
  if (c.kind == Channel::Kind::kExec && op == "resize") return resizePty(c, msg);
  // Anything else on a busy channel is ignored: the running operation keeps the channel.
}

void Server::handleDataIn(Channel& c, std::string& data) {
  if (c.kind == Channel::Kind::kWriteFile) return writeUploadChunk(c, data);
  Process* p = c.kind == Channel::Kind::kExec ? process(c.proc_key) : nullptr;
  if (p && p->in && !p->stdin_eof) {
    p->stdin_buf.append(data);
    return writeStdin(*p);
  }
  // Nobody will consume it: hand the credit straight back.
  c.recv_allowed += static_cast<int64_t>(data.size());
  sendCredit(c.id, static_cast<uint32_t>(data.size()));
}

void Server::handleEofIn(Channel& c) {
  if (c.kind == Channel::Kind::kWriteFile) return finishUpload(c);
  if (c.kind != Channel::Kind::kExec) return;
  if (Process* p = process(c.proc_key)) {
    p->stdin_eof = true;
    if (p->stdin_buf.empty()) closeStdin(*p);
  }
}

void Server::cancelChannel(Channel& c) {
  switch (c.kind) {
    case Channel::Kind::kExec:
      // The exit event still follows, reporting SIGKILL. The host no longer reads this channel or
      // grants credit, so remaining output is discarded rather than waited on.
      c.cancelled = true;
      if (Process* p = process(c.proc_key)) killGroup(*p, SIGKILL);
      return;
    case Channel::Kind::kWriteFile:
      abandonUpload(c);
      [[fallthrough]];
    case Channel::Kind::kReadFile:
    case Channel::Kind::kOutput:
      return endChannelError(c.id, Error{ErrorKind::kConflict, 0, "cancelled"});
  }
}

bool Server::pumpAll() {
  if (!conn_) return false;
  bool progress = false;
  std::vector<uint32_t> ids;
  for (auto& [id, c] : channels_) {
    if (c.kind == Channel::Kind::kReadFile || c.kind == Channel::Kind::kOutput) ids.push_back(id);
  }
  for (uint32_t id : ids) {
    Channel* c = channel(id);
    if (!c || !conn_) continue;
    progress |= c->kind == Channel::Kind::kReadFile ? pumpReadFile(*c) : pumpOutputReader(*c);
  }
  // Exited processes: drain what they left in their pipes (grandchildren holding the pipe open do not
  // delay the exit), then report the exit.
  std::vector<uint64_t> keys;
  for (auto& [key, p] : procs_) {
    if (p->exited && (p->out || p->err)) keys.push_back(key);
  }
  for (uint64_t key : keys) {
    Process* p = process(key);
    if (!p || !conn_) continue;
    bool had = p->out || p->err;
    if (p->out) pumpProcessFd(*p, false, true);
    if (p->err) pumpProcessFd(*p, true, true);
    progress |= had && !(p->out || p->err);
    finishIfDone(*p);
  }
  return progress;
}

void Server::updateWatches() {
  for (auto& [key, up] : procs_) {
    Process& p = *up;
    bool can_send = false;
    if (!p.bg_id.empty()) {
      can_send = true;  // background output goes to the ring, never blocked
    } else if (Channel* c = channel(p.channel)) {
      can_send = c->cancelled || (c->send_credit > 0 && outRoom());
    }
    uint32_t want = can_send ? uint32_t{EPOLLIN} : 0u;
    if (p.out) watch(p.out.get(), kOut, key, &p.out_watch, want);
    if (p.err) watch(p.err.get(), kErr, key, &p.err_watch, want);
    if (p.in) watch(p.in.get(), kIn, key, &p.in_watch, p.stdin_buf.empty() ? 0u : uint32_t{EPOLLOUT});
    if (p.timer) watch(p.timer.get(), kTimer, key, &p.timer_watch, EPOLLIN);
  }
}

void Server::sendControl(uint32_t ch, const json& msg) {
  if (!conn_) return;
  // Names and argv inside the sandbox need not be UTF-8: replace invalid bytes instead of throwing.
  std::string payload = msg.dump(-1, ' ', false, json::error_handler_t::replace);
  if (payload.size() > protocol::kMaxPayload) {
    payload = protocol::errorEvent(Error{ErrorKind::kResourceExhausted, 0, "reply exceeds the frame limit"}).dump();
  }
  char header[protocol::kHeaderSize];
  protocol::encodeHeader(FrameType::kControl, ch, static_cast<uint32_t>(payload.size()), header);
  out_.append(header, sizeof header);
  out_.append(payload);
}

char* Server::beginData(FrameType type, uint32_t ch, size_t max) {
  frame_start_ = out_.size();
  frame_type_ = type;
  frame_channel_ = ch;
  out_.resize(frame_start_ + protocol::kHeaderSize + max);
  return out_.data() + frame_start_ + protocol::kHeaderSize;
}

void Server::commitData(size_t n) {
  if (n == 0) {
    out_.resize(frame_start_);
    return;
  }
  protocol::encodeHeader(frame_type_, frame_channel_, static_cast<uint32_t>(n), out_.data() + frame_start_);
  out_.resize(frame_start_ + protocol::kHeaderSize + n);
}

void Server::sendData(FrameType type, uint32_t ch, const char* data, size_t n) {
  char* dst = beginData(type, ch, n);
  std::memcpy(dst, data, n);
  commitData(n);
}

void Server::sendCredit(uint32_t ch, uint32_t bytes) {
  if (bytes == 0) return;
  std::string payload = protocol::encodeCredit(bytes);
  char header[protocol::kHeaderSize];
  protocol::encodeHeader(FrameType::kCredit, ch, 4, header);
  out_.append(header, sizeof header);
  out_.append(payload);
}

Channel* Server::channel(uint32_t ch) {
  if (ch == 0) return nullptr;
  auto it = channels_.find(ch);
  return it == channels_.end() ? nullptr : &it->second;
}

Channel& Server::openChannel(uint32_t ch, Channel::Kind kind) {
  Channel& c = channels_[ch];
  c.id = ch;
  c.kind = kind;
  return c;
}

void Server::endChannel(uint32_t ch, const json& final_event) {
  channels_.erase(ch);
  sendControl(ch, final_event);
}

void Server::endChannelError(uint32_t ch, const Error& e) { endChannel(ch, protocol::errorEvent(e)); }

int serve(const ServeOptions& options) {
  Server server(options);
  return server.run();
}

}  // namespace space::agent
