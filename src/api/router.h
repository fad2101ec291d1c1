// Route table: "METHOD /v1/sandboxes/{id}/exec" patterns to handlers. Handlers parse the request into a
// manager command and execute it; they never touch sockets (http::ResponseWriter does).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/result.h"
#include "core/manager.h"
#include "http/message.h"

namespace space::api {

class Metrics;

struct ApiOptions {
  size_t json_body_limit = 1 << 20;
  uint64_t host_memory_bytes = 0;                        // 0 = read from the host at start
  uint64_t template_upload_limit_bytes = 4096ull << 20;  // content of PUT /v1/templates/{name}/archive
};

struct RouteContext {
  http::Request& req;
  http::BodyReader& body;
  http::ResponseWriter& resp;
  core::SandboxManager& manager;
  Metrics& metrics;
  const ApiOptions& options;
  std::map<std::string, std::string> params;  // from {name} segments, already validated by the route
  int error_status = 0;                       // set by helpers whose errors need a status of their own (413, 403)

  const std::string& param(const std::string& name) const { return params.at(name); }
  // The body as a strict JSON object (413 beyond options.json_body_limit).
  Result<std::string> jsonBody();
};

using RouteHandler = std::function<Status(RouteContext&)>;

struct Route {
  std::string method;
  std::string pattern;
  RouteHandler handler;
  std::vector<std::string> segments;
};

class Router {
 public:
  void add(std::string method, std::string pattern, RouteHandler handler);

  struct Match {
    const Route* route = nullptr;
    std::map<std::string, std::string> params;
    bool path_known = false;  // some route has this path with another method (405)
  };
  Match match(std::string_view method, std::string_view path) const;
  const std::vector<Route>& routes() const { return routes_; }

 private:
  std::vector<Route> routes_;
};

}  // namespace space::api
