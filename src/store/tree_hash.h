// Content hash of a filesystem tree: the identity of a template. Two trees hash the same exactly when a
// sandbox could not tell them apart: same paths, types, modes, owners, sizes, contents, symlink targets,
// device numbers, hard-link structure and extended attributes (file capabilities live there). Timestamps
// are left out on purpose, so rebuilding identical content reuses the stored copy.
#pragma once

#include <cstdint>
#include <string>

#include "common/result.h"

namespace space::store {

struct TreeDigest {
  std::string hex;          // SHA-256 of the manifest, lowercase hex
  uint64_t size_bytes = 0;  // sum of regular file sizes, each hard-linked file counted once
  uint64_t entries = 0;     // directory entries walked, the root included
};

// Walks `root` without following symlinks, children in byte order of their names, and hashes one manifest
// record per entry. The walk opens every file with O_NOFOLLOW relative to its parent, so it never leaves
// the tree.
Result<TreeDigest> hashTree(const std::string& root);

}  // namespace space::store
