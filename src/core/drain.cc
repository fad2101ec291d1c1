// Taking a node out of service: a drain refuses new work and empties the pools (and, when asked, deletes
// every sandbox); a clean stop of a node with no sandbox left gives back everything node-wide, so that
// nothing of SPACE stays mounted, in the cgroup trees or in nftables (docs/operations.md).
#include <spdlog/spdlog.h>

#include "core/manager_impl.h"

namespace space::core {

Result<nlohmann::json> Manager::drain(bool delete_sandboxes) {
  draining_ = true;
  std::vector<Started> pooled = pool_.drain();
  size_t pool_removed = 0;
  for (auto& s : pooled) {
    if (auto st = destroyRecord(s.record); st)
      ++pool_removed;
    else
      spdlog::warn("drain: delete pooled sandbox {}: {}", s.record.id, st.error().message);
  }
  // Pooled rows a reconcile adopted without a place in the pool (or that an earlier drain left).
  store::SandboxFilter all;
  all.include_pooled = true;
  ASSIGN_OR_RETURN(auto rows, store_->listSandboxes(all));
  size_t removed = 0;
  std::vector<std::string> failed;
  for (auto& rec : rows) {
    if (!rec.pooled && !delete_sandboxes) continue;
    auto st = destroyRecord(rec);
    if (st && rec.pooled)
      ++pool_removed;
    else if (st)
      ++removed;
    else
      failed.push_back(rec.id + ": " + st.error().message);
  }
  ASSIGN_OR_RETURN(auto left, store_->listSandboxes(store::SandboxFilter{}));
  nlohmann::json out = {{"draining", true},
                        {"pooled_removed", pool_removed},
                        {"sandboxes_removed", removed},
                        {"sandboxes_left", left.size()}};
  if (!failed.empty()) out["errors"] = failed;
  spdlog::info("drain: {}", out.dump());
  return out;
}

nlohmann::json Manager::releaseIfIdle() {
  nlohmann::json released = nlohmann::json::object();
  stopping_ = true;
  auto fill = pool_.stop();  // no pool start is in flight, and none begins
  store::SandboxFilter all;
  all.include_pooled = true;
  auto rows = store_->listSandboxes(all);
  if (!rows || !rows->empty()) {
    released["kept"] = rows ? fmt::format("{} sandboxes run on (reattached at the next start)", rows->size())
                            : "the database cannot be read: " + rows.error().message;
    return released;
  }
  auto note = [&](const std::string& what, const Status& st) { released[what] = st ? "released" : st.error().message; };
  for (runtime::Runtime* rt : runtimes_.all()) note(rt->name(), rt->releaseNode());
  if (egress_.on()) note("egress", egress_.stopGateway());
  return released;
}

}  // namespace space::core
