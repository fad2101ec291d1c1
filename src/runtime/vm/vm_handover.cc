// What a VM is given when it is handed out or rolled back: a guest restored from memory is a copy of
// another machine, so its identity is made anew before anyone runs code in it (SECURITY.md V4, V9).
#include <algorithm>
#include <random>

#include "common/hex.h"
#include "common/ids.h"
#include "runtime/host/network.h"
#include "runtime/vm/vm_runtime.h"

namespace space::vm {
namespace {

std::string randomHexBytes(size_t n) {
  std::random_device rd;
  std::vector<unsigned char> bytes(n);
  for (auto& c : bytes) c = static_cast<unsigned char>(rd());
  return toHex(bytes.data(), bytes.size());
}

bool agentHas(agent::AgentClient& agent, const std::string& feature) {
  const auto features = agent.agentInfo().value("features", nlohmann::json::array());
  return std::find(features.begin(), features.end(), feature) != features.end();
}

}  // namespace

nlohmann::json VmRuntime::describe() const {
  nlohmann::json d = {{"kvm", kvm().toJson()}};
  if (unavailableReason().empty())
    if (auto accel = accelIfDecided()) d["accel"] = *accel == Accel::kKvm ? "kvm" : "tcg";
  return d;
}

Result<nlohmann::json> VmRuntime::warmTemplate(const runtime::SandboxSpec& spec) {
  ASSIGN_OR_RETURN(VmTemplate vt, ensureTemplate(spec));
  return nlohmann::json{
      {"dir", vt.dir}, {"memory_mib", vt.memory_mib}, {"vcpus", vt.vcpus}, {"base_image", vt.base_image}};
}

std::optional<runtime::SandboxNetwork> VmRuntime::network(const runtime::PersistedInstance& inst) const {
  return host::persistedNetwork(inst.state);
}

Status VmRuntime::handOver(runtime::Instance& inst, const runtime::HandOver& h) {
  agent::Identity identity;
  identity.hostname = h.hostname;
  identity.env = h.env;
  identity.rng_seed_hex = randomHexBytes(32);
  identity.machine_id = randomHexBytes(16);
  identity.clock_unix_ms = nowUnixMs();
  // A new generation: from the template nothing but the agent runs; a fork child runs the parent's
  // processes, which get what the fork asked for.
  identity.generation = h.restored ? *h.restored : agent::Identity::Generation{};
  // Its network too: the guest's side of the tap made at prepare (a jail's link is made by the host),
  // and the explicit proxy in every process's environment (a jail's is in its init's).
  if (auto subnet = host::persistedSubnet(inst.persisted.state); subnet && h.explicit_proxy_port) {
    if (!agentHas(*inst.agent, "net_config"))
      return makeError(ErrorKind::kUnsupported,
                       "the guest's agent cannot configure a network: its guest was built "
                       "before the vm tier had one (rebuild it with scripts/vm/build-guest)");
    identity.network.address = subnet->sandboxText();
    identity.network.prefix = net::SandboxSubnet::kPrefix;
    identity.network.gateway = subnet->hostText();
    identity.network.nameserver = subnet->hostText();
    identity.network.mac = inst.persisted.state["net"].value("mac", "");
    host::NetworkConfig net_config;
    net_config.explicit_proxy_port = *h.explicit_proxy_port;
    for (auto& [k, v] : host::proxyEnv(*subnet, net_config)) identity.env.emplace(k, v);
  }
  return inst.agent->setIdentity(identity);
}

// A VM resumed from a snapshot continues the snapshot's memory: its clock is the snapshot's, and its RNG
// would repeat what it produced after the snapshot the first time. Both are renewed before anything runs,
// and the hostname is the sandbox's (an imported snapshot comes from another sandbox). The kernel's RNG
// is all the seed reaches: the processes' own generators are told by the new generation (SECURITY.md V9).
Status VmRuntime::renewIdentity(runtime::Instance& inst, const runtime::HandOver& h) {
  agent::Identity identity;
  identity.env = h.env;
  identity.rng_seed_hex = randomHexBytes(32);
  identity.clock_unix_ms = nowUnixMs();
  identity.hostname = h.hostname;
  identity.generation = h.restored ? *h.restored : agent::Identity::Generation{};
  return inst.agent->setIdentity(identity);
}

}  // namespace space::vm
