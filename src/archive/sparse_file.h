// Reading and writing files with holes. Snapshot disks are sparse images of several GiB holding little
// data, and VM memory is mostly zero pages: neither may cost its apparent size to export or import.
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>

#include "common/result.h"

namespace space::archive {

inline constexpr size_t kSparseBlock = 4096;  // the granularity of holes written on import

bool isAllZero(std::string_view data);

// Calls fn for every chunk-aligned window [k*chunk, min((k+1)*chunk, size)) of the file that holds a
// byte other than zero, in order. Holes are skipped with SEEK_DATA/SEEK_HOLE without being read;
// windows read as zeros are skipped too. One window is in memory at a time.
using ChunkFn = std::function<Status(uint64_t offset, std::string_view data)>;
Status forEachDataChunk(int fd, uint64_t size, size_t chunk_size, const std::string& what, const ChunkFn& fn);

// pwrite()s data at offset, leaving every all-zero aligned kSparseBlock of it unwritten (a hole, in a
// file already sized with ftruncate).
Status writeSparse(int fd, uint64_t offset, std::string_view data, const std::string& what);

}  // namespace space::archive
