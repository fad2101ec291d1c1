#include "runtime/vm/guest_memory.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/unique_fd.h"

namespace space::vm {

namespace {

constexpr uint64_t kPresent = uint64_t{1} << 63;
constexpr uint64_t kSwapped = uint64_t{1} << 62;
constexpr uint64_t kFileOrShared = uint64_t{1} << 61;
constexpr uint64_t kChunkPages = 256;  // 1 MiB per read or write

Status preadAll(int fd, char* buf, size_t len, off_t off, const char* what) {
  while (len > 0) {
    ssize_t n = pread(fd, buf, len, off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return sysError(errno, "{}", what);
    if (n == 0) {  // past the end of a sparse file: zeros
      memset(buf, 0, len);
      return ok();
    }
    buf += n;
    len -= static_cast<size_t>(n);
    off += n;
  }
  return ok();
}

Status pwriteAll(int fd, const char* buf, size_t len, off_t off, const char* what) {
  while (len > 0) {
    ssize_t n = pwrite(fd, buf, len, off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return sysError(n < 0 ? errno : EIO, "{}", what);
    buf += n;
    len -= static_cast<size_t>(n);
    off += n;
  }
  return ok();
}

bool allZero(const char* p, size_t n) {
  static const char zeros[kPageBytes] = {};
  for (size_t off = 0; off < n; off += kPageBytes)
    if (memcmp(p + off, zeros, std::min<size_t>(kPageBytes, n - off)) != 0) return false;
  return true;
}

}  // namespace

uint64_t PageSet::count() const {
  uint64_t n = 0;
  for (uint64_t w : words_) n += static_cast<uint64_t>(__builtin_popcountll(w));
  return n;
}

std::string PageSet::serialize() const {
  std::string out(words_.size() * 8, '\0');
  for (size_t i = 0; i < words_.size(); ++i)
    for (int b = 0; b < 8; ++b) out[i * 8 + b] = static_cast<char>((words_[i] >> (8 * b)) & 0xff);
  return out;
}

Result<PageSet> PageSet::parse(const std::string& bytes, uint64_t pages) {
  PageSet s(pages);
  if (bytes.size() != s.words_.size() * 8)
    return makeError(ErrorKind::kInvalidArgument, "page set: {} bytes, expected {} for {} pages", bytes.size(),
                     s.words_.size() * 8, pages);
  for (size_t i = 0; i < s.words_.size(); ++i) {
    uint64_t w = 0;
    for (int b = 0; b < 8; ++b) w |= uint64_t{static_cast<unsigned char>(bytes[i * 8 + b])} << (8 * b);
    s.words_[i] = w;
  }
  if (pages % 64 && (s.words_.back() >> (pages % 64)))
    return makeError(ErrorKind::kInvalidArgument, "page set: bits beyond page {}", pages);
  return s;
}

Result<RamMapping> findRamMapping(pid_t pid, ino_t inode, uint64_t length) {
  std::ifstream maps("/proc/" + std::to_string(pid) + "/maps");
  if (!maps) return sysError(errno ? errno : ESRCH, "read /proc/{}/maps", pid);
  std::string line;
  while (std::getline(maps, line)) {
    // start-end perms offset dev inode path
    std::istringstream in(line);
    std::string range, perms, offset, dev;
    uint64_t ino = 0;
    if (!(in >> range >> perms >> offset >> dev >> ino)) continue;
    if (ino != static_cast<uint64_t>(inode) || std::stoull(offset, nullptr, 16) != 0) continue;
    size_t dash = range.find('-');
    if (dash == std::string::npos) continue;
    uint64_t start = std::stoull(range.substr(0, dash), nullptr, 16);
    uint64_t end = std::stoull(range.substr(dash + 1), nullptr, 16);
    if (end - start == length) return RamMapping{start, length};
  }
  return makeError(ErrorKind::kNotFound, "process {} maps no {}-byte guest RAM of inode {}", pid, length, inode);
}

Result<PageSet> privatePages(pid_t pid, const RamMapping& ram) {
  std::string path = "/proc/" + std::to_string(pid) + "/pagemap";
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return sysError(errno, "open {}", path);
  uint64_t pages = ram.length / kPageBytes;
  PageSet out(pages);
  std::vector<uint64_t> entries(4096);
  for (uint64_t i = 0; i < pages;) {
    uint64_t n = std::min<uint64_t>(entries.size(), pages - i);
    TRY(preadAll(fd.get(), reinterpret_cast<char*>(entries.data()), n * 8,
                 static_cast<off_t>((ram.start / kPageBytes + i) * 8), "read pagemap"));
    for (uint64_t k = 0; k < n; ++k) {
      uint64_t e = entries[k];
      if ((e & kSwapped) || ((e & kPresent) && !(e & kFileOrShared))) out.set(i + k);
    }
    i += n;
  }
  return out;
}

Result<uint64_t> saveGuestPages(pid_t pid, const RamMapping& ram, const PageSet& pages, int out_fd) {
  std::string path = "/proc/" + std::to_string(pid) + "/mem";
  UniqueFd mem(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!mem) return sysError(errno, "open {}", path);
  if (ftruncate(out_fd, static_cast<off_t>(ram.length)) < 0) return sysError(errno, "size guest memory file");
  std::vector<char> buf(kChunkPages * kPageBytes);
  uint64_t written = 0;
  Status status = ok();
  pages.forEachRun([&](uint64_t first, uint64_t n) {
    for (uint64_t p = first; status && p < first + n;) {
      uint64_t k = std::min(kChunkPages, first + n - p);
      size_t len = static_cast<size_t>(k * kPageBytes);
      status =
          preadAll(mem.get(), buf.data(), len, static_cast<off_t>(ram.start + p * kPageBytes), "read guest memory");
      if (!status) break;
      // Page by page: zero pages stay holes.
      for (uint64_t q = 0; status && q < k; ++q) {
        const char* page = buf.data() + q * kPageBytes;
        if (allZero(page, kPageBytes)) continue;
        status = pwriteAll(out_fd, page, kPageBytes, static_cast<off_t>((p + q) * kPageBytes), "write guest memory");
        written += kPageBytes;
      }
      p += k;
    }
  });
  if (!status) return tl::unexpected(status.error());
  return written;
}

Status loadGuestPages(pid_t pid, const RamMapping& ram, const PageSet& pages, int in_fd) {
  std::string path = "/proc/" + std::to_string(pid) + "/mem";
  UniqueFd mem(open(path.c_str(), O_RDWR | O_CLOEXEC));
  if (!mem) return sysError(errno, "open {}", path);
  std::vector<char> buf(kChunkPages * kPageBytes);
  Status status = ok();
  pages.forEachRun([&](uint64_t first, uint64_t n) {
    for (uint64_t p = first; status && p < first + n;) {
      uint64_t k = std::min(kChunkPages, first + n - p);
      size_t len = static_cast<size_t>(k * kPageBytes);
      status = preadAll(in_fd, buf.data(), len, static_cast<off_t>(p * kPageBytes), "read guest memory file");
      if (status)
        status =
            pwriteAll(mem.get(), buf.data(), len, static_cast<off_t>(ram.start + p * kPageBytes), "write guest memory");
      p += k;
    }
  });
  return status;
}

}  // namespace space::vm
