// The conversation between JailRuntime::start (host) and jailInit (inside) over a SOCK_SEQPACKET
// socketpair: message boundaries are kept, and either side sees EOF the moment the other dies.
//
//   host → child  "go"           (one byte, read by the pre-exec stub: maps written, cgroups joined, root built)
//   host → child  config JSON    (JailInitConfig: rootfs path, hostname, limits, environment, seccomp policy)
//   child → host  note <text>    (zero or more: a step skipped for a stated reason; the host logs it)
//   child → host  mounted        (pivot_root done: the host may drop its own copies of the sandbox mounts)
//   child → host  ready          (every step done, seccomp on; the agent is about to serve)
//   child → host  error <step> <errno> <message>   (containment failed; the child exits)
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "common/result.h"

namespace space::jail {

// argv of the agent: space-agent --jail-init <sync fd> <listen fd>
inline constexpr const char* kJailInitFlag = "--jail-init";
inline constexpr char kGoByte = 'G';

struct JailInitConfig {
  std::string rootfs;  // host path of the sandbox's overlay root, pivoted into
  std::string hostname;
  uint32_t nofile = 4096;
  uint64_t shm_bytes = 64ull << 20;
  std::map<std::string, std::string> env;
  std::string seccomp_policy;  // JSON text of the policy (the file is not reachable after pivot_root)

  nlohmann::json toJson() const;
  static Result<JailInitConfig> fromJson(const std::string& text);
};

struct HandshakeMessage {
  std::string kind;  // note | mounted | ready | error
  std::string step;  // error only
  int err = 0;       // error only
  std::string text;
};

Status sendMessage(int fd, const std::string& message);
// Waits up to `timeout` for one message; EOF (the peer died) is an error of kind kUnavailable.
Result<std::string> receiveMessage(int fd, std::chrono::milliseconds timeout);

std::string formatError(const std::string& step, int err, const std::string& message);
HandshakeMessage parseMessage(const std::string& raw);

}  // namespace space::jail
