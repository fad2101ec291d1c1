// The file API. Paths come from the host but name things inside the sandbox, where sandbox code may have
// planted symlinks: every lookup goes through paths.h (openat2 beneath the root) and final components
// are used with *at() calls that do not follow links. Reads and writes are for regular files only.
#include <dirent.h>
#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/protocol/message.h"
#include "agent/server/paths.h"
#include "agent/server/server.h"

namespace space::agent {
namespace {

constexpr size_t kListBatch = 1000;
constexpr size_t kMaxListEntries = 100000;
constexpr int kMaxRemoveDepth = 256;

const char* typeName(mode_t m) {
  if (S_ISREG(m)) return "file";
  if (S_ISDIR(m)) return "dir";
  if (S_ISLNK(m)) return "symlink";
  return "other";
}

std::string describeType(mode_t m) {
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISFIFO(m)) return "a fifo";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISDIR(m)) return "a directory";
  return "not a regular file";
}

json statJson(int dirfd, const std::string& name, const struct stat& st, const std::string& shown) {
  json j = {{"name", shown},
            {"type", typeName(st.st_mode)},
            {"size", static_cast<uint64_t>(st.st_size)},
            {"mode", st.st_mode & 07777},
            {"uid", st.st_uid},
            {"gid", st.st_gid},
            {"mtime_unix_ms", int64_t{st.st_mtim.tv_sec} * 1000 + st.st_mtim.tv_nsec / 1000000}};
  if (S_ISLNK(st.st_mode)) {
    char target[4096];
    ssize_t n = readlinkat(dirfd, name.c_str(), target, sizeof target);
    if (n > 0) j["link_target"] = std::string(target, static_cast<size_t>(n));
  }
  return j;
}

Result<std::string> requirePath(const json& msg, const char* key = "path") {
  ASSIGN_OR_RETURN(std::string path, protocol::getString(msg, key));
  if (path.empty()) return makeError(ErrorKind::kInvalidArgument, "{} is empty", key);
  return path;
}

// Removes name (beneath dirfd) and everything under it without following symlinks.
Status removeTree(int dirfd, const std::string& name, int depth) {
  if (depth > kMaxRemoveDepth)
    return makeError(ErrorKind::kInvalidArgument, "directory tree deeper than {}", kMaxRemoveDepth);
  int fd = openat(dirfd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return clientSysError(errno, "open directory {}", name);
  DIR* dir = fdopendir(fd);
  if (!dir) {
    close(fd);
    return clientSysError(errno, "fdopendir {}", name);
  }
  Status result = ok();
  while (dirent* e = readdir(dir)) {
    std::string child = e->d_name;
    if (child == "." || child == "..") continue;
    struct stat st {};
    if (fstatat(fd, child.c_str(), &st, AT_SYMLINK_NOFOLLOW) < 0) continue;
    if (S_ISDIR(st.st_mode)) {
      result = removeTree(fd, child, depth + 1);
    } else if (unlinkat(fd, child.c_str(), 0) < 0) {
      result = clientSysError(errno, "unlink {}", child);
    }
    if (!result) break;
  }
  closedir(dir);
  TRY(result);
  if (unlinkat(dirfd, name.c_str(), AT_REMOVEDIR) < 0) return clientSysError(errno, "rmdir {}", name);
  return ok();
}

}  // namespace

void Server::opReadFile(uint32_t ch, const json& msg) {
  auto path = requirePath(msg);
  if (!path) return endChannelError(ch, path.error());
  // O_PATH first so that a fifo or device is refused without being opened (opening has side effects:
  // a fifo would block, a tape would rewind); the type is checked again on the real open.
  auto probe = openInRoot(root_.get(), *path, O_PATH);
  if (!probe) return endChannelError(ch, probe.error());
  struct stat st {};
  if (fstat(probe->get(), &st) < 0) return endChannelError(ch, clientSysError(errno, "fstat {}", *path).value());
  if (!S_ISREG(st.st_mode))
    return endChannelError(
        ch, Error{ErrorKind::kInvalidArgument, 0,
                  fmt::format("{} is {}, only regular files can be read", *path, describeType(st.st_mode))});
  auto fd = openInRoot(root_.get(), *path, O_RDONLY | O_NONBLOCK | O_NOCTTY);
  if (!fd) return endChannelError(ch, fd.error());
  if (fstat(fd->get(), &st) < 0 || !S_ISREG(st.st_mode))
    return endChannelError(ch, Error{ErrorKind::kInvalidArgument, 0, fmt::format("{} is not a regular file", *path)});
  Channel& c = openChannel(ch, Channel::Kind::kReadFile);
  c.file = std::move(*fd);
  sendControl(ch, {{"event", "file"}, {"size", static_cast<uint64_t>(st.st_size)}});
}

bool Server::pumpReadFile(Channel& c) {
  bool progress = false;
  while (c.send_credit > 0 && outRoom()) {
    size_t max = std::min<size_t>(protocol::kDataChunk, static_cast<size_t>(c.send_credit));
    char* dst = beginData(protocol::FrameType::kDataOut, c.id, max);
    ssize_t n = read(c.file.get(), dst, max);
    commitData(n > 0 ? static_cast<size_t>(n) : 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      endChannelError(c.id, clientSysError(errno, "read file").value());
      return true;
    }
    if (n == 0) {
      endChannel(c.id, {{"event", "done"}, {"bytes", c.bytes}});
      return true;
    }
    c.send_credit -= n;
    c.bytes += static_cast<uint64_t>(n);
    progress = true;
  }
  return progress;
}

void Server::opWriteFile(uint32_t ch, const json& msg) {
  auto path = requirePath(msg);
  if (!path) return endChannelError(ch, path.error());
  auto parent = openParent(root_.get(), *path);
  if (!parent) return endChannelError(ch, parent.error());
  if (parent->name.empty())
    return endChannelError(ch, Error{ErrorKind::kInvalidArgument, 0, "cannot write to the root directory"});
  struct stat st {};
  if (fstatat(parent->dir.get(), parent->name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISREG(st.st_mode) &&
      !S_ISLNK(st.st_mode)) {
    return endChannelError(
        ch, Error{ErrorKind::kInvalidArgument, 0,
                  fmt::format("{} is {}, only regular files can be written", *path, describeType(st.st_mode))});
  }
  uint64_t rnd = 0;
  if (getrandom(&rnd, sizeof rnd, 0) != sizeof rnd) rnd = static_cast<uint64_t>(nowUnixMs()) ^ (uint64_t{ch} << 32);
  std::string tmp = fmt::format(".{}.space-upload-{:016x}", parent->name.substr(0, 200), rnd);
  // The temporary file lives next to the target so that the final rename is atomic; O_EXCL|O_NOFOLLOW
  // refuse anything the sandbox may have placed under that name.
  int fd = openat(parent->dir.get(), tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return endChannelError(ch, clientSysError(errno, "create temporary file for {}", *path).value());
  Channel& c = openChannel(ch, Channel::Kind::kWriteFile);
  c.file.reset(fd);
  c.dir = std::move(parent->dir);
  c.tmp_name = tmp;
  c.final_name = parent->name;
  c.mode = static_cast<uint32_t>(protocol::optInt(msg, "mode", 0644)) & 07777;
  sendControl(ch, {{"event", "ready"}});
}

void Server::writeUploadChunk(Channel& c, const std::string& data) {
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = write(c.file.get(), data.data() + off, data.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      Error e = clientSysError(errno, "write {}", c.final_name).value();
      abandonUpload(c);
      return endChannelError(c.id, e);
    }
    off += static_cast<size_t>(n);
  }
  c.bytes += data.size();
  c.recv_allowed += static_cast<int64_t>(data.size());
  sendCredit(c.id, static_cast<uint32_t>(data.size()));
}

void Server::finishUpload(Channel& c) {
  if (fchmod(c.file.get(), c.mode) < 0) {
    Error e = clientSysError(errno, "chmod {}", c.final_name).value();
    abandonUpload(c);
    return endChannelError(c.id, e);
  }
  if (renameat(c.dir.get(), c.tmp_name.c_str(), c.dir.get(), c.final_name.c_str()) < 0) {
    Error e = clientSysError(errno, "rename upload to {}", c.final_name).value();
    abandonUpload(c);
    return endChannelError(c.id, e);
  }
  c.file.reset();
  endChannel(c.id, {{"event", "done"}, {"bytes", c.bytes}});
}

void Server::abandonUpload(Channel& c) {
  if (!c.file) return;
  c.file.reset();
  unlinkat(c.dir.get(), c.tmp_name.c_str(), 0);
}

void Server::opStat(uint32_t ch, const json& msg) {
  auto path = requirePath(msg);
  if (!path) return endChannelError(ch, path.error());
  auto parent = openParent(root_.get(), *path);
  if (!parent) return endChannelError(ch, parent.error());
  struct stat st {};
  int rc = parent->name.empty() ? fstatat(parent->dir.get(), "", &st, AT_EMPTY_PATH)
                                : fstatat(parent->dir.get(), parent->name.c_str(), &st, AT_SYMLINK_NOFOLLOW);
  if (rc < 0) return endChannelError(ch, clientSysError(errno, "stat {}", *path).value());
  endChannel(ch, {{"event", "done"}, {"stat", statJson(parent->dir.get(), parent->name, st, *path)}});
}

void Server::opList(uint32_t ch, const json& msg) {
  auto path = requirePath(msg);
  if (!path) return endChannelError(ch, path.error());
  auto fd = openInRoot(root_.get(), *path, O_RDONLY | O_DIRECTORY);
  if (!fd) return endChannelError(ch, fd.error());
  int dfd = fd->get();
  DIR* dir = fdopendir(fd->release());
  if (!dir) {
    close(dfd);
    return endChannelError(ch, clientSysError(errno, "fdopendir {}", *path).value());
  }
  json batch = json::array();
  size_t total = 0;
  bool truncated = false;
  while (dirent* e = readdir(dir)) {
    std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    if (total == kMaxListEntries) {
      truncated = true;
      break;
    }
    struct stat st {};
    if (fstatat(dfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) < 0) continue;
    batch.push_back(statJson(dfd, name, st, name));
    ++total;
    if (batch.size() == kListBatch) {
      sendControl(ch, {{"event", "entries"}, {"entries", std::move(batch)}});
      batch = json::array();
    }
  }
  closedir(dir);
  endChannel(ch, {{"event", "done"}, {"entries", std::move(batch)}, {"truncated", truncated}});
}

void Server::opMkdir(uint32_t ch, const json& msg) {
  auto path = requirePath(msg);
  if (!path) return endChannelError(ch, path.error());
  bool parents = protocol::optBool(msg, "parents", false);
  mode_t mode = static_cast<mode_t>(protocol::optInt(msg, "mode", 0755)) & 07777;
  auto parts = pathComponents(*path);
  size_t first = parents ? 0 : (parts.empty() ? 0 : parts.size() - 1);
  if (parts.empty() && !parents)
    return endChannelError(ch, Error{ErrorKind::kInvalidArgument, EEXIST, "the root directory exists"});
  for (size_t i = first; i < parts.size(); ++i) {
    auto dir = openInRoot(root_.get(), joinComponents(parts, i), O_PATH | O_DIRECTORY);
    if (!dir) return endChannelError(ch, dir.error());
    if (mkdirat(dir->get(), parts[i].c_str(), mode) == 0) continue;
    if (errno != EEXIST || !parents)
      return endChannelError(ch, clientSysError(errno, "mkdir {}", joinComponents(parts, i + 1)).value());
    // Exists: fine for -p if it is (or links, within the root, to) a directory.
    auto existing = openInRoot(root_.get(), joinComponents(parts, i + 1), O_PATH | O_DIRECTORY);
    if (!existing) return endChannelError(ch, existing.error());
  }
  endChannel(ch, {{"event", "done"}});
}

void Server::opMove(uint32_t ch, const json& msg) {
  auto from = requirePath(msg, "from");
  if (!from) return endChannelError(ch, from.error());
  auto to = requirePath(msg, "to");
  if (!to) return endChannelError(ch, to.error());
  auto src = openParent(root_.get(), *from);
  if (!src) return endChannelError(ch, src.error());
  auto dst = openParent(root_.get(), *to);
  if (!dst) return endChannelError(ch, dst.error());
  if (src->name.empty() || dst->name.empty())
    return endChannelError(ch, Error{ErrorKind::kInvalidArgument, 0, "cannot move the root directory"});
  if (renameat(src->dir.get(), src->name.c_str(), dst->dir.get(), dst->name.c_str()) < 0)
    return endChannelError(ch, clientSysError(errno, "move {} to {}", *from, *to).value());
  endChannel(ch, {{"event", "done"}});
}

void Server::opRemove(uint32_t ch, const json& msg) {
  auto path = requirePath(msg);
  if (!path) return endChannelError(ch, path.error());
  bool recursive = protocol::optBool(msg, "recursive", false);
  auto parent = openParent(root_.get(), *path);
  if (!parent) return endChannelError(ch, parent.error());
  if (parent->name.empty())
    return endChannelError(ch, Error{ErrorKind::kInvalidArgument, 0, "cannot remove the root directory"});
  struct stat st {};
  if (fstatat(parent->dir.get(), parent->name.c_str(), &st, AT_SYMLINK_NOFOLLOW) < 0)
    return endChannelError(ch, clientSysError(errno, "stat {}", *path).value());
  Status s = ok();
  if (S_ISDIR(st.st_mode) && recursive) {
    s = removeTree(parent->dir.get(), parent->name, 0);
  } else if (unlinkat(parent->dir.get(), parent->name.c_str(), S_ISDIR(st.st_mode) ? AT_REMOVEDIR : 0) < 0) {
    s = clientSysError(errno, "remove {}", *path);
  }
  if (!s) return endChannelError(ch, s.error());
  endChannel(ch, {{"event", "done"}});
}

}  // namespace space::agent
