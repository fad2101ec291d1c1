#include "api/metrics.h"

#include <fmt/format.h>

namespace space::api {

void Metrics::countRequest(const std::string& method, const std::string& route, int status) {
  std::lock_guard lock(mu_);
  ++requests_[{method, route, status}];
}

void Metrics::countRejection(const std::string& reason) {
  std::lock_guard lock(mu_);
  ++rejections_[reason];
}

uint64_t Metrics::rejections(const std::string& reason) const {
  std::lock_guard lock(mu_);
  auto it = rejections_.find(reason);
  return it == rejections_.end() ? 0 : it->second;
}

std::string Metrics::text() const {
  std::lock_guard lock(mu_);
  std::string out;
  out += "# HELP space_api_requests_total API requests by route pattern and status.\n";
  out += "# TYPE space_api_requests_total counter\n";
  for (const auto& [key, n] : requests_) {
    const auto& [method, route, status] = key;
    out += fmt::format("space_api_requests_total{{method=\"{}\",route=\"{}\",status=\"{}\"}} {}\n", method, route,
                       status, n);
  }
  out += "# HELP space_api_rejections_total Requests refused because of their input.\n";
  out += "# TYPE space_api_rejections_total counter\n";
  for (const auto& [reason, n] : rejections_) {
    out += fmt::format("space_api_rejections_total{{reason=\"{}\"}} {}\n", reason, n);
  }
  return out;
}

}  // namespace space::api
