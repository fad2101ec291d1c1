// A jail sandbox's network (docs/egress.md, "Host network"): a /30 from the node's pool and a veth pair
// into the sandbox's network namespace, made by the host while the child still waits for its go byte. The
// subnet and link name are persisted with the instance, so destroy and start-up reconciliation release
// them. Without a pool the namespace keeps only lo.
#pragma once

#include <sys/types.h>

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>

#include "common/result.h"
#include "net/address_pool.h"
#include "runtime/runtime.h"

namespace space::host {

// Where HTTP(S)_PROXY points inside the sandbox: the host end of its /30, at this port (nftables sends it
// to space-egress's explicit proxy).
struct NetworkConfig {
  uint16_t explicit_proxy_port = 3128;
};

// {"subnet": "10.200.0.4/30", "network": <u32>, "link": "spc1"} in PersistedInstance::state["net"].
std::optional<net::SandboxSubnet> persistedSubnet(const nlohmann::json& state);
std::string persistedLink(const nlohmann::json& state);
// Both, as the runtime seam names them (none without a subnet).
std::optional<runtime::SandboxNetwork> persistedNetwork(const nlohmann::json& state);

// Host link name of a subnet: unique per subnet, at most 15 bytes.
std::string linkNameFor(const net::SandboxSubnet& subnet);

// Allocates a subnet, records it in `state` (before any kernel object exists) and creates the veth into
// the network namespace of `pid`.
Status attachNetwork(net::AddressPool& pool, pid_t pid, nlohmann::json& state);
// Deletes the host link (gone already when the namespace died) and returns the subnet to the pool.
Status detachNetwork(net::AddressPool& pool, const nlohmann::json& state);
// A sandbox restarted in place (rollback): a new namespace gets the link of the persisted subnet again
// (same addresses, same link name), after the old pair, if the kernel has not removed it yet, is deleted.
Status relinkNetwork(pid_t pid, const nlohmann::json& state);

// What every process of a networked sandbox finds in its environment: the explicit proxy.
std::map<std::string, std::string> proxyEnv(const net::SandboxSubnet& subnet, const NetworkConfig& config);

// Host links named with the sandbox prefix that are not in `keep` (after a restart: links of sandboxes
// that no longer exist), deleted.
void removeUnknownLinks(const std::set<std::string>& keep);

}  // namespace space::host
