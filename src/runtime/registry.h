// The node's isolation tiers by name ("jail", "vm"), as the manager sees them: each one a Runtime, or the
// reason this node cannot run it. The composition root (src/bin) fills it; nothing above it knows a
// concrete runtime.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/runtime.h"

namespace space::runtime {

class Registry {
 public:
  void add(std::unique_ptr<Runtime> runtime);
  // A tier this node does not run: why, and what is known of the host all the same (for the operator
  // who sets it up next).
  void addUnavailable(const std::string& name, std::string reason, nlohmann::json details = nlohmann::json::object());

  // Null when the node does not run the tier.
  Runtime* find(const std::string& name) const;
  // Why the tier cannot run sandboxes on this node (empty: it can).
  std::string unavailableReason(const std::string& name) const;
  // The tiers this node runs, in the order they were added.
  std::vector<Runtime*> all() const;
  // Every tier, run or not: {"<name>": {"available", "reason"?, "capabilities"?, …}}.
  nlohmann::json describe() const;

 private:
  struct Missing {
    std::string name, reason;
    nlohmann::json details;
  };
  std::vector<std::unique_ptr<Runtime>> runtimes_;
  std::vector<Missing> missing_;
};

}  // namespace space::runtime
