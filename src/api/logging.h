// spaced logs one JSON object per line. Messages from any component become {"ts","level","msg"}; those
// written with logJson() carry their fields as top-level keys instead.
#pragma once

#include <spdlog/spdlog.h>

#include <nlohmann/json.hpp>
#include <string_view>

namespace space::api {

// Installs the JSON line format on the default logger.
void setupJsonLogging(spdlog::level::level_enum level);
void logJson(spdlog::level::level_enum level, std::string_view msg, nlohmann::json fields = nlohmann::json::object());

}  // namespace space::api
