#include "api/ndjson.h"

#include "api/errors.h"
#include "http/base64.h"

namespace space::api {

std::string ndjsonLine(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

nlohmann::json exitJson(const agent::ExitStatus& exit) {
  return {{"type", "exit"}, {"exit_code", exit.exit_code}, {"signal", exit.signal}, {"timed_out", exit.timed_out}};
}

nlohmann::json execEventJson(const agent::ExecEvent& event) {
  switch (event.kind) {
    case agent::ExecEvent::Kind::kStdout:
      return {{"type", "stdout"}, {"data", http::base64Encode(event.data)}};
    case agent::ExecEvent::Kind::kStderr:
      return {{"type", "stderr"}, {"data", http::base64Encode(event.data)}};
    case agent::ExecEvent::Kind::kExit:
      return exitJson(event.exit);
  }
  return {};
}

Status streamEvents(http::ResponseWriter& resp, const std::function<Result<agent::ExecEvent>()>& next,
                    const AnnotateExit& annotate_exit) {
  for (;;) {
    auto ev = next();
    if (!ev) {
      nlohmann::json line = errorJson(errorKindName(ev.error().kind), ev.error().message);
      line["type"] = "error";
      return resp.write(ndjsonLine(line));
    }
    nlohmann::json line = execEventJson(*ev);
    if (ev->kind == agent::ExecEvent::Kind::kExit && annotate_exit) annotate_exit(ev->exit, line);
    TRY(resp.write(ndjsonLine(line)));
    if (ev->kind == agent::ExecEvent::Kind::kExit) return ok();
  }
}

}  // namespace space::api
