// The local side of `space cp -r`: a directory packed into a tar stream for the daemon, and a tar stream
// from the daemon unpacked under a directory. What comes from a sandbox is untrusted: unpacking refuses
// absolute names, ".." and writes through symlinks (libarchive's secure extraction flags).
#pragma once

#include <cstdint>
#include <string>

#include "common/result.h"

namespace space::cli {

// Writes the tree under root (a directory) to fd, names relative to root; symlinks stay symlinks.
Status packLocalTree(const std::string& root, int fd);

struct UnpackCounts {
  uint64_t entries = 0;
};
// Reads a tar stream from fd and makes its entries under dest. With strip_top, the first name component
// ("dir/" of "dir/a/b") is dropped, so dest itself takes the archived directory's place.
Result<UnpackCounts> unpackTree(int fd, const std::string& dest, bool strip_top);

}  // namespace space::cli
