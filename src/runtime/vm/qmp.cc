#include "runtime/vm/qmp.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cstring>

#include "runtime/vm/unix_socket.h"

namespace space::vm {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

Result<std::optional<json>> QmpDecoder::next() {
  for (;;) {
    size_t nl = buf_.find('\n', pos_);
    if (nl == std::string::npos) {
      if (buf_.size() - pos_ > kQmpMaxLine)
        return makeError(ErrorKind::kInternal, "QMP message longer than {} bytes", kQmpMaxLine);
      if (pos_ > 0) {
        buf_.erase(0, pos_);
        pos_ = 0;
      }
      return std::optional<json>();
    }
    std::string_view line(buf_.data() + pos_, nl - pos_);
    pos_ = nl + 1;
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.remove_suffix(1);
    if (line.empty()) continue;
    json msg = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (msg.is_discarded() || !msg.is_object())
      return makeError(ErrorKind::kInternal, "QMP sent a line that is not a JSON object");
    return std::optional<json>(std::move(msg));
  }
}

QmpKind classifyQmp(const json& msg) {
  if (!msg.is_object()) return QmpKind::kUnknown;
  if (msg.contains("QMP")) return QmpKind::kGreeting;
  if (msg.contains("return")) return QmpKind::kReturn;
  if (msg.contains("error")) return QmpKind::kError;
  if (msg.contains("event") && msg["event"].is_string()) return QmpKind::kEvent;
  return QmpKind::kUnknown;
}

Result<json> qmpReplyResult(const json& reply) {
  switch (classifyQmp(reply)) {
    case QmpKind::kReturn:
      return reply["return"];
    case QmpKind::kError: {
      const json& e = reply["error"];
      std::string cls =
          e.is_object() && e.contains("class") && e["class"].is_string() ? e["class"].get<std::string>() : "?";
      std::string desc =
          e.is_object() && e.contains("desc") && e["desc"].is_string() ? e["desc"].get<std::string>() : "";
      ErrorKind kind = cls == "CommandNotFound"  ? ErrorKind::kUnsupported
                       : cls == "DeviceNotFound" ? ErrorKind::kNotFound
                                                 : ErrorKind::kInternal;
      return makeError(kind, "QMP {}: {}", cls, desc);
    }
    default:
      return makeError(ErrorKind::kInternal, "QMP reply has neither return nor error");
  }
}

std::string encodeQmpCommand(const std::string& command, const json& arguments, uint64_t id) {
  json cmd = {{"execute", command}, {"id", id}};
  if (!arguments.is_null()) cmd["arguments"] = arguments;
  return cmd.dump() + "\n";
}

Result<std::unique_ptr<QmpClient>> QmpClient::connect(const std::string& socket_path, Duration timeout) {
  auto deadline = Clock::now() + timeout;
  ASSIGN_OR_RETURN(UniqueFd fd, connectUnixUntil(socket_path, deadline));
  auto left = std::chrono::duration_cast<Duration>(deadline - Clock::now());
  return adopt(std::move(fd), std::max(left, Duration(1)));
}

Result<std::unique_ptr<QmpClient>> QmpClient::adopt(UniqueFd fd, Duration timeout) {
  std::unique_ptr<QmpClient> client(new QmpClient(std::move(fd)));
  auto deadline = Clock::now() + timeout;
  ASSIGN_OR_RETURN(json greeting, client->readMessage(deadline));
  if (classifyQmp(greeting) != QmpKind::kGreeting) return makeError(ErrorKind::kInternal, "QMP: no greeting");
  client->greeting_ = std::move(greeting);
  TRY(client->execute("qmp_capabilities", nullptr, timeout));
  return client;
}

Result<json> QmpClient::readMessage(Clock::time_point deadline) {
  char buf[65536];
  for (;;) {
    ASSIGN_OR_RETURN(std::optional<json> msg, decoder_.next());
    if (msg) return std::move(*msg);
    auto left = std::chrono::duration_cast<Duration>(deadline - Clock::now()).count();
    if (left <= 0) return makeError(ErrorKind::kUnavailable, "QMP: timed out waiting for QEMU");
    pollfd pfd{fd_.get(), POLLIN, 0};
    int rc = ::poll(&pfd, 1, static_cast<int>(left));
    if (rc < 0 && errno != EINTR) return sysError(errno, "poll QMP socket");
    if (rc <= 0) continue;
    ssize_t n = ::read(fd_.get(), buf, sizeof buf);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n < 0) return sysError(errno, "read QMP socket");
    if (n == 0) return makeError(ErrorKind::kUnavailable, "QMP: QEMU closed the connection");
    decoder_.feed(std::string_view(buf, static_cast<size_t>(n)));
  }
}

Status QmpClient::sendLine(const std::string& line, int fd) {
  size_t off = 0;
  if (fd >= 0) {
    // The first bytes carry the descriptor; QEMU attaches it to the command read from them (getfd).
    iovec iov{const_cast<char*>(line.data()), line.size()};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    cmsghdr* cm = CMSG_FIRSTHDR(&msg);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(cm), &fd, sizeof(int));
    ssize_t n;
    do {
      n = ::sendmsg(fd_.get(), &msg, MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    if (n < 0) return sysError(errno, "send QMP command with a descriptor");
    off = static_cast<size_t>(n);
  }
  while (off < line.size()) {
    ssize_t n = ::send(fd_.get(), line.data() + off, line.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return sysError(errno, "send QMP command");
    off += static_cast<size_t>(n);
  }
  return ok();
}

Result<json> QmpClient::execute(const std::string& command, const json& arguments, Duration timeout) {
  return executeWithFd(command, arguments, -1, timeout);
}

Result<json> QmpClient::executeWithFd(const std::string& command, const json& arguments, int fd, Duration timeout) {
  std::lock_guard lock(mu_);
  uint64_t id = next_id_++;
  if (auto st = sendLine(encodeQmpCommand(command, arguments, id), fd); !st)
    return tl::unexpected(st.error().context(fmt::format("QMP {}", command)));
  auto deadline = Clock::now() + timeout;
  for (;;) {
    auto msg = readMessage(deadline);
    if (!msg) return tl::unexpected(msg.error().context(fmt::format("QMP {}", command)));
    QmpKind kind = classifyQmp(*msg);
    if (kind == QmpKind::kEvent) {
      events_.push_back(std::move(*msg));
      continue;
    }
    if (kind != QmpKind::kReturn && kind != QmpKind::kError) continue;
    // Replies without our id answer nobody (QEMU echoes the id we sent).
    if (!msg->contains("id") || (*msg)["id"] != id) continue;
    auto result = qmpReplyResult(*msg);
    if (!result) return tl::unexpected(result.error().context(fmt::format("QMP {}", command)));
    return result;
  }
}

Status QmpClient::passFd(const std::string& name, int fd) {
  TRY(executeWithFd("getfd", {{"fdname", name}}, fd));
  return ok();
}

Result<json> QmpClient::waitEvent(const std::string& name, Duration timeout) {
  std::lock_guard lock(mu_);
  auto deadline = Clock::now() + timeout;
  for (;;) {
    for (auto it = events_.begin(); it != events_.end(); ++it) {
      if ((*it)["event"] == name) {
        json ev = std::move(*it);
        events_.erase(it);
        return ev;
      }
    }
    ASSIGN_OR_RETURN(json msg, readMessage(deadline));
    if (classifyQmp(msg) == QmpKind::kEvent) events_.push_back(std::move(msg));
  }
}

}  // namespace space::vm
