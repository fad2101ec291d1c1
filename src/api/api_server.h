// The API in front of the SandboxManager: authentication (TCP needs an API key; the unix socket is
// trusted by its file permissions), routing, error answers and request metrics.
#pragma once

#include <memory>

#include "api/metrics.h"
#include "api/router.h"
#include "core/manager.h"
#include "http/message.h"

namespace space::api {

class ApiServer {
 public:
  ApiServer(core::SandboxManager& manager, ApiOptions options);

  // The http::Handler: never throws, always answers.
  void handle(http::Request& req, http::BodyReader& body, http::ResponseWriter& resp);

  Metrics& metrics() { return metrics_; }
  const Router& router() const { return router_; }

 private:
  Status authenticate(const http::Request& req);
  core::SandboxManager& manager_;
  ApiOptions options_;
  Metrics metrics_;
  Router router_;
};

// Total RAM of the host, the upper bound of a sandbox's memory limit.
uint64_t hostMemoryBytes();

}  // namespace space::api
