#include "api/logging.h"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_sinks.h>

namespace space::api {
namespace {

// Marks messages made by logJson(): their text is already the inside of a JSON object.
constexpr std::string_view kStructured = "\x1e";

class JsonMessageFlag : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&, spdlog::memory_buf_t& dest) override {
    std::string_view text(msg.payload.data(), msg.payload.size());
    if (text.starts_with(kStructured)) {
      text.remove_prefix(kStructured.size());
      dest.append(text.data(), text.data() + text.size());
      return;
    }
    std::string out =
        "\"msg\":" + nlohmann::json(std::string(text)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    dest.append(out.data(), out.data() + out.size());
  }
  std::unique_ptr<custom_flag_formatter> clone() const override { return std::make_unique<JsonMessageFlag>(); }
};

}  // namespace

void setupJsonLogging(spdlog::level::level_enum level) {
  auto formatter = std::make_unique<spdlog::pattern_formatter>();
  formatter->add_flag<JsonMessageFlag>('*').set_pattern(R"({"ts":"%Y-%m-%dT%H:%M:%S.%e%z","level":"%l",%*})");
  auto logger = std::make_shared<spdlog::logger>("spaced", std::make_shared<spdlog::sinks::stderr_sink_mt>());
  logger->set_formatter(std::move(formatter));
  logger->set_level(level);
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(logger);
}

void logJson(spdlog::level::level_enum level, std::string_view msg, nlohmann::json fields) {
  if (!spdlog::should_log(level)) return;
  if (!fields.is_object()) fields = nlohmann::json::object();
  fields["msg"] = msg;
  std::string text = fields.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  // Strip the braces: the pattern supplies them around ts and level.
  std::string inner = std::string(kStructured) + text.substr(1, text.size() - 2);
  spdlog::log(level, "{}", inner);
}

}  // namespace space::api
