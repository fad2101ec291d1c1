// A minimal QMP (QEMU Machine Protocol) client: the control channel spaced holds to each VMM. QMP is
// line-oriented JSON over a unix socket: a greeting, then `qmp_capabilities`, then commands whose replies
// carry our "id", interleaved with asynchronous events. QEMU runs guest-facing device emulation, so what
// it sends is treated as untrusted: bounded lines, malformed messages are errors, never asserts.
#pragma once

#include <chrono>
#include <deque>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "common/result.h"
#include "common/unique_fd.h"

namespace space::vm {

using Duration = std::chrono::milliseconds;

inline constexpr size_t kQmpMaxLine = 8u << 20;  // query-qmp-schema is the largest reply, ~200 KiB

// Splits the QMP byte stream into messages, one JSON object per line.
class QmpDecoder {
 public:
  void feed(std::string_view bytes) { buf_.append(bytes); }
  // The next complete message, nullopt when none is complete yet; an error when a line is not a JSON
  // object or a line grows past kQmpMaxLine (the stream is unusable after that).
  Result<std::optional<nlohmann::json>> next();

 private:
  std::string buf_;
  size_t pos_ = 0;
};

enum class QmpKind { kGreeting, kReturn, kError, kEvent, kUnknown };
QmpKind classifyQmp(const nlohmann::json& msg);

// A command reply as a result: the "return" value, or an Error carrying QMP's error class and text.
Result<nlohmann::json> qmpReplyResult(const nlohmann::json& reply);

// The command line QMP expects: {"execute": NAME, "arguments": {...}, "id": ID}.
std::string encodeQmpCommand(const std::string& command, const nlohmann::json& arguments, uint64_t id);

class QmpClient {
 public:
  // Connects to QEMU's QMP socket (retrying until it exists or the timeout ends), reads the greeting and
  // leaves negotiation mode with qmp_capabilities.
  static Result<std::unique_ptr<QmpClient>> connect(const std::string& socket_path, Duration timeout);
  // Takes an already-connected socket.
  static Result<std::unique_ptr<QmpClient>> adopt(UniqueFd fd, Duration timeout);

  // Runs one command and waits for its reply; events that arrive meanwhile are queued.
  Result<nlohmann::json> execute(const std::string& command, const nlohmann::json& arguments = nullptr,
                                 Duration timeout = std::chrono::seconds(30));
  // Runs one command with a file descriptor attached (SCM_RIGHTS), as `getfd` and `add-fd` expect.
  Result<nlohmann::json> executeWithFd(const std::string& command, const nlohmann::json& arguments, int fd,
                                       Duration timeout = std::chrono::seconds(30));
  // Hands fd to QEMU under `name` (QMP getfd); `fd:name` URIs then refer to it.
  Status passFd(const std::string& name, int fd);
  // Waits for an event by name (already queued ones first) and removes it from the queue.
  Result<nlohmann::json> waitEvent(const std::string& name, Duration timeout);
  std::deque<nlohmann::json> takeEvents() { return std::exchange(events_, {}); }
  const nlohmann::json& greeting() const { return greeting_; }

 private:
  explicit QmpClient(UniqueFd fd) : fd_(std::move(fd)) {}
  Status sendLine(const std::string& line, int fd);
  Result<nlohmann::json> readMessage(std::chrono::steady_clock::time_point deadline);

  std::mutex mu_;  // one command at a time: callers on several threads share a VM's connection
  UniqueFd fd_;
  QmpDecoder decoder_;
  nlohmann::json greeting_;
  std::deque<nlohmann::json> events_;
  uint64_t next_id_ = 1;
};

}  // namespace space::vm
