// Helpers for the archive tests: temporary directories, files with holes, byte-exact comparison.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "archive/kek.h"
#include "archive/key_store.h"

namespace space::archive::testing {

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/space-archive-test-XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string operator/(const std::string& name) const { return path + "/" + name; }
};

inline std::string randomBytes(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::string out(n, '\0');
  for (auto& c : out) c = static_cast<char>(gen());
  return out;
}

// Compressible but not constant: lines of text that differ by a counter.
inline std::string textBytes(size_t n, uint32_t seed) {
  std::string out;
  for (uint32_t i = 0; out.size() < n; ++i)
    out += "snapshot line " + std::to_string(seed) + ":" + std::to_string(i) + "\n";
  out.resize(n);
  return out;
}

inline void writeAt(const std::string& path, uint64_t offset, const std::string& data) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0) << path;
  ASSERT_EQ(pwrite(fd, data.data(), data.size(), static_cast<off_t>(offset)), static_cast<ssize_t>(data.size()));
  close(fd);
}

inline void makeSparse(const std::string& path, uint64_t size) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0) << path;
  ASSERT_EQ(ftruncate(fd, static_cast<off_t>(size)), 0);
  close(fd);
}

inline std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

inline void writeFile(const std::string& path, const std::string& data, mode_t mode = 0644) {
  std::filesystem::remove(path);
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  ASSERT_GE(fd, 0) << path;
  ASSERT_EQ(write(fd, data.data(), data.size()), static_cast<ssize_t>(data.size()));
  fchmod(fd, mode);
  close(fd);
}

// Compares two files 1 MiB at a time (files may be GiBs of holes).
inline bool sameContent(const std::string& a, const std::string& b) {
  std::ifstream fa(a, std::ios::binary), fb(b, std::ios::binary);
  if (!fa || !fb) return false;
  std::string ba(1 << 20, '\0'), bb(1 << 20, '\0');
  while (true) {
    fa.read(ba.data(), static_cast<std::streamsize>(ba.size()));
    fb.read(bb.data(), static_cast<std::streamsize>(bb.size()));
    if (fa.gcount() != fb.gcount()) return false;
    if (std::memcmp(ba.data(), bb.data(), static_cast<size_t>(fa.gcount())) != 0) return false;
    if (fa.gcount() == 0) return true;
  }
}

// Like sameContent for files of GiBs of holes: compares sizes, then every range that holds data in
// either file (holes read as zeros in both, so they need no reading).
inline bool sameSparseContent(const std::string& a, const std::string& b) {
  int fa = ::open(a.c_str(), O_RDONLY | O_CLOEXEC), fb = ::open(b.c_str(), O_RDONLY | O_CLOEXEC);
  struct stat sa, sb;
  bool same = fa >= 0 && fb >= 0 && fstat(fa, &sa) == 0 && fstat(fb, &sb) == 0 && sa.st_size == sb.st_size;
  for (int fd : {fa, fb}) {
    off_t pos = 0;
    while (same) {
      off_t data = lseek(fd, pos, SEEK_DATA);
      if (data < 0) break;
      off_t hole = lseek(fd, data, SEEK_HOLE);
      std::string x(static_cast<size_t>(hole - data), '\0'), y(x.size(), '\0');
      same = pread(fa, x.data(), x.size(), data) == static_cast<ssize_t>(x.size()) &&
             pread(fb, y.data(), y.size(), data) == static_cast<ssize_t>(y.size()) && x == y;
      pos = hole;
    }
  }
  if (fa >= 0) close(fa);
  if (fb >= 0) close(fb);
  return same;
}

inline uint64_t allocatedBytes(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return ~uint64_t{0};
  return static_cast<uint64_t>(st.st_blocks) * 512;
}

inline uint64_t fileSize(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return ~uint64_t{0};
  return static_cast<uint64_t>(st.st_size);
}

inline std::vector<std::string> listDir(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

inline void flipBit(const std::string& path, uint64_t offset, int bit) {
  int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  unsigned char c = 0;
  ASSERT_EQ(pread(fd, &c, 1, static_cast<off_t>(offset)), 1);
  c ^= static_cast<unsigned char>(1u << bit);
  ASSERT_EQ(pwrite(fd, &c, 1, static_cast<off_t>(offset)), 1);
  close(fd);
}

inline uint64_t le64(const std::string& bytes, size_t at) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t{static_cast<unsigned char>(bytes[at + i])} << (8 * i);
  return v;
}

inline std::unique_ptr<Kek> testKek(char fill) {
  auto kek = kekFromBytes(std::string(32, fill));
  EXPECT_TRUE(kek);
  return std::move(*kek);
}

}  // namespace space::archive::testing
