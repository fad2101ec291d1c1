#include "core/uid_blocks.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

namespace space::core {

namespace {

std::string readSmall(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

std::optional<uint32_t> parseBlock(const std::string& text) {
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos || text.size() > 3) return std::nullopt;
  uint32_t k = static_cast<uint32_t>(std::stoul(text));
  if (k >= kUidBlocks) return std::nullopt;
  return k;
}

Status writeFileAtomically(const std::string& path, const std::string& text) {
  std::string tmp = path + ".tmp";
  UniqueFd fd(open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!fd) return sysError(errno, "create {}", tmp);
  if (write(fd.get(), text.data(), text.size()) != static_cast<ssize_t>(text.size()))
    return sysError(errno, "write {}", tmp);
  if (fsync(fd.get()) < 0) return sysError(errno, "fsync {}", tmp);
  if (rename(tmp.c_str(), path.c_str()) < 0) return sysError(errno, "rename {}", tmp);
  return ok();
}

struct Registry {
  std::string dir;
  std::string owner(uint32_t k) const { return readSmall(fmt::format("{}/{}.owner", dir, k)); }
  // A claim whose directory is gone, or no longer records this block, holds nothing any more.
  bool stale(uint32_t k) const {
    std::string o = owner(k);
    if (o.empty()) return true;
    return parseBlock(readSmall(o + "/uid-block")) != k;
  }
  // Held by a running daemon (the lock is taken), whatever the owner file says.
  bool live(uint32_t k) const {
    // Looking creates nothing (no lock file: nobody ever held it), and a shared probe of a free lock does
    // not make a daemon claiming it at that moment take the block for held.
    UniqueFd fd(open(fmt::format("{}/{}.lock", dir, k).c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) return false;
    return flock(fd.get(), LOCK_SH | LOCK_NB) < 0 && errno == EWOULDBLOCK;
  }
};

// Whether any process on the host runs as a uid of block k (a sandbox of it is alive).
bool uidsInUse(uint32_t k) {
  uint64_t first = kUidBase + uint64_t{k} * kSlotsPerBlock * kUidRange;
  uint64_t end = first + uint64_t{kSlotsPerBlock} * kUidRange;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    std::string pid = entry.path().filename().string();
    if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(entry.path() / "status");
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("Uid:", 0) != 0) continue;
      std::istringstream fields(line.substr(4));
      uint64_t uid = 0;
      if (fields >> uid && uid >= first && uid < end) return true;
      break;
    }
  }
  return false;
}

}  // namespace

Result<UidBlock> UidBlock::claim(const std::string& registry_dir, const std::string& state_dir,
                                 bool has_legacy_sandboxes) {
  std::error_code ec;
  std::filesystem::create_directories(registry_dir, ec);
  if (ec) return makeError(ErrorKind::kInternal, "create {}: {}", registry_dir, ec.message());
  chmod(registry_dir.c_str(), 0700);
  char real[PATH_MAX];
  if (!realpath(state_dir.c_str(), real)) return sysError(errno, "resolve {}", state_dir);
  std::string self = real;
  Registry reg{registry_dir};

  UniqueFd registry_lock(open((registry_dir + "/registry.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (!registry_lock) return sysError(errno, "open {}/registry.lock", registry_dir);
  while (flock(registry_lock.get(), LOCK_EX) < 0)
    if (errno != EINTR) return sysError(errno, "lock {}/registry.lock", registry_dir);

  std::string record_path = self + "/uid-block";
  std::string recorded_text = readSmall(record_path);
  std::optional<uint32_t> recorded = parseBlock(recorded_text);
  if (!recorded_text.empty() && !recorded)
    return makeError(ErrorKind::kInvalidArgument, "{} holds '{}', not a uid block (0-{})", record_path, recorded_text,
                     kUidBlocks - 1);
  std::optional<uint32_t> chosen;
  if (recorded) {
    std::string o = reg.owner(*recorded);
    if (!o.empty() && o != self && !reg.stale(*recorded))
      return makeError(ErrorKind::kConflict,
                       "uid block {} of {} is claimed by the SPACE node of {} on this host{}: two nodes would run "
                       "sandboxes as the same host uids",
                       *recorded, self, o, reg.live(*recorded) ? " (running)" : "");
    chosen = recorded;
  } else {
    auto free = [&](uint32_t k) {
      std::string o = reg.owner(k);
      return (o.empty() || o == self || reg.stale(k)) && !reg.live(k);
    };
    if (has_legacy_sandboxes) {
      if (!free(0))
        return makeError(ErrorKind::kConflict,
                         "{} has sandboxes from before uid blocks, whose uids are block 0's, but block 0 is held by {}",
                         self, reg.owner(0));
      chosen = 0;
    }
    for (uint32_t k = 0; k < kUidBlocks && !chosen; ++k)
      if (free(k)) chosen = k;
    // Every block claimed: take back one that no spaced holds and no process runs in (a node stopped
    // with nothing running, or a directory left behind). Its old directory, started again, is told.
    for (uint32_t k = 0; k < kUidBlocks && !chosen; ++k) {
      if (reg.live(k) || uidsInUse(k)) continue;
      spdlog::warn("uid block {}: taken back from {} (no spaced holds it, no process runs in its range)", k,
                   reg.owner(k));
      chosen = k;
    }
    if (!chosen)
      return makeError(ErrorKind::kResourceExhausted, "all {} sandbox uid blocks of this host are claimed (see {})",
                       kUidBlocks, registry_dir);
  }

  UidBlock block;
  block.index_ = *chosen;
  std::string lock_path = fmt::format("{}/{}.lock", registry_dir, *chosen);
  block.lock_ = UniqueFd(open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (!block.lock_) return sysError(errno, "open {}", lock_path);
  if (flock(block.lock_.get(), LOCK_EX | LOCK_NB) < 0) {
    if (errno == EWOULDBLOCK)
      return makeError(ErrorKind::kConflict, "uid block {} is held by a running spaced: is one running on {} already?",
                       *chosen, self);
    return sysError(errno, "lock {}", lock_path);
  }
  TRY(writeFileAtomically(fmt::format("{}/{}.owner", registry_dir, *chosen), self + "\n"));
  if (!recorded) {
    TRY(writeFileAtomically(record_path, fmt::format("{}\n", *chosen)));
    spdlog::info("uid block {} claimed for {} (host uids {:#x}-{:#x})", *chosen, self, block.uidBase(0),
                 block.uidBase(kSlotsPerBlock - 1) + (kUidRange - 1));
  }
  return block;
}

}  // namespace space::core
