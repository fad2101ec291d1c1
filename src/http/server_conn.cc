#include "http/server_conn.h"

#include <fmt/format.h>

namespace space::http::detail {

int64_t steadyNowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string errorBody(std::string_view code, std::string_view message) {
  return fmt::format(R"({{"error":{{"code":"{}","message":"{}"}}}})", code, message);
}

std::string formatSeconds(std::chrono::milliseconds d) { return fmt::format("{:g} s", d.count() / 1000.0); }

}  // namespace space::http::detail
