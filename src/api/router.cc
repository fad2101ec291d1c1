#include "api/router.h"

#include "api/metrics.h"

namespace space::api {
namespace {

std::vector<std::string_view> splitPath(std::string_view path) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < path.size()) {
    if (path[i] == '/') {
      ++i;
      continue;
    }
    size_t j = path.find('/', i);
    if (j == std::string_view::npos) j = path.size();
    out.push_back(path.substr(i, j - i));
    i = j;
  }
  return out;
}

}  // namespace

Result<std::string> RouteContext::jsonBody() {
  auto body_or = http::readAll(body, options.json_body_limit);
  if (!body_or && body_or.error().kind == ErrorKind::kResourceExhausted) {
    error_status = 413;
    return makeError(ErrorKind::kInvalidArgument, "JSON request body larger than {} bytes", options.json_body_limit);
  }
  return body_or;
}

void Router::add(std::string method, std::string pattern, RouteHandler handler) {
  Route r{std::move(method), std::move(pattern), std::move(handler), {}};
  for (auto seg : splitPath(r.pattern)) r.segments.emplace_back(seg);
  routes_.push_back(std::move(r));
}

Router::Match Router::match(std::string_view method, std::string_view path) const {
  Match m;
  if (path.size() > 4096) return m;
  auto parts = splitPath(path);
  for (const auto& r : routes_) {
    if (r.segments.size() != parts.size()) continue;
    std::map<std::string, std::string> params;
    bool matched = true;
    for (size_t i = 0; i < parts.size() && matched; ++i) {
      const auto& seg = r.segments[i];
      if (seg.size() > 2 && seg.front() == '{' && seg.back() == '}') {
        params[seg.substr(1, seg.size() - 2)] = std::string(parts[i]);
      } else {
        matched = seg == parts[i];
      }
    }
    if (!matched) continue;
    // A literal route ("files/stat") wins over a parameter in the same place; routes are added literal-first.
    if (r.method != method) {
      m.path_known = true;
      continue;
    }
    m.route = &r;
    m.params = std::move(params);
    return m;
  }
  return m;
}

}  // namespace space::api
