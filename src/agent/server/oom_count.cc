// OOM kills as the agent's own kernel counts them, where that kernel is the sandbox's (a VM guest's
// /proc/vmstat): an exec the OOM killer ended says so in its exit event, and the usage op reports the
// count. In a jail /proc/vmstat is the host's; there the host reads the sandbox's cgroup instead.
#include <signal.h>
#include <sys/wait.h>

#include <charconv>
#include <fstream>
#include <iterator>

#include "agent/protocol/message.h"
#include "agent/server/server.h"

namespace space::agent {
namespace {

// The value of `key` in a "key value" per line text (/proc/vmstat); nullopt when absent or malformed.
std::optional<uint64_t> flatCounter(std::string_view text, std::string_view key) {
  while (!text.empty()) {
    size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    if (line.size() <= key.size() || !line.starts_with(key) || line[key.size()] != ' ') continue;
    std::string_view digits = line.substr(key.size() + 1);
    uint64_t value = 0;
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
    if (ec != std::errc() || end != digits.data() + digits.size()) return std::nullopt;
    return value;
  }
  return std::nullopt;
}

}  // namespace

std::optional<uint64_t> Server::oomKillCount() const {
  if (options_.vmstat_path.empty()) return std::nullopt;
  std::ifstream in(options_.vmstat_path);
  if (!in) return std::nullopt;
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return flatCounter(text, "oom_kill");
}

// The kernel counts the kill before it sends the SIGKILL (mm/oom_kill.c, "Raise event before sending
// signal"), so the victim's reap sees the count risen. Another process of the guest killed while this
// one ran would be taken for it, as on the jail tier: the kernel keeps no per-process record.
void Server::noteOomKill(Process& p) {
  if (!p.oom_kills_at_start || !WIFSIGNALED(p.wait_status) || WTERMSIG(p.wait_status) != SIGKILL) return;
  auto now = oomKillCount();
  p.oom_killed = now && *now > *p.oom_kills_at_start;
}

void Server::opUsage(uint32_t ch) {
  auto kills = oomKillCount();
  if (!kills) {
    return sendControl(
        ch, protocol::errorEvent(
                Error{ErrorKind::kUnsupported, 0, "this agent does not count OOM kills (its kernel is the host's)"}));
  }
  sendControl(ch, {{"event", "done"}, {"oom_kills", *kills}});
}

}  // namespace space::agent
