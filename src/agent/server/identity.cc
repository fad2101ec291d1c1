// set_identity: what makes a restored or forked sandbox distinct from its template (hostname, extra
// environment, fresh RNG state, the current time).
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include "agent/protocol/message.h"
#include "agent/server/server.h"

namespace space::agent {
namespace {

constexpr size_t kMaxSeedBytes = 4096;

Result<std::string> decodeHex(const std::string& hex) {
  if (hex.size() % 2 != 0 || hex.size() / 2 > kMaxSeedBytes)
    return makeError(ErrorKind::kInvalidArgument, "rng_seed_hex must be an even number of hex digits, at most {} bytes", kMaxSeedBytes);
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  for (size_t i = 0; i < hex.size(); i += 2) {
    int hi = nibble(hex[i]), lo = nibble(hex[i + 1]);
    if (hi < 0 || lo < 0) return makeError(ErrorKind::kInvalidArgument, "rng_seed_hex is not hex");
    out.push_back(static_cast<char>(hi << 4 | lo));
  }
  return out;
}

// Writing to /dev/urandom mixes the bytes into the kernel's pool (without crediting entropy, which
// needs CAP_SYS_ADMIN): two sandboxes restored from one memory snapshot then diverge.
Status mixIntoRng(const std::string& seed) {
  UniqueFd fd(open("/dev/urandom", O_WRONLY | O_CLOEXEC));
  if (!fd) return sysError(errno, "open /dev/urandom");
  if (write(fd.get(), seed.data(), seed.size()) != static_cast<ssize_t>(seed.size()))
    return sysError(errno, "write /dev/urandom");
  return ok();
}

}  // namespace

void Server::opSetIdentity(uint32_t ch, const json& msg) {
  json warnings = json::array();
  std::map<std::string, std::string> env;
  if (auto it = msg.find("env"); it != msg.end() && !it->is_null()) {
    if (!it->is_object()) return endChannelError(ch, Error{ErrorKind::kInvalidArgument, 0, "env must be an object"});
    for (auto& [k, v] : it->items()) {
      if (!v.is_string() || k.empty() || k.find('=') != std::string::npos || k.find('\0') != std::string::npos ||
          v.get<std::string>().find('\0') != std::string::npos)
        return endChannelError(ch, Error{ErrorKind::kInvalidArgument, 0, fmt::format("bad env entry \"{}\"", k)});
      env[k] = v.get<std::string>();
    }
  }
  std::string seed_hex = protocol::optString(msg, "rng_seed_hex");
  auto seed = decodeHex(seed_hex);
  if (!seed) return endChannelError(ch, seed.error());

  std::string hostname = protocol::optString(msg, "hostname");
  if (!hostname.empty()) {
    if (hostname.size() > 64 || hostname.find('\0') != std::string::npos)
      return endChannelError(ch, Error{ErrorKind::kInvalidArgument, 0, "hostname longer than 64 bytes"});
    if (sethostname(hostname.data(), hostname.size()) < 0)
      return endChannelError(ch, sysError(errno, "sethostname {}", hostname).value());
  }
  for (auto& [k, v] : env) env_[k] = v;
  if (!seed->empty()) {
    if (auto s = mixIntoRng(*seed); !s) warnings.push_back(s.error().message);
  }
  int64_t clock_ms = protocol::optInt(msg, "clock_unix_ms", 0);
  if (clock_ms > 0) {
    timespec ts{static_cast<time_t>(clock_ms / 1000), static_cast<long>(clock_ms % 1000) * 1000000};
    // Inside the jail the clock is the host's and setting it is denied (SECURITY.md J22); in a VM the
    // guest owns its clock. Either way the sandbox keeps running.
    if (clock_settime(CLOCK_REALTIME, &ts) < 0) warnings.push_back(sysError(errno, "clock_settime").value().message);
  }
  endChannel(ch, {{"event", "done"}, {"warnings", std::move(warnings)}});
}

}  // namespace space::agent
