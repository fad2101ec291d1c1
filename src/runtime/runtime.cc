#include "runtime/runtime.h"

#include <filesystem>

namespace space::runtime {

Status Runtime::deleteSnapshot(const SnapshotRef& ref) {
  if (ref.path.empty()) return ok();
  std::error_code ec;
  std::filesystem::remove_all(ref.path, ec);
  if (ec) return sysError(ec.value(), "remove snapshot {}", ref.path);
  return ok();
}

}  // namespace space::runtime
