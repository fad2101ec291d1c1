#include "archive/sparse_file.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "archive/durable_file.h"

namespace space::archive {

bool isAllZero(std::string_view data) {
  static const char kZeros[kSparseBlock] = {};
  while (data.size() >= kSparseBlock) {
    if (std::memcmp(data.data(), kZeros, kSparseBlock) != 0) return false;
    data.remove_prefix(kSparseBlock);
  }
  return std::memcmp(data.data(), kZeros, data.size()) == 0;
}

Status forEachDataChunk(int fd, uint64_t size, size_t chunk_size, const std::string& what, const ChunkFn& fn) {
  std::string window;
  uint64_t next = 0;  // the first window offset not yet visited
  while (next < size) {
    off_t data = lseek(fd, static_cast<off_t>(next), SEEK_DATA);
    if (data < 0 && errno == ENXIO) break;  // only a hole remains
    if (data < 0) return sysError(errno, "lseek SEEK_DATA {} at {}", what, next);
    off_t hole = lseek(fd, data, SEEK_HOLE);
    if (hole < 0) return sysError(errno, "lseek SEEK_HOLE {} at {}", what, data);
    uint64_t end = std::min<uint64_t>(static_cast<uint64_t>(hole), size);
    for (uint64_t w = static_cast<uint64_t>(data) / chunk_size * chunk_size; w < end; w += chunk_size) {
      if (w < next) continue;  // already visited with the previous extent
      size_t n = static_cast<size_t>(std::min<uint64_t>(chunk_size, size - w));
      TRY(preadExact(fd, w, n, window, what));
      if (!isAllZero(window)) TRY(fn(w, window));
      next = w + n;
    }
    next = std::max(next, end);
  }
  return ok();
}

Status writeSparse(int fd, uint64_t offset, std::string_view data, const std::string& what) {
  size_t pos = 0;
  while (pos < data.size()) {
    // Skip a run of zero blocks, then write the following run of non-zero blocks in one pwrite.
    size_t block = std::min(kSparseBlock, data.size() - pos);
    if (isAllZero(data.substr(pos, block))) {
      pos += block;
      continue;
    }
    size_t run_end = pos + block;
    while (run_end < data.size()) {
      size_t b = std::min(kSparseBlock, data.size() - run_end);
      if (isAllZero(data.substr(run_end, b))) break;
      run_end += b;
    }
    std::string_view run = data.substr(pos, run_end - pos);
    uint64_t at = offset + pos;
    while (!run.empty()) {
      ssize_t w = pwrite(fd, run.data(), run.size(), static_cast<off_t>(at));
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) return sysError(errno, "write {} at {}", what, at);
      run.remove_prefix(static_cast<size_t>(w));
      at += static_cast<uint64_t>(w);
    }
    pos = run_end;
  }
  return ok();
}

}  // namespace space::archive
