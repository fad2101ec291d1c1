// spaced's side of the egress gateway: installs SPACE's nftables table, starts space-egress (or adopts one
// that is already serving the same state directory), restarts it when it dies, and speaks its control
// socket (docs/egress.md). space-egress runs in its own session, so it outlives spaced: a daemon restart
// keeps the gateway and its live connections, and the next spaced re-registers its sandboxes.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/result.h"
#include "net/nftables.h"

namespace space::core {

struct EgressSettings {
  std::string binary;     // space-egress
  std::string state_dir;  // its files live in <state_dir>/egress/
  net::EgressPorts ports;
  std::string pool;  // the sandbox address pool (lateral as a whole for the gateway)
  std::string upstream_resolvers;
  std::string upstream_ca_file;
  std::vector<std::string> test_external_subnets;  // DANGER, tests only (config.h)
  std::vector<std::string> protected_listeners;    // spaced's TCP API, if any
  // The gateway's confinement (SECURITY.md E18): its own uid and gid, and its seccomp policy. uid 0 leaves
  // it unconfined (tests of the supervisor only).
  uint32_t uid = 0;
  uint32_t gid = 0;
  std::string seccomp_policy;  // policies/seccomp/egress.json
};

// The config file spaced writes for space-egress (exposed for tests).
nlohmann::json egressConfigJson(const EgressSettings& s);

class EgressSupervisor {
 public:
  // Installs the nftables table, then adopts a running space-egress or starts one; fails when neither
  // works (nftables unusable, binary missing, gateway not answering).
  static Result<std::unique_ptr<EgressSupervisor>> start(const EgressSettings& settings);
  ~EgressSupervisor();  // stops supervising; space-egress keeps running

  // One request on the control socket. kUnavailable when the gateway does not answer; an {"ok": false}
  // reply becomes an error of the reply's kind.
  Result<nlohmann::json> call(const nlohmann::json& request);
  // register, replacing an existing registration of the same id.
  Result<nlohmann::json> registerSandbox(const nlohmann::json& sandbox);
  Status update(const std::string& id, const std::optional<nlohmann::json>& policy,
                const std::optional<nlohmann::json>& secrets);
  Status remove(const std::string& id);  // ok when unknown

  // Called (on the supervisor's thread) whenever a new space-egress came up: its registry is empty, so
  // every live sandbox must be registered again.
  void setOnRestart(std::function<void()> fn);
  // Starts the watchdog thread (after the manager can answer setOnRestart's callback).
  void startWatching();
  // Stops supervising, stops space-egress and removes SPACE's nftables table: for a node with no sandbox.
  Status stopGateway();

  const std::string& auditLogPath() const { return audit_log_; }
  const net::EgressPorts& ports() const { return settings_.ports; }
  int pid() const { return pid_.load(); }

 private:
  explicit EgressSupervisor(EgressSettings settings);
  Status writeConfig();
  Status spawn();
  bool waitServing(std::chrono::milliseconds timeout);
  void watchLoop();

  EgressSettings settings_;
  std::string dir_, config_path_, control_socket_, audit_dir_, audit_log_, pid_file_, log_file_;
  std::atomic<int> pid_{0};
  bool spawned_ = false;  // pid_ is our child (reaped with waitpid) rather than an adopted process
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::function<void()> on_restart_;
  std::thread watcher_;
};

}  // namespace space::core
