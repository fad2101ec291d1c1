// space-egress's configuration file (JSON). The one place where `test_external_subnets` may be set: the
// control socket has no way to set it, so a compromised or confused spaced cannot open private ranges.
#pragma once

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/result.h"
#include "egress/address.h"
#include "egress/audit.h"
#include "egress/limits.h"

namespace space::egress {

// The smallest audit cap accepted: a few hundred lines per file.
constexpr uint64_t kMinAuditBytes = 64 * 1024;

// How the gateway confines itself once it has read what needs root (confine.h). Absent from the config:
// it runs unconfined and says so (a standalone gateway an operator starts by hand); spaced always sets it.
struct ConfineConfig {
  bool enabled = false;
  uint32_t uid = 0;  // its own host uid and gid, never 0
  uint32_t gid = 0;
  std::string root_dir;        // an empty directory: the mount point of its tmpfs root
  std::string seccomp_policy;  // path of policies/seccomp/egress.json
};

struct Config {
  std::string control_socket = "/run/space/egress.sock";
  std::string transparent_listen = "0.0.0.0:15001";
  std::string proxy_listen = "0.0.0.0:15002";
  std::string dns_listen = "0.0.0.0:15053";
  std::string upstream_resolvers;  // "1.1.1.1,9.9.9.9:53"; empty: the host's resolv.conf
  std::string upstream_ca_file;    // empty: the system bundle
  std::string audit_log = "-";     // "-" stdout
  AuditOptions audit;              // cap, rotation, per-sandbox line budget, aggregation interval
  ConnectionCaps connections;
  Rate connection_rate{100, 200};  // new connections per sandbox
  Rate dns_rate{100, 200};         // DNS queries per sandbox
  std::chrono::milliseconds handshake_timeout{10000};
  std::chrono::milliseconds head_deadline{10000};
  std::chrono::milliseconds idle_timeout{300000};
  bool detect_host_addresses = true;      // add every address of every host interface to the lateral list
  std::vector<IpAddress> host_addresses;  // more lateral addresses
  std::vector<Cidr> sandbox_pools;        // the sandbox address pool(s): lateral as a whole
  std::vector<HostFacts::Listener> protected_listeners;  // e.g. spaced's TCP API
  // DANGER: declares these subnets external, so their private addresses count as public. Only for the
  // test harness's upstream namespaces; off by default; read only from the config file.
  std::vector<Cidr> test_external_subnets;
  nlohmann::json sandboxes = nlohmann::json::array();  // registrations to apply at start (standalone use)
  ConfineConfig confine;
};

Result<Config> parseConfig(const nlohmann::json& j);
Result<Config> loadConfig(const std::string& path);

// Every address configured on the host's interfaces (getifaddrs).
Result<std::vector<IpAddress>> hostAddresses();

}  // namespace space::egress
