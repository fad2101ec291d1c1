#include "archive/durable_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/hex.h"
#include "crypto/aes_gcm.h"

namespace space::archive {

std::string parentDir(const std::string& path) {
  auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

Status fsyncPath(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return sysError(errno, "open {} for fsync", path);
  if (fsync(fd.get()) < 0) return sysError(errno, "fsync {}", path);
  return ok();
}

Status writeAll(int fd, std::string_view data, const std::string& what) {
  while (!data.empty()) {
    ssize_t w = write(fd, data.data(), data.size());
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return sysError(errno, "write {}", what);
    data.remove_prefix(static_cast<size_t>(w));
  }
  return ok();
}

Status preadExact(int fd, uint64_t offset, size_t n, std::string& out, const std::string& what) {
  out.resize(n);
  size_t got = 0;
  while (got < n) {
    ssize_t r = pread(fd, out.data() + got, n - got, static_cast<off_t>(offset + got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return sysError(errno, "read {} at {}", what, offset + got);
    if (r == 0)
      return makeError(ErrorKind::kInvalidArgument, "{} ends at {}, before {} bytes at {}", what, offset + got, n,
                       offset);
    got += static_cast<size_t>(r);
  }
  return ok();
}

namespace {

// ".<name>.tmp-<random>" beside the final name: hidden, unique, on the same filesystem for rename.
Result<std::string> tempNameFor(const std::string& final_path) {
  std::string rnd;
  TRY(crypto::randomBytes(rnd, 8));
  auto slash = final_path.rfind('/');
  std::string base = slash == std::string::npos ? final_path : final_path.substr(slash + 1);
  return fmt::format("{}/.{}.tmp-{}", parentDir(final_path), base, toHex(rnd));
}

}  // namespace

Result<AtomicFile> AtomicFile::create(std::string final_path, mode_t mode) {
  AtomicFile f;
  f.final_path_ = std::move(final_path);
  std::string dir = parentDir(f.final_path_);
  f.fd_ = UniqueFd(::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, mode));
  if (!f.fd_ && (errno == EOPNOTSUPP || errno == EISDIR)) {
    // No O_TMPFILE here: a hidden, uniquely named file, removed unless committed.
    ASSIGN_OR_RETURN(f.temp_path_, tempNameFor(f.final_path_));
    f.fd_ = UniqueFd(::open(f.temp_path_.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC | O_NOFOLLOW, mode));
    if (!f.fd_) return sysError(errno, "create {}", f.temp_path_);
  } else if (!f.fd_) {
    return sysError(errno, "create an unnamed file in {}", dir);
  }
  // O_TMPFILE applies the umask; the caller's mode is what it asked for.
  if (fchmod(f.fd_.get(), mode) < 0) return sysError(errno, "chmod new {}", f.final_path_);
  return f;
}

AtomicFile::~AtomicFile() {
  if (!committed_ && !temp_path_.empty()) unlink(temp_path_.c_str());
}

Status AtomicFile::commit() { return commitAs(true); }
Status AtomicFile::commitNoReplace() { return commitAs(false); }

Status AtomicFile::commitAs(bool replace) {
  if (fsync(fd_.get()) < 0) return sysError(errno, "fsync {}", final_path_);
  std::string proc = fmt::format("/proc/self/fd/{}", fd_.get());
  if (!replace) {
    // link(2) never replaces: the name is taken only when nobody holds it.
    int rc = temp_path_.empty() ? linkat(AT_FDCWD, proc.c_str(), AT_FDCWD, final_path_.c_str(), AT_SYMLINK_FOLLOW)
                                : link(temp_path_.c_str(), final_path_.c_str());
    if (rc < 0) return sysError(errno, "name the new {}", final_path_);
    if (!temp_path_.empty()) unlink(temp_path_.c_str());
    temp_path_.clear();
    committed_ = true;
    return fsyncPath(parentDir(final_path_));
  }
  if (temp_path_.empty()) {
    // linkat cannot replace an existing name: link under a unique temporary name, then rename over.
    ASSIGN_OR_RETURN(temp_path_, tempNameFor(final_path_));
    if (linkat(AT_FDCWD, proc.c_str(), AT_FDCWD, temp_path_.c_str(), AT_SYMLINK_FOLLOW) < 0) {
      int err = errno;
      temp_path_.clear();
      return sysError(err, "name the new {}", final_path_);
    }
  }
  if (rename(temp_path_.c_str(), final_path_.c_str()) < 0)
    return sysError(errno, "rename {} to {}", temp_path_, final_path_);
  committed_ = true;
  return fsyncPath(parentDir(final_path_));
}

Status writeFileAtomic(const std::string& path, std::string_view data, mode_t mode, bool replace) {
  ASSIGN_OR_RETURN(auto file, AtomicFile::create(path, mode));
  TRY(writeAll(file.fd(), data, path));
  return replace ? file.commit() : file.commitNoReplace();
}

}  // namespace space::archive
