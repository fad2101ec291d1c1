// Streamed process output as NDJSON: one JSON object per line, written to the client as soon as the agent
// delivers it. Shared by exec, background process logs and (for its exit line) the PTY route.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "agent/client/agent_client.h"
#include "common/result.h"
#include "http/message.h"

namespace space::api {

std::string ndjsonLine(const nlohmann::json& j);
nlohmann::json exitJson(const agent::ExitStatus& exit);
// {"type":"stdout","data":"<base64>"} / stderr / {"type":"exit",...}
nlohmann::json execEventJson(const agent::ExecEvent& event);

// Writes events from next() until the exit event. An agent error becomes a final {"type":"error"} line
// (the status line went out long ago). Returns an error only when the client went away.
// annotate_exit may add to the exit line (made from the agent's exit) before it goes out.
using AnnotateExit = std::function<void(const agent::ExitStatus& exit, nlohmann::json& exit_line)>;
Status streamEvents(http::ResponseWriter& resp, const std::function<Result<agent::ExecEvent>()>& next,
                    const AnnotateExit& annotate_exit = nullptr);

}  // namespace space::api
