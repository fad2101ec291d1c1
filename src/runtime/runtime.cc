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

Status Runtime::handOver(Instance& inst, const HandOver& h) {
  if (h.env.empty()) return ok();
  agent::Identity identity;
  identity.env = h.env;
  return inst.agent->setIdentity(identity);
}

Status Runtime::renewIdentity(Instance& inst, const HandOver& h) { return handOver(inst, h); }

}  // namespace space::runtime
