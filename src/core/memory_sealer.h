// The vm tier's encryption at rest of snapshot memory with the customer's key: the node's per-tenant data
// key (archive/key_store.h, wrapped by snapshot_kek) seals each snapshot's guest pages into the archive
// format's sealed-file form (archive/archive.h sealFile).
#pragma once

#include <memory>
#include <string>

#include "common/result.h"
#include "runtime/vm/vm_runtime.h"

namespace space::core {

// Null when kek_spec is empty (no key configured). The KEK is resolved on each use, so a key file or
// command that changes (rotation) is followed.
std::shared_ptr<vm::MemorySealer> makeMemorySealer(const std::string& kek_spec, const std::string& keys_dir,
                                                  const std::string& tenant);

}  // namespace space::core
