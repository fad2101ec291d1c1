// space cp: files and directories in and out of a sandbox. Files stream in 64 KiB pieces (no whole-file
// buffering); directories travel as one tar stream (GET/PUT .../files/archive); "-" is stdin or stdout.
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <optional>

#include "cli/commands.h"
#include "cli/local_tar.h"
#include "cli/output.h"
#include "common/unique_fd.h"
#include "http/url.h"

namespace space::cli {

std::pair<std::string, std::string> splitRemote(const std::string& arg) {
  // "ID:/path" is remote; "./a:b" or "/x:y" are local paths that happen to hold a colon.
  size_t colon = arg.find(':');
  if (colon == std::string::npos || colon == 0 || arg.find('/') < colon) return {"", arg};
  return {arg.substr(0, colon), arg.substr(colon + 1)};
}

Result<http::ClientResponse> uploadFromFd(Context& ctx, const std::string& method, const std::string& target, int fd,
                                          uint64_t size, const std::string& name) {
  return ctx.client.upload(method, target, size, [&](char* out, size_t max) -> Result<size_t> {
    ssize_t n;
    do n = ::read(fd, out, max);
    while (n < 0 && errno == EINTR);
    if (n < 0) return clientSysError(errno, "read {}", name);
    return static_cast<size_t>(n);
  });
}

int downloadToFile(Context& ctx, const std::string& target, const std::string& local) {
  // Written under a temporary name and renamed, so a failed transfer never leaves a truncated file.
  std::string tmp = local + ".space-partial";
  UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!fd) return fail(&ctx, clientSysError(errno, "create {}", tmp).value());
  auto resp = ctx.client.stream("GET", target, std::nullopt, [&](std::string_view d) -> Status {
    while (!d.empty()) {
      ssize_t n = ::write(fd.get(), d.data(), d.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return clientSysError(errno, "write {}", tmp);
      d.remove_prefix(static_cast<size_t>(n));
    }
    return ok();
  });
  Status st_ok = resp ? checkResponse(*resp) : Status(tl::unexpected(resp.error()));
  if (st_ok && ::fsync(fd.get()) != 0) st_ok = clientSysError(errno, "fsync {}", tmp);
  if (!st_ok) {
    ::unlink(tmp.c_str());
    return fail(&ctx, st_ok.error());
  }
  if (::rename(tmp.c_str(), local.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    return fail(&ctx, clientSysError(err, "rename {} to {}", tmp, local).value());
  }
  return 0;
}

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kStdio = "-";

std::string baseName(const std::string& p) {
  std::string t = p;
  while (t.size() > 1 && t.back() == '/') t.pop_back();
  size_t slash = t.find_last_of('/');
  return slash == std::string::npos ? t : t.substr(slash + 1);
}

std::string parentOf(const std::string& p) {
  std::string t = p;
  while (t.size() > 1 && t.back() == '/') t.pop_back();
  size_t slash = t.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : t.substr(0, slash);
}

std::string joinPath(const std::string& dir, const std::string& name) {
  return dir.ends_with('/') ? dir + name : dir + "/" + name;
}

std::string filesTarget(const std::string& id, const std::string& route, const std::string& path) {
  return fmt::format("/v1/sandboxes/{}/files{}?path={}", http::percentEncode(id), route, http::percentEncode(path));
}

// The remote path's stat, or nullopt when it does not exist (other errors are errors).
Result<std::optional<json>> remoteStat(Context& ctx, const std::string& id, const std::string& path) {
  auto j = callJson(ctx, "GET", filesTarget(id, "/stat", path));
  if (j) return std::optional<json>(*j);
  // A missing sandbox is the caller's error; a missing path is an answer.
  if (j.error().kind == ErrorKind::kNotFound && j.error().message.find("sandbox") == std::string::npos)
    return std::optional<json>();
  return tl::unexpected(j.error());
}

Status remoteMkdirs(Context& ctx, const std::string& id, const std::string& path) {
  auto j = callJson(ctx, "POST", fmt::format("/v1/sandboxes/{}/files/mkdir", http::percentEncode(id)),
                    json{{"path", path}, {"parents", true}});
  if (!j) return tl::unexpected(j.error());
  return ok();
}

}  // namespace

// A nameless file in the temporary directory: spooled uploads of unknown size, downloaded tar streams.
Result<UniqueFd> anonymousFile() {
  const char* dir = std::getenv("TMPDIR");
  std::string where = dir && *dir ? dir : "/tmp";
  UniqueFd fd(::open(where.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600));
  if (!fd) return clientSysError(errno, "create a temporary file in {}", where);
  return fd;
}

namespace {

Status writeAll(int fd, std::string_view d, const std::string& name) {
  while (!d.empty()) {
    ssize_t n = ::write(fd, d.data(), d.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return clientSysError(errno, "write {}", name);
    d.remove_prefix(static_cast<size_t>(n));
  }
  return ok();
}

Status copyFd(int from, int to, const std::string& name) {
  std::string buf(64 * 1024, '\0');
  for (;;) {
    ssize_t n = ::read(from, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return clientSysError(errno, "read {}", name);
    if (n == 0) return ok();
    TRY(writeAll(to, std::string_view(buf.data(), static_cast<size_t>(n)), name));
  }
}

}  // namespace

// stdin as an uploadable file: itself when it is a regular file, else spooled (the daemon needs a length).
Result<UniqueFd> openLocalSource(const std::string& local) {
  if (local != kStdio) {
    UniqueFd fd(::open(local.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) return clientSysError(errno, "open {}", local);
    return fd;
  }
  struct stat st {};
  if (::fstat(0, &st) == 0 && S_ISREG(st.st_mode)) return UniqueFd(::dup(0));
  ASSIGN_OR_RETURN(UniqueFd spool, anonymousFile());
  TRY(copyFd(0, spool.get(), "stdin"));
  if (::lseek(spool.get(), 0, SEEK_SET) != 0) return clientSysError(errno, "rewind the spooled stdin");
  return spool;
}

namespace {

int uploadBody(Context& ctx, const std::string& target, int fd, const std::string& name, json* answer = nullptr) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return fail(&ctx, clientSysError(errno, "stat {}", name).value());
  off_t at = ::lseek(fd, 0, SEEK_CUR);
  auto resp = uploadFromFd(ctx, "PUT", target, fd, static_cast<uint64_t>(st.st_size - (at > 0 ? at : 0)), name);
  if (!resp) return fail(&ctx, resp.error());
  if (auto s = checkResponse(*resp); !s) return fail(&ctx, s.error());
  if (answer) *answer = json::parse(resp->body, nullptr, false);
  return 0;
}

int streamToStdout(Context& ctx, const std::string& target) {
  auto resp = ctx.client.stream("GET", target, std::nullopt,
                                [](std::string_view d) -> Status { return writeAll(1, d, "stdout"); });
  if (!resp) return fail(&ctx, resp.error());
  if (auto s = checkResponse(*resp); !s) return fail(&ctx, s.error());
  return 0;
}

Error usage(std::string message) { return Error{ErrorKind::kInvalidArgument, 0, std::move(message)}; }

int uploadFile(Context& ctx, const std::string& local, const std::string& id, std::string remote, const CpOptions& o) {
  auto fd = openLocalSource(local);
  if (!fd) return fail(&ctx, fd.error());
  struct stat st {};
  if (::fstat(fd->get(), &st) != 0 || !S_ISREG(st.st_mode))
    return fail(&ctx, usage(S_ISDIR(st.st_mode) ? fmt::format("{} is a directory: copy it with space cp -r", local)
                                                : fmt::format("{} is not a regular file", local)));
  bool into_dir = remote.ends_with('/');
  if (!into_dir) {
    auto rs = remoteStat(ctx, id, remote);
    if (!rs) return fail(&ctx, rs.error());
    into_dir = *rs && (**rs).value("type", "") == "dir";
    if (!*rs && o.parents) {
      if (auto made = remoteMkdirs(ctx, id, parentOf(remote)); !made) return fail(&ctx, made.error());
    }
  } else if (o.parents) {
    if (auto made = remoteMkdirs(ctx, id, remote); !made) return fail(&ctx, made.error());
  }
  if (into_dir) {
    if (local == kStdio)
      return fail(&ctx, usage(fmt::format("stdin has no name: give one, e.g. {}:{}", id, joinPath(remote, "NAME"))));
    remote = joinPath(remote, baseName(local));
  }
  json answer;
  if (int rc = uploadBody(
          ctx, fmt::format("{}&mode={:o}", filesTarget(id, "", remote), local == kStdio ? 0644 : st.st_mode & 0777),
          fd->get(), local, &answer))
    return rc;
  printResult(ctx, {{"from", local}, {"to", id + ":" + remote}, {"bytes", answer.value("bytes", uint64_t{0})}}, "");
  return 0;
}

int uploadTree(Context& ctx, const std::string& local, const std::string& id, const std::string& remote,
               const CpOptions& o) {
  std::error_code ec;
  if (local != kStdio && !fs::is_directory(local, ec)) return uploadFile(ctx, local, id, remote, o);
  std::string dest = remote;
  auto rs = remoteStat(ctx, id, remote);
  if (!rs) return fail(&ctx, rs.error());
  if (local != kStdio && (remote.ends_with('/') || (*rs && (**rs).value("type", "") == "dir")))
    dest = joinPath(remote, baseName(fs::path(local).lexically_normal().string()));
  if (!o.parents && !(*rs && (**rs).value("type", "") == "dir")) {
    std::string parent = remote.ends_with('/') ? remote : parentOf(remote);
    auto ps = remoteStat(ctx, id, parent);
    if (!ps) return fail(&ctx, ps.error());
    if (!*ps)
      return fail(&ctx, Error{ErrorKind::kNotFound, 0, fmt::format("{}:{} does not exist (-p makes it)", id, parent)});
  }
  auto tar = anonymousFile();
  if (!tar) return fail(&ctx, tar.error());
  Status packed = local == kStdio ? copyFd(0, tar->get(), "stdin") : packLocalTree(local, tar->get());
  if (!packed) return fail(&ctx, packed.error());
  if (::lseek(tar->get(), 0, SEEK_SET) != 0) return fail(&ctx, clientSysError(errno, "rewind the tar stream").value());
  json answer;
  if (int rc = uploadBody(ctx, filesTarget(id, "/archive", dest), tar->get(), local, &answer)) return rc;
  if (uint64_t skipped = answer.value("skipped", uint64_t{0}))
    fmt::print(stderr, "space: {} entries not copied (symlinks, hard links and devices are not made in a sandbox)\n",
               skipped);
  return 0;
}

int downloadFile(Context& ctx, const std::string& id, const std::string& remote, std::string local,
                 const CpOptions& o) {
  auto rs = remoteStat(ctx, id, remote);
  if (!rs) return fail(&ctx, rs.error());
  if (!*rs) return fail(&ctx, Error{ErrorKind::kNotFound, 0, fmt::format("{}:{} does not exist", id, remote), "file"});
  if ((**rs).value("type", "") == "dir")
    return fail(&ctx, usage(fmt::format("{}:{} is a directory: copy it with space cp -r", id, remote)));
  if (local == kStdio) return streamToStdout(ctx, filesTarget(id, "", remote));
  struct stat st {};
  if (local == ".") local = "./";
  if (local.back() == '/' || (::stat(local.c_str(), &st) == 0 && S_ISDIR(st.st_mode)))
    local = joinPath(local, baseName(remote));
  if (o.parents) {
    std::error_code ec;
    fs::create_directories(parentOf(local), ec);
    if (ec) return fail(&ctx, usage(fmt::format("create {}: {}", parentOf(local), ec.message())));
  }
  if (int rc = downloadToFile(ctx, filesTarget(id, "", remote), local)) return rc;
  struct stat done {};
  printResult(
      ctx,
      {{"from", id + ":" + remote}, {"to", local}, {"bytes", ::stat(local.c_str(), &done) == 0 ? done.st_size : 0}},
      "");
  return 0;
}

int downloadTree(Context& ctx, const std::string& id, const std::string& remote, const std::string& local,
                 const CpOptions& o) {
  auto rs = remoteStat(ctx, id, remote);
  if (!rs) return fail(&ctx, rs.error());
  if (*rs && (**rs).value("type", "") != "dir") return downloadFile(ctx, id, remote, local, o);
  if (local == kStdio) return streamToStdout(ctx, filesTarget(id, "/archive", remote));
  std::error_code ec;
  bool into = fs::is_directory(local, ec);
  if (!into && !o.parents && !fs::is_directory(parentOf(local), ec))
    return fail(
        &ctx, Error{ErrorKind::kNotFound, 0, fmt::format("{} does not exist (-p makes it)", parentOf(local)), "local"});
  auto tar = anonymousFile();
  if (!tar) return fail(&ctx, tar.error());
  auto resp = ctx.client.stream("GET", filesTarget(id, "/archive", remote), std::nullopt,
                                [&](std::string_view d) { return writeAll(tar->get(), d, "the tar stream"); });
  if (!resp) return fail(&ctx, resp.error());
  if (auto s = checkResponse(*resp); !s) return fail(&ctx, s.error());
  if (::lseek(tar->get(), 0, SEEK_SET) != 0) return fail(&ctx, clientSysError(errno, "rewind the tar stream").value());
  auto counts = unpackTree(tar->get(), local, !into);
  if (!counts) return fail(&ctx, counts.error());
  return 0;
}

}  // namespace

int cmdCp(Context& ctx, const std::string& src, const std::string& dst, const CpOptions& o) {
  auto [src_id, src_path] = splitRemote(src);
  auto [dst_id, dst_path] = splitRemote(dst);
  if (src_id.empty() == dst_id.empty()) {
    fmt::print(stderr, "space: exactly one side of cp must be ID:/path (e.g. space cp ./a.py sb-1:/root/)\n");
    return 2;
  }
  std::string remote = src_id.empty() ? dst_path : src_path;
  if (remote.empty()) {
    fmt::print(stderr, "space: {}: give a path inside the sandbox after the colon, e.g. {}:/root/\n",
               src_id.empty() ? dst : src, src_id.empty() ? dst_id : src_id);
    return 2;
  }
  if (!dst_id.empty())
    return o.recursive ? uploadTree(ctx, src_path, dst_id, dst_path, o)
                       : uploadFile(ctx, src_path, dst_id, dst_path, o);
  return o.recursive ? downloadTree(ctx, src_id, src_path, dst_path, o)
                     : downloadFile(ctx, src_id, src_path, dst_path, o);
}

}  // namespace space::cli
