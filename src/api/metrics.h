// Request and rejection counters of the API, exported in the Prometheus text format next to the
// manager's own metrics.
#pragma once

#include <atomic>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

namespace space::api {

class Metrics {
 public:
  void countRequest(const std::string& method, const std::string& route, int status);
  // Untrusted input refused: "invalid_argument", "body_too_large", "header_too_large", "unauthenticated"...
  void countRejection(const std::string& reason);
  uint64_t rejections(const std::string& reason) const;
  std::string text() const;

 private:
  mutable std::mutex mu_;
  std::map<std::tuple<std::string, std::string, int>, uint64_t> requests_;
  std::map<std::string, uint64_t> rejections_;
};

}  // namespace space::api
