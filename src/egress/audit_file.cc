#include "egress/audit_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>

namespace space::egress {

namespace {

Result<UniqueFd> openForAppend(const std::string& path, uint64_t* size) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600));
  if (!fd) return sysError(errno, "open audit log {}", path);
  struct stat st {};
  if (fstat(fd.get(), &st) < 0) return sysError(errno, "stat audit log {}", path);
  *size = uint64_t(st.st_size);
  return fd;
}

}  // namespace

Result<std::unique_ptr<AuditFile>> AuditFile::open(const std::string& path, uint64_t max_total_bytes) {
  std::unique_ptr<AuditFile> f(new AuditFile);
  f->path_ = path;
  f->cap_ = max_total_bytes;
  if (path == "-") {
    f->fd_ = STDOUT_FILENO;
  } else if (!path.empty()) {
    ASSIGN_OR_RETURN(f->owned_, openForAppend(path, &f->size_));
    f->fd_ = f->owned_.get();
    f->regular_ = true;
  }
  return f;
}

Status AuditFile::rotate() {
  // rename() replaces the previous .1 in one step: there is never a third file, and a reader holding the
  // old file keeps reading it to its end.
  std::string older = path_ + ".1";
  if (::rename(path_.c_str(), older.c_str()) < 0) return sysError(errno, "rotate audit log {} to {}", path_, older);
  uint64_t size = 0;
  ASSIGN_OR_RETURN(owned_, openForAppend(path_, &size));
  fd_ = owned_.get();
  size_ = size;
  ++rotations_;
  return ok();
}

Status AuditFile::append(std::string_view line) {
  if (fd_ < 0) return ok();
  // Each file holds at most half the cap, so the current one and its predecessor together hold at most
  // the cap (a single line longer than half the cap still goes out whole, into a fresh file).
  if (regular_ && cap_ && size_ > 0 && size_ + line.size() > cap_ / 2) TRY(rotate());
  size_t done = 0;
  while (done < line.size()) {
    ssize_t n = ::write(fd_, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int err = n < 0 ? errno : EIO;
      // A half-written line would glue itself to the next one; take it back.
      if (regular_ && done > 0 && ::ftruncate(fd_, off_t(size_)) < 0) size_ += done;
      return sysError(err, "write audit log {}", path_);
    }
    done += size_t(n);
  }
  size_ += done;
  return ok();
}

}  // namespace space::egress
