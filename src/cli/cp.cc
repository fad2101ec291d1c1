// space cp: files in and out of a sandbox, streamed in 64 KiB pieces (no whole-file buffering).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include "cli/commands.h"
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

namespace {

std::string baseName(const std::string& p) {
  size_t slash = p.find_last_of('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

int upload(Context& ctx, const std::string& local, const std::string& id, std::string remote) {
  UniqueFd fd(::open(local.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return fail(&ctx, sysError(errno, "open {}", local).value());
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
    return fail(&ctx, Error{ErrorKind::kInvalidArgument, 0, fmt::format("{} is not a regular file", local)});
  }
  if (remote.empty() || remote.back() == '/') remote += baseName(local);
  std::string target = fmt::format("/v1/sandboxes/{}/files?path={}&mode={:o}", http::percentEncode(id),
                                    http::percentEncode(remote), st.st_mode & 0777);
  auto resp = uploadFromFd(ctx, "PUT", target, fd.get(), static_cast<uint64_t>(st.st_size), local);
  if (!resp) return fail(&ctx, resp.error());
  if (auto s = checkResponse(*resp); !s) return fail(&ctx, s.error());
  auto written = nlohmann::json::parse(resp->body, nullptr, false);
  printResult(ctx, {{"from", local}, {"to", id + ":" + remote}, {"bytes", written.is_object() ? written.value("bytes", 0) : 0}}, "");
  return 0;
}

int download(Context& ctx, const std::string& id, const std::string& remote, std::string local) {
  struct stat st {};
  if (local == ".") local = "./";
  if (!local.empty() && (local.back() == '/' || (::stat(local.c_str(), &st) == 0 && S_ISDIR(st.st_mode)))) {
    if (local.back() != '/') local += '/';
    local += baseName(remote);
  }
  std::string target = fmt::format("/v1/sandboxes/{}/files?path={}", http::percentEncode(id), http::percentEncode(remote));
  if (int rc = downloadToFile(ctx, target, local); rc != 0) return rc;
  struct stat done {};
  printResult(ctx, {{"from", id + ":" + remote}, {"to", local}, {"bytes", ::stat(local.c_str(), &done) == 0 ? done.st_size : 0}}, "");
  return 0;
}

}  // namespace

Result<http::ClientResponse> uploadFromFd(Context& ctx, const std::string& method, const std::string& target, int fd,
                                          uint64_t size, const std::string& name) {
  return ctx.client.upload(method, target, size, [&](char* out, size_t max) -> Result<size_t> {
    ssize_t n;
    do n = ::read(fd, out, max);
    while (n < 0 && errno == EINTR);
    if (n < 0) return sysError(errno, "read {}", name);
    return static_cast<size_t>(n);
  });
}

int downloadToFile(Context& ctx, const std::string& target, const std::string& local) {
  // Written under a temporary name and renamed, so a failed transfer never leaves a truncated file.
  std::string tmp = local + ".space-partial";
  UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!fd) return fail(&ctx, sysError(errno, "create {}", tmp).value());
  auto resp = ctx.client.stream("GET", target, std::nullopt, [&](std::string_view d) -> Status {
    while (!d.empty()) {
      ssize_t n = ::write(fd.get(), d.data(), d.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return sysError(errno, "write {}", tmp);
      d.remove_prefix(static_cast<size_t>(n));
    }
    return ok();
  });
  Status st_ok = resp ? checkResponse(*resp) : Status(tl::unexpected(resp.error()));
  if (st_ok && ::fsync(fd.get()) != 0) st_ok = sysError(errno, "fsync {}", tmp);
  if (!st_ok) {
    ::unlink(tmp.c_str());
    return fail(&ctx, st_ok.error());
  }
  if (::rename(tmp.c_str(), local.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    return fail(&ctx, sysError(err, "rename {} to {}", tmp, local).value());
  }
  return 0;
}

int cmdCp(Context& ctx, const std::string& src, const std::string& dst) {
  auto [src_id, src_path] = splitRemote(src);
  auto [dst_id, dst_path] = splitRemote(dst);
  if (src_id.empty() == dst_id.empty()) {
    fmt::print(stderr, "space: exactly one side of cp must be ID:/path (e.g. space cp ./a.py sb-1:/root/)\n");
    return 2;
  }
  if (!dst_id.empty()) return upload(ctx, src_path, dst_id, dst_path);
  return download(ctx, src_id, src_path, dst_path);
}

}  // namespace space::cli
