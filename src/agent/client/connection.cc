#include "agent/client/connection.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <chrono>

#include "agent/protocol/message.h"

namespace space::agent {
namespace {

using protocol::Frame;
using protocol::FrameType;
using Clock = std::chrono::steady_clock;

constexpr uint64_t kGrantThreshold = protocol::kInitialCredit / 4;
constexpr size_t kMaxQueuedControl = 32u << 20;
constexpr int kSendTimeoutSec = 30;  // a peer that stops reading this long is considered gone

bool isFinalEvent(const nlohmann::json& msg) {
  std::string ev = protocol::optString(msg, "event");
  return ev == "exit" || ev == "done" || ev == "error";
}

Status writeAll(int fd, const struct iovec* iov_in, int iovcnt) {
  struct iovec iov[2];
  for (int i = 0; i < iovcnt; ++i) iov[i] = iov_in[i];
  int first = 0;
  while (first < iovcnt) {
    msghdr mh{};
    mh.msg_iov = iov + first;
    mh.msg_iovlen = static_cast<size_t>(iovcnt - first);
    ssize_t n = sendmsg(fd, &mh, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return sysError(errno, "write to agent");
    auto left = static_cast<size_t>(n);
    while (first < iovcnt && left >= iov[first].iov_len) left -= iov[first++].iov_len;
    if (first < iovcnt) {
      iov[first].iov_base = static_cast<char*>(iov[first].iov_base) + left;
      iov[first].iov_len -= left;
    }
  }
  return ok();
}

}  // namespace

Error unavailable(const std::string& why) { return Error{ErrorKind::kUnavailable, 0, "agent connection lost: " + why}; }

Connection::Connection(UniqueFd fd, protocol::Decoder decoder) : fd_(std::move(fd)), decoder_(std::move(decoder)) {}

Connection::~Connection() { close(); }

Result<nlohmann::json> Connection::handshake(int fd, protocol::Decoder& decoder, Duration timeout) {
  nlohmann::json hello = {{"version", protocol::kVersion}, {"role", "host"}};
  std::string payload = hello.dump();
  std::string frame = protocol::encodeFrame(Frame{FrameType::kHello, 0, payload});
  struct iovec iov {
    frame.data(), frame.size()
  };
  TRY(writeAll(fd, &iov, 1));
  auto deadline = Clock::now() + timeout;
  char buf[65536];
  for (;;) {
    auto next = decoder.next();
    if (!next) return makeError(ErrorKind::kUnavailable, "agent handshake: {}", next.error().message);
    if (*next) {
      Frame& f = **next;
      auto msg = protocol::parseControl(f.payload);
      if (!msg) return makeError(ErrorKind::kUnavailable, "agent handshake: {}", msg.error().message);
      if (f.type == FrameType::kControl && f.channel == 0 && protocol::optString(*msg, "event") == "error") {
        Error e = protocol::errorFromEvent(*msg);
        return tl::unexpected(e.context("agent refused the handshake"));
      }
      if (f.type != FrameType::kHello || f.channel != 0)
        return makeError(ErrorKind::kUnavailable, "agent handshake: first frame is not a hello");
      if (protocol::optInt(*msg, "version", -1) != protocol::kVersion)
        return makeError(ErrorKind::kUnsupported, "agent speaks protocol version {}, host {}",
                         protocol::optInt(*msg, "version", -1), protocol::kVersion);
      return *msg;
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return makeError(ErrorKind::kUnavailable, "agent handshake timed out");
    pollfd pfd{fd, POLLIN, 0};
    int rc = ::poll(&pfd, 1, static_cast<int>(left));
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0) return sysError(errno, "poll agent connection");
    if (rc == 0) continue;
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return sysError(errno, "read agent hello");
    if (n == 0) return makeError(ErrorKind::kUnavailable, "agent closed the connection during the handshake");
    decoder.feed(std::string_view(buf, static_cast<size_t>(n)));
  }
}

void Connection::start() {
  timeval tv{kSendTimeoutSec, 0};
  setsockopt(fd_.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  reader_ = std::thread([this] { readerLoop(); });
}

void Connection::close() {
  if (fd_) ::shutdown(fd_.get(), SHUT_RDWR);
  if (reader_.joinable()) reader_.join();
  fail("closed");
}

void Connection::fail(const std::string& why) {
  std::lock_guard lock(mu_);
  if (alive_.exchange(false)) {
    failure_ = why;
    if (fd_) ::shutdown(fd_.get(), SHUT_RDWR);
  }
  for (auto& [ch, state] : channels_) state->cv.notify_all();
}

void Connection::readerLoop() {
  std::string buf(256u << 10, '\0');
  for (;;) {
    // Frames already buffered (the handshake may have read past the hello) go first.
    for (;;) {
      auto next = decoder_.next();
      if (!next) return fail("malformed frame from agent: " + next.error().message);
      if (!*next) break;
      if (!handleFrame(**next)) return;
    }
    ssize_t n = ::read(fd_.get(), buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return fail(n == 0 ? "agent closed the connection" : describeErrno(errno));
    decoder_.feed(std::string_view(buf.data(), static_cast<size_t>(n)));
  }
}

bool Connection::handleFrame(Frame& f) {
  switch (f.type) {
    case FrameType::kHello:
    case FrameType::kDataIn:
    case FrameType::kEofIn:
    case FrameType::kCancel:
      fail(fmt::format("agent sent frame type {}", static_cast<int>(f.type)));
      return false;
    case FrameType::kCredit: {
      auto bytes = protocol::decodeCredit(f.payload);
      if (!bytes) {
        fail(bytes.error().message);
        return false;
      }
      std::lock_guard lock(mu_);
      auto it = channels_.find(f.channel);
      if (it != channels_.end()) {
        it->second->send_credit = std::min<int64_t>(it->second->send_credit + *bytes, int64_t{1} << 40);
        it->second->cv.notify_all();
      }
      return true;
    }
    case FrameType::kControl: {
      auto msg = protocol::parseControl(f.payload);
      if (!msg) {
        fail("bad control message from agent: " + msg.error().message);
        return false;
      }
      std::unique_lock lock(mu_);
      auto it = channels_.find(f.channel);
      if (it == channels_.end()) return true;  // a channel we gave up on
      ChannelState& s = *it->second;
      s.queued_control += f.payload.size();
      if (s.queued_control > kMaxQueuedControl) {
        lock.unlock();
        fail(fmt::format("agent flooded channel {} with control messages", f.channel));
        return false;
      }
      if (isFinalEvent(*msg)) s.ended = true;
      s.queue.push_back(Incoming{FrameType::kControl, {}, std::move(*msg), f.payload.size()});
      s.cv.notify_all();
      return true;
    }
    case FrameType::kDataOut:
    case FrameType::kDataErr: {
      std::unique_lock lock(mu_);
      auto it = channels_.find(f.channel);
      if (it == channels_.end()) return true;
      ChannelState& s = *it->second;
      s.recv_window -= static_cast<int64_t>(f.payload.size());
      if (s.recv_window < 0) {
        lock.unlock();
        fail(fmt::format("agent exceeded its credit on channel {}", f.channel));
        return false;
      }
      s.queue.push_back(Incoming{f.type, std::move(f.payload), {}, 0});
      s.cv.notify_all();
      return true;
    }
  }
  return true;
}

Result<uint32_t> Connection::open(const nlohmann::json& request) {
  uint32_t ch;
  {
    std::lock_guard lock(mu_);
    if (!alive_) return tl::unexpected(unavailable(failure_));
    ch = next_channel_;
    next_channel_ += 2;
    channels_[ch] = std::make_shared<ChannelState>();
  }
  if (auto s = sendControl(ch, request); !s) {
    release(ch);
    return tl::unexpected(s.error());
  }
  return ch;
}

void Connection::release(uint32_t ch) {
  std::lock_guard lock(mu_);
  channels_.erase(ch);
}

std::optional<Incoming> Connection::poll(uint32_t ch) {
  uint64_t grant = 0;
  std::optional<Incoming> out;
  {
    std::lock_guard lock(mu_);
    auto it = channels_.find(ch);
    if (it == channels_.end() || it->second->queue.empty()) return std::nullopt;
    ChannelState& s = *it->second;
    out = std::move(s.queue.front());
    s.queue.pop_front();
    if (out->type == FrameType::kControl) {
      s.queued_control -= std::min(s.queued_control, out->wire_bytes);
    } else {
      s.consumed += out->data.size();
      if (s.consumed >= kGrantThreshold && !s.ended) {
        grant = s.consumed;
        s.recv_window += static_cast<int64_t>(grant);
        s.consumed = 0;
      }
    }
  }
  if (grant > 0) grantCredit(ch, grant);
  return out;
}

Result<Incoming> Connection::next(uint32_t ch, std::optional<Duration> timeout) {
  auto deadline = timeout ? Clock::now() + *timeout : Clock::time_point::max();
  {
    std::unique_lock lock(mu_);
    auto it = channels_.find(ch);
    if (it == channels_.end()) return makeError(ErrorKind::kConflict, "channel {} is not open", ch);
    std::shared_ptr<ChannelState> s = it->second;
    auto ready = [&] { return !s->queue.empty() || !alive_; };
    if (timeout) {
      if (!s->cv.wait_until(lock, deadline, ready))
        return tl::unexpected(Error{ErrorKind::kUnavailable, ETIMEDOUT, "timed out waiting for the agent"});
    } else {
      s->cv.wait(lock, ready);
    }
    if (s->queue.empty()) return tl::unexpected(unavailable(failure_));
  }
  auto item = poll(ch);
  if (!item) return tl::unexpected(unavailable(failure_));
  return std::move(*item);
}

void Connection::grantCredit(uint32_t ch, uint64_t bytes) {
  while (bytes > 0) {
    auto n = static_cast<uint32_t>(std::min<uint64_t>(bytes, UINT32_MAX));
    if (!sendFrame(FrameType::kCredit, ch, protocol::encodeCredit(n))) return;
    bytes -= n;
  }
}

Status Connection::sendControl(uint32_t ch, const nlohmann::json& msg) {
  return sendFrame(FrameType::kControl, ch, msg.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

Status Connection::sendFrame(FrameType type, uint32_t ch, std::string_view payload) {
  if (payload.size() > protocol::kMaxPayload)
    return makeError(ErrorKind::kInvalidArgument, "frame of {} bytes too large", payload.size());
  char header[protocol::kHeaderSize];
  protocol::encodeHeader(type, ch, static_cast<uint32_t>(payload.size()), header);
  struct iovec iov[2] = {{header, sizeof header}, {const_cast<char*>(payload.data()), payload.size()}};
  std::lock_guard lock(write_mu_);
  if (!alive_) return tl::unexpected(unavailable(failure_));
  if (auto s = writeAll(fd_.get(), iov, payload.empty() ? 1 : 2); !s) {
    fail(s.error().message);
    return tl::unexpected(unavailable(s.error().message));
  }
  return ok();
}

Status Connection::sendData(uint32_t ch, std::string_view data) {
  while (!data.empty()) {
    size_t n;
    {
      std::unique_lock lock(mu_);
      auto it = channels_.find(ch);
      if (it == channels_.end()) return makeError(ErrorKind::kConflict, "channel {} is not open", ch);
      std::shared_ptr<ChannelState> s = it->second;
      s->cv.wait(lock, [&] { return s->send_credit > 0 || s->ended || !alive_; });
      if (!alive_) return tl::unexpected(unavailable(failure_));
      if (s->ended) return makeError(ErrorKind::kConflict, "the agent ended the operation");
      n = std::min({data.size(), protocol::kDataChunk, static_cast<size_t>(s->send_credit)});
      s->send_credit -= static_cast<int64_t>(n);
    }
    TRY(sendFrame(FrameType::kDataIn, ch, data.substr(0, n)));
    data.remove_prefix(n);
  }
  return ok();
}

}  // namespace space::agent
