// space node: what this node offers (GET /v1/node): the isolation tiers with their accelerator and
// capabilities, the KVM probe behind the vm tier's accelerator, what auto picks, and whether egress is on.
// Every field may be missing (an older or newer spaced): what is absent is printed as not reported.
#include <fmt/format.h>

#include <algorithm>
#include <optional>

#include "cli/commands.h"
#include "cli/context.h"

namespace space::cli {
namespace {

using nlohmann::json;

// The daemon's JSON is read without trusting its types: a field of the wrong type counts as absent.
const json* field(const json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

std::string text(const json& j, const char* key) {
  const json* v = field(j, key);
  if (!v) return "";
  return v->is_string() ? v->get<std::string>() : v->dump();
}

std::optional<bool> flag(const json& j, const char* key) {
  const json* v = field(j, key);
  if (!v || !v->is_boolean()) return std::nullopt;
  return v->get<bool>();
}

// "pause, snapshot, memory snapshot, rollback, fork": the capabilities that are true, known ones first in
// this order, then any the CLI does not know yet under their own names.
std::string capabilitiesText(const json& tier) {
  static const std::vector<std::pair<std::string, std::string>> kKnown = {{"pause", "pause"},
                                                                          {"snapshot_filesystem", "snapshot"},
                                                                          {"snapshot_memory", "memory snapshot"},
                                                                          {"rollback", "rollback"},
                                                                          {"fork", "fork"}};
  const json* caps = field(tier, "capabilities");
  if (!caps || !caps->is_object()) return "";
  std::vector<std::string> names;
  for (const auto& [key, label] : kKnown) {
    if (flag(*caps, key.c_str()).value_or(false)) names.push_back(label);
  }
  for (const auto& item : caps->items()) {
    const std::string& key = item.key();
    const json& value = item.value();
    bool known = std::any_of(kKnown.begin(), kKnown.end(), [&](const auto& k) { return k.first == key; });
    if (known || !value.is_boolean() || !value.get<bool>()) continue;
    std::string label = key;
    std::replace(label.begin(), label.end(), '_', ' ');
    names.push_back(label);
  }
  return fmt::format("{}", fmt::join(names, ", "));
}

std::vector<std::string> tierRow(const std::string& name, const json& tier) {
  std::optional<bool> available = flag(tier, "available");
  std::string accel = text(tier, "accel");
  if (accel.empty()) accel = "-";
  if (!available) return {name, "?", accel, "availability not reported by the daemon"};
  if (!*available) {
    std::string reason = text(tier, "reason");
    return {name, "no", "-", reason.empty() ? "the daemon gave no reason" : reason};
  }
  std::string caps = capabilitiesText(tier);
  return {name, "yes", accel, caps.empty() ? "-" : caps};
}

// "kvm: not used: <reason> (mode auto; probed <time> in 20013 ms; cached result)". The accelerator
// column says tcg; this line says why KVM is not behind it.
std::string kvmLine(const json& vm) {
  const json* kvm = field(vm, "kvm");
  if (!kvm || !kvm->is_object()) return "";
  std::string state = text(*kvm, "state");
  std::string reason = text(*kvm, "reason");
  bool in_use = text(vm, "accel") == "kvm" && flag(vm, "available").value_or(false);
  std::string status;
  if (state == "proven") {
    status = in_use ? "in use" : "proven, but not used";
  } else if (state == "probing") {
    status = "being probed";
  } else if (state == "failed" || state == "absent" || state == "off") {
    status = "not used";
    if (reason.empty()) {
      reason = state == "failed"   ? "the probe failed"
               : state == "absent" ? "no usable /dev/kvm"
                                   : "turned off in the daemon's configuration";
    }
  } else {
    status = state.empty() ? "state not reported" : state;
  }
  std::vector<std::string> details;
  if (std::string mode = text(*kvm, "mode"); !mode.empty()) details.push_back("mode " + mode);
  std::string checked_at = text(*kvm, "checked_at");
  std::string probe_ms = text(*kvm, "probe_ms");
  if (!checked_at.empty() || !probe_ms.empty()) {
    std::string probed = "probed";
    if (!checked_at.empty()) probed += " " + checked_at;
    if (!probe_ms.empty()) probed += " in " + probe_ms + " ms";
    details.push_back(probed);
  }
  if (flag(*kvm, "cached").value_or(false)) details.push_back("cached result");
  std::string line = "kvm: " + status;
  if (!reason.empty()) line += ": " + reason;
  if (!details.empty()) line += fmt::format(" ({})", fmt::join(details, "; "));
  return line;
}

std::string egressLine(const json& node) {
  const json* egress = field(node, "egress");
  if (!egress) return "egress: not reported by the daemon";
  std::optional<bool> on = flag(*egress, "on");
  if (!on) return "egress: state not reported by the daemon";
  if (*on) return "egress: on";
  std::string reason = text(*egress, "reason");
  return "egress: off: " + (reason.empty() ? std::string("the daemon gave no reason") : reason);
}

}  // namespace

std::string nodeText(const json& node) {
  const json* isolation = field(node, "isolation");
  static const json kNone = json::object();
  const json& tiers = isolation && isolation->is_object() ? *isolation : kNone;
  std::vector<std::vector<std::string>> rows;
  // jail and vm first, then tiers this CLI does not know yet.
  for (const char* name : {"jail", "vm"}) {
    if (const json* tier = field(tiers, name)) rows.push_back(tierRow(name, *tier));
  }
  for (const auto& [name, tier] : tiers.items()) {
    if (name != "jail" && name != "vm" && tier.is_object()) rows.push_back(tierRow(name, tier));
  }
  std::string out;
  if (rows.empty()) {
    out += "isolation tiers: not reported by the daemon\n";
  } else {
    out += formatTable({"TIER", "AVAILABLE", "ACCEL", "NOTES"}, rows);
  }
  if (const json* vm = field(tiers, "vm")) {
    if (std::string kvm = kvmLine(*vm); !kvm.empty()) out += kvm + "\n";
  }
  std::string pick = text(tiers, "auto");
  out += "auto isolation: " + (pick.empty() ? std::string("not reported by the daemon") : pick) + "\n";
  out += egressLine(node) + "\n";
  return out;
}

int cmdNode(Context& ctx) {
  auto j = callJson(ctx, "GET", "/v1/node");
  if (!j) return fail(&ctx, j.error());
  if (ctx.json) {
    fmt::print("{}\n", j->dump(2));
    return 0;
  }
  fmt::print("{}", nodeText(*j));
  return 0;
}

int cmdNodeDrain(Context& ctx, bool delete_sandboxes) {
  auto j = callJson(ctx, "POST", "/v1/node/drain", json{{"delete_sandboxes", delete_sandboxes}});
  if (!j) return fail(&ctx, j.error());
  if (ctx.json) {
    fmt::print("{}\n", j->dump(2));
    return 0;
  }
  fmt::print("draining: new creates and forks are refused until spaced restarts\n");
  fmt::print("removed {} pooled and {} other sandboxes; {} left\n", j->value("pooled_removed", 0),
             j->value("sandboxes_removed", 0), j->value("sandboxes_left", 0));
  if (j->value("sandboxes_left", 0) == 0) fmt::print("a stop of spaced now leaves nothing behind\n");
  return j->contains("errors") ? 1 : 0;
}

}  // namespace space::cli
