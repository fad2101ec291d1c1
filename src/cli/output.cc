#include "cli/output.h"

#include <fmt/format.h>

namespace space::cli {

void printJson(const nlohmann::json& j) {
  // Replace, not throw, on invalid UTF-8 that came from inside a sandbox (file names, labels).
  fmt::print("{}\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

void printResult(const Context& ctx, const nlohmann::json& result, const std::string& text) {
  if (ctx.json) {
    printJson(result);
  } else if (!text.empty()) {
    fmt::print("{}\n", text);
  }
}

int printError(const Error& error, const std::string& hint) {
  nlohmann::json e = {{"code", errorKindName(error.kind)}, {"message", error.message}};
  if (!hint.empty()) e["hint"] = hint;
  if (!error.reason.empty()) e["reason"] = error.reason;
  std::fflush(stdout);  // what was printed before the error comes first when both go to one place
  fmt::print(stderr, "{}\n",
             nlohmann::json{{"error", e}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  return 1;
}

std::string errorReasonFromBody(const std::string& body) {
  auto j = nlohmann::json::parse(body, nullptr, false);
  if (!j.is_object() || !j.contains("error") || !j["error"].is_object()) return "";
  const auto& reason = j["error"].value("reason", nlohmann::json());
  return reason.is_string() ? reason.get<std::string>() : "";
}

int execFailureExitCode(const Error& error) {
  if (error.reason == "executable_not_found") return 127;
  if (error.reason == "not_executable") return 126;
  return 0;
}

}  // namespace space::cli
