#include "runtime/registry.h"

namespace space::runtime {

void Registry::add(std::unique_ptr<Runtime> runtime) { runtimes_.push_back(std::move(runtime)); }

void Registry::addUnavailable(const std::string& name, std::string reason, nlohmann::json details) {
  missing_.push_back({name, std::move(reason), std::move(details)});
}

Runtime* Registry::find(const std::string& name) const {
  for (const auto& rt : runtimes_)
    if (rt->name() == name) return rt.get();
  return nullptr;
}

std::string Registry::unavailableReason(const std::string& name) const {
  if (const Runtime* rt = find(name)) return rt->unavailableReason();
  for (const auto& m : missing_)
    if (m.name == name) return m.reason;
  return "this node has no " + name + " runtime";
}

std::vector<Runtime*> Registry::all() const {
  std::vector<Runtime*> out;
  for (const auto& rt : runtimes_) out.push_back(rt.get());
  return out;
}

nlohmann::json Registry::describe() const {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& rt : runtimes_) {
    nlohmann::json tier = {{"available", true}};
    if (std::string why = rt->unavailableReason(); !why.empty()) {
      tier["available"] = false;
      tier["reason"] = why;
    }
    tier.update(rt->describe());
    tier["capabilities"] = rt->capabilities().toJson();
    out[rt->name()] = std::move(tier);
  }
  for (const auto& m : missing_) {
    nlohmann::json tier = {{"available", false}, {"reason", m.reason}};
    tier.update(m.details);
    out[m.name] = std::move(tier);
  }
  return out;
}

}  // namespace space::runtime
