#include "runtime/jail/inside/handshake.h"

#include <poll.h>
#include <sys/socket.h>

#include <vector>

namespace space::jail {

nlohmann::json JailInitConfig::toJson() const {
  return {{"rootfs", rootfs},       {"hostname", hostname}, {"nofile", nofile},
          {"shm_bytes", shm_bytes}, {"env", env},           {"seccomp_policy", seccomp_policy}};
}

Result<JailInitConfig> JailInitConfig::fromJson(const std::string& text) {
  auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return makeError(ErrorKind::kInvalidArgument, "jail config: not JSON");
  try {
    JailInitConfig c;
    c.rootfs = j.at("rootfs").get<std::string>();
    c.hostname = j.at("hostname").get<std::string>();
    c.nofile = j.at("nofile").get<uint32_t>();
    c.shm_bytes = j.at("shm_bytes").get<uint64_t>();
    c.env = j.at("env").get<std::map<std::string, std::string>>();
    c.seccomp_policy = j.at("seccomp_policy").get<std::string>();
    return c;
  } catch (const nlohmann::json::exception& e) {
    return makeError(ErrorKind::kInvalidArgument, "jail config: {}", e.what());
  }
}

Status sendMessage(int fd, const std::string& message) {
  ssize_t n = send(fd, message.data(), message.size(), MSG_NOSIGNAL);
  if (n < 0) return sysError(errno, "send handshake message");
  if (static_cast<size_t>(n) != message.size()) return sysError(EMSGSIZE, "short handshake send");
  return ok();
}

Result<std::string> receiveMessage(int fd, std::chrono::milliseconds timeout) {
  pollfd p{fd, POLLIN, 0};
  int rc;
  do rc = poll(&p, 1, static_cast<int>(timeout.count()));
  while (rc < 0 && errno == EINTR);
  if (rc < 0) return sysError(errno, "poll handshake");
  if (rc == 0) return makeError(ErrorKind::kUnavailable, "handshake: no message within {} ms", timeout.count());
  // MSG_PEEK|MSG_TRUNC reports the datagram's full length without consuming it.
  ssize_t len = recv(fd, nullptr, 0, MSG_PEEK | MSG_TRUNC);
  if (len < 0) return sysError(errno, "recv handshake (peek)");
  std::vector<char> buf(static_cast<size_t>(len) + 1);
  ssize_t n = recv(fd, buf.data(), buf.size(), 0);
  if (n < 0) return sysError(errno, "recv handshake");
  if (n == 0 && len == 0) return makeError(ErrorKind::kUnavailable, "handshake: peer closed the channel");
  return std::string(buf.data(), static_cast<size_t>(n));
}

std::string formatError(const std::string& step, int err, const std::string& message) {
  return fmt::format("error {} {} {}", step, err, message);
}

HandshakeMessage parseMessage(const std::string& raw) {
  HandshakeMessage m;
  auto space1 = raw.find(' ');
  m.kind = raw.substr(0, space1);
  if (space1 == std::string::npos) return m;
  std::string rest = raw.substr(space1 + 1);
  if (m.kind != "error") {
    m.text = rest;
    return m;
  }
  auto s2 = rest.find(' ');
  m.step = rest.substr(0, s2);
  if (s2 == std::string::npos) return m;
  auto s3 = rest.find(' ', s2 + 1);
  m.err = std::atoi(rest.substr(s2 + 1, s3 - s2 - 1).c_str());
  if (s3 != std::string::npos) m.text = rest.substr(s3 + 1);
  return m;
}

}  // namespace space::jail
