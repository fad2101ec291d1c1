// The control socket: spaced (or an operator) registers sandboxes, changes their policy and secrets, and
// removes them, over a unix socket speaking one JSON object per line (docs/egress.md). The same parser reads
// the "sandboxes" of a config file. Secret values arrive here and stay in this process's memory.
#pragma once

#include <functional>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "common/result.h"
#include "common/unique_fd.h"
#include "egress/asio.h"
#include "egress/audit.h"
#include "egress/registry.h"

namespace space::egress {

// {"id", "sources": [CIDR...], "link": "spc..", "policy": {...}, "secrets": [...], "ca": {"cert_pem", "key_pem"}}.
// "link" (optional) is the host interface the sandbox's traffic must arrive on.
// Without "ca" a fresh CA is generated. Unknown fields are refused (so nothing like the test setting can
// be slipped in here).
Result<std::shared_ptr<Sandbox>> parseSandbox(const nlohmann::json& j);

// What the gateway adds to "stats" (connections held, limits in force); empty: nothing.
using GatewayStats = std::function<nlohmann::json()>;

// Executes one request line; returns the reply object (never throws). Exposed for tests.
nlohmann::json handleControl(Registry& registry, Audit& audit, const nlohmann::json& request,
                             const GatewayStats& gateway_stats = {});

// A listening unix socket at `path`, mode 0600 (it carries secret values: root only). For a gateway
// started by hand; spaced binds the socket itself and hands it in (--control-fd).
Result<UniqueFd> bindControlSocket(const std::string& path);

class ControlServer {
 public:
  // Serves requests on a listening unix socket, bound by the caller (bindControlSocket) or inherited.
  static Result<std::unique_ptr<ControlServer>> serve(boost::asio::io_context& io, UniqueFd listening,
                                                      Registry& registry, Audit& audit,
                                                      GatewayStats gateway_stats = {});
  ~ControlServer();
  struct Impl;

 private:
  explicit ControlServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace space::egress
