// Encryption at rest of the guest memory in VM snapshots, with the customer's key (set by the composition
// root when snapshot_kek is configured; docs/snapshot-archive.md). Paths name whole files; seal and open
// replace their output atomically.
#pragma once

#include <string>

#include "common/result.h"

namespace space::runtime {

class MemorySealer {
 public:
  virtual ~MemorySealer() = default;
  virtual Status seal(const std::string& plain_path, const std::string& sealed_path) = 0;
  virtual Status open(const std::string& sealed_path, const std::string& plain_path) = 0;
};

}  // namespace space::runtime
