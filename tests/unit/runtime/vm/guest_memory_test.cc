#include "runtime/vm/guest_memory.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

#include "common/unique_fd.h"

namespace space::vm {
namespace {

constexpr uint64_t kPages = 64;

// A "template" memfd with a pattern, mapped privately as QEMU maps guest RAM.
struct PrivateMapping {
  UniqueFd file;
  char* base = nullptr;
  uint64_t len = kPages * kPageBytes;
  PrivateMapping() {
    file.reset(memfd_create("space-test-ram", MFD_CLOEXEC));
    EXPECT_EQ(ftruncate(file.get(), static_cast<off_t>(len)), 0);
    std::string page(kPageBytes, 'T');
    for (uint64_t i = 0; i < kPages; i += 2)
      EXPECT_EQ(pwrite(file.get(), page.data(), page.size(), static_cast<off_t>(i * kPageBytes)),
                static_cast<ssize_t>(page.size()));
    base = static_cast<char*>(mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE, file.get(), 0));
    EXPECT_NE(base, MAP_FAILED);
  }
  ~PrivateMapping() { munmap(base, len); }
  ino_t inode() const {
    struct stat st;
    fstat(file.get(), &st);
    return st.st_ino;
  }
};

TEST(PageSet, RoundTripsAndRejectsWrongSizes) {
  PageSet s(100);
  s.set(0);
  s.set(63);
  s.set(64);
  s.set(99);
  EXPECT_EQ(s.count(), 4u);
  auto back = PageSet::parse(s.serialize(), 100);
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_TRUE(back->test(63) && back->test(64) && back->test(99));
  EXPECT_FALSE(back->test(1));
  EXPECT_FALSE(PageSet::parse(s.serialize(), 200));
  std::string bits = s.serialize();
  bits.back() = '\xff';  // bits past page 99
  EXPECT_FALSE(PageSet::parse(bits, 100));
  std::vector<std::pair<uint64_t, uint64_t>> runs;
  s.forEachRun([&](uint64_t first, uint64_t n) { runs.emplace_back(first, n); });
  EXPECT_EQ(runs, (std::vector<std::pair<uint64_t, uint64_t>>{{0, 1}, {63, 2}, {99, 1}}));
}

// Read pages stay the file's; written pages (copy-on-write) are the process's own — the pages a VM
// snapshot stores. A child process plays the VMM so that the host side reads another process's memory.
TEST(GuestMemory, FindsWrittenPagesAndCopiesThemIntoAnotherMapping) {
  PrivateMapping src;
  volatile char sink = 0;
  for (uint64_t i = 0; i < kPages; ++i) sink = sink + src.base[i * kPageBytes];  // read every page
  src.base[3 * kPageBytes] = 'A';
  src.base[4 * kPageBytes + 100] = 'B';
  memset(src.base + 10 * kPageBytes, 0, kPageBytes);  // written, but zero: still the guest's page
  int ready[2], done[2];
  ASSERT_EQ(pipe(ready), 0);
  ASSERT_EQ(pipe(done), 0);
  pid_t child = fork();
  if (child == 0) {
    char c = 1;
    (void)!write(ready[1], &c, 1);
    (void)!read(done[0], &c, 1);
    _exit(0);
  }
  char c;
  ASSERT_EQ(read(ready[0], &c, 1), 1);

  auto ram = findRamMapping(child, src.inode(), src.len);
  ASSERT_TRUE(ram) << ram.error().message;
  auto pages = privatePages(child, *ram);
  ASSERT_TRUE(pages) << pages.error().message;
  EXPECT_EQ(pages->count(), 3u);
  EXPECT_TRUE(pages->test(3) && pages->test(4) && pages->test(10));

  UniqueFd out(memfd_create("space-test-snapshot", MFD_CLOEXEC));
  auto written = saveGuestPages(child, *ram, *pages, out.get());
  ASSERT_TRUE(written) << written.error().message;
  EXPECT_EQ(*written, 2 * kPageBytes);  // the zero page is a hole

  // Restore into a fresh private mapping of the same "template" (here: in this process).
  PrivateMapping dst;
  auto dst_ram = findRamMapping(getpid(), dst.inode(), dst.len);
  ASSERT_TRUE(dst_ram) << dst_ram.error().message;
  ASSERT_TRUE(loadGuestPages(getpid(), *dst_ram, *pages, out.get()));
  EXPECT_EQ(dst.base[3 * kPageBytes], 'A');  // a hole of the template before
  EXPECT_EQ(dst.base[4 * kPageBytes + 100], 'B');
  EXPECT_EQ(dst.base[4 * kPageBytes], 'T');
  EXPECT_EQ(dst.base[10 * kPageBytes], 0);  // was 'T' in the template
  EXPECT_EQ(dst.base[12 * kPageBytes], 'T');
  char t = 0;
  EXPECT_EQ(pread(dst.file.get(), &t, 1, 4 * kPageBytes + 100), 1);
  EXPECT_EQ(t, 'T');  // the template never changes
  (void)!write(done[1], &c, 1);
  waitpid(child, nullptr, 0);
  for (int fd : {ready[0], ready[1], done[0], done[1]}) close(fd);
}

}  // namespace
}  // namespace space::vm
