#include "common/ids.h"

#include <fmt/format.h>
#include <sys/random.h>

#include <chrono>
#include <ctime>

#include "common/hex.h"

namespace space {

std::string randomHex(size_t n_bytes) {
  std::string raw(n_bytes, '\0');
  size_t got = 0;
  while (got < n_bytes) {
    ssize_t r = getrandom(raw.data() + got, n_bytes - got, 0);
    if (r > 0) got += static_cast<size_t>(r);
  }
  return toHex(reinterpret_cast<const unsigned char*>(raw.data()), raw.size());
}

std::string newSandboxId() { return "sb-" + randomHex(6); }

bool isValidSandboxId(const std::string& id) {
  if (id.size() != 15 || id.compare(0, 3, "sb-") != 0) return false;
  for (size_t i = 3; i < id.size(); ++i) {
    char c = id[i];
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

int64_t nowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string isoTimeMs(int64_t unix_ms) {
  if (unix_ms == 0) return "";
  time_t secs = static_cast<time_t>(unix_ms / 1000);
  struct tm tm {};
  gmtime_r(&secs, &tm);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                     tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(unix_ms % 1000));
}

}  // namespace space
