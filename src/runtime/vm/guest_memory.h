// A VM's RAM as the host sees it: QEMU maps the template's memory file privately (copy-on-write), so
// the pages the guest wrote since the template are exactly the anonymous pages of that mapping. A VM
// snapshot stores only those (dirty relative to the template, docs/snapshots.md); a restore writes them
// back into a fresh VMM's mapping of the same template before its device state is loaded. The host reads
// and writes through /proc/<pid>/pagemap and /proc/<pid>/mem (root: CAP_SYS_PTRACE); QEMU is not asked.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"

namespace space::vm {

inline constexpr uint64_t kPageBytes = 4096;

// One bit per guest page.
class PageSet {
 public:
  PageSet() = default;
  explicit PageSet(uint64_t pages) : pages_(pages), words_((pages + 63) / 64, 0) {}
  uint64_t pages() const { return pages_; }
  void set(uint64_t i) { words_[i / 64] |= uint64_t{1} << (i % 64); }
  bool test(uint64_t i) const { return (words_[i / 64] >> (i % 64)) & 1; }
  uint64_t count() const;
  // Calls f(first, n) for every run of consecutive set pages.
  template <typename F>
  void forEachRun(F&& f) const {
    for (uint64_t i = 0; i < pages_;) {
      if (!test(i)) {
        ++i;
        continue;
      }
      uint64_t j = i;
      while (j < pages_ && test(j)) ++j;
      f(i, j - i);
      i = j;
    }
  }
  // Little-endian words, the page count implied by the expected size.
  std::string serialize() const;
  static Result<PageSet> parse(const std::string& bytes, uint64_t pages);

 private:
  uint64_t pages_ = 0;
  std::vector<uint64_t> words_;
};

// Where pid maps the file (by inode) that backs its guest RAM of `length` bytes.
struct RamMapping {
  uint64_t start = 0, length = 0;
};
Result<RamMapping> findRamMapping(pid_t pid, ino_t inode, uint64_t length);

// The pages of the mapping that hold data of their own (written since the file was mapped: copy-on-write
// copies, or swapped out) rather than the file's.
Result<PageSet> privatePages(pid_t pid, const RamMapping& ram);

// Writes the pages in `pages` of pid's mapping to out_fd at their offsets in the RAM; all-zero pages are
// left as holes (the PageSet says they are the guest's, not the file's). Returns the bytes written.
Result<uint64_t> saveGuestPages(pid_t pid, const RamMapping& ram, const PageSet& pages, int out_fd);
// The reverse: each page in `pages` is read from in_fd (holes read as zeros) into pid's mapping.
Status loadGuestPages(pid_t pid, const RamMapping& ram, const PageSet& pages, int in_fd);

}  // namespace space::vm
