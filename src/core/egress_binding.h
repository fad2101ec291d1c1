// The manager's side of the egress gateway (docs/egress.md): per-sandbox CA and trust store, registration
// with space-egress, policy and secrets at hand-over and while running, re-registration after a gateway
// restart, and the node's secrets (sealed at rest with the node key, never returned).
//
// Locks: secret_box_mu_ is a leaf (nothing is taken under it). The supervisor's own mutexes are below
// every manager lock; its restart watcher calls resync() with none of them held.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "common/thread_annotations.h"
#include "core/context.h"
#include "core/egress_supervisor.h"
#include "core/manager.h"
#include "store/secret_box.h"

namespace space::core {

class EgressBinding {
 public:
  explicit EgressBinding(const Context& ctx) : ctx_(ctx) {}

  // The gateway (null: off), before the manager starts its threads; reset() stops it first at shutdown
  // (its watcher calls back into resync()).
  void setSupervisor(std::unique_ptr<EgressSupervisor> egress) { egress_ = std::move(egress); }
  void setOffReason(std::string reason) { off_reason_ = std::move(reason); }
  void reset() { egress_.reset(); }
  bool on() const { return egress_ != nullptr; }
  // Re-registers every sandbox whenever the supervisor restarts space-egress.
  void startWatching();
  // The port of the gateway's explicit proxy that a sandbox's agent is told at hand-over (unset: off).
  std::optional<uint16_t> explicitProxyPort() const;
  // GET /v1/node's egress part: on, or why not.
  nlohmann::json info() const;
  Status stopGateway();

  // Whether a create's network policy and secrets can apply on tier `isolation` of this node.
  Status checkRequest(const CreateSandbox& cmd, const std::string& isolation) const;
  // rec.spec["egress"] = {"policy", "secrets": [{"name", "placeholder"}], "ca", "ca_bundle"}: what
  // re-registering the sandbox with a new space-egress needs (values come from the store).
  // A new networked sandbox: its CA (kept by spaced), installed in its trust store, and a deny-all
  // registration. Pooled sandboxes get this ahead of demand.
  Status attach(store::SandboxRecord& rec, runtime::Instance& inst);
  // Hand-over: the request's policy and secrets go to space-egress; returns the environment the sandbox
  // gets for them (CA bundle variables, one placeholder per secret).
  Result<std::map<std::string, std::string>> handOver(store::SandboxRecord& rec, const CreateSandbox& cmd);
  void detach(const store::SandboxRecord& rec);
  void resync();  // every live sandbox again (a new space-egress knows none)

  Result<nlohmann::json> getNetwork(const std::string& id);
  Result<nlohmann::json> setNetwork(const std::string& id, const nlohmann::json& policy);
  Status streamNetLog(const std::string& id, bool follow, const std::function<bool(const std::string&)>& sink);
  Result<store::SecretRecord> setSecret(const SetSecret& cmd);
  Result<std::vector<store::SecretRecord>> listSecrets();
  Status removeSecret(const std::string& name);

  // The node key's box (opened on first use): secrets, and the sandboxes' sealed environments.
  Result<store::SecretBox*> secretBox();

 private:
  Result<nlohmann::json> secretBindings(const nlohmann::json& bound);
  Result<nlohmann::json> registration(const store::SandboxRecord& rec);
  // Why a sandbox has no network, with the cause and what fixes it.
  std::string offMessage() const;
  std::string noNetworkMessage(const std::string& id) const;

  const Context& ctx_;
  std::unique_ptr<EgressSupervisor> egress_;
  std::string off_reason_;
  std::mutex secret_box_mu_;
  std::optional<store::SecretBox> secret_box_ SPACE_GUARDED_BY(secret_box_mu_);
};

}  // namespace space::core
