// Route registration and the pure parsers behind it (request -> manager command), exposed for tests and
// the fuzz target. A parser never has side effects; the handler that calls it executes the command.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "agent/client/agent_client.h"
#include "api/router.h"
#include "core/manager.h"
#include "http/message.h"

namespace space::api {

void registerSystemRoutes(Router& r);
void registerSandboxRoutes(Router& r);
void registerExecRoutes(Router& r);
void registerExecSessionRoute(Router& r);  // called by registerExecRoutes
// Marks an exec's exit line {"oom_killed": true, "memory_limit_mib": N} when it died of SIGKILL while the
// sandbox's OOM kill counter rose past oom_before, or its agent saw its own kernel's count rise (exec.cc).
void markOomKill(RouteContext& ctx, std::optional<uint64_t> oom_before, const agent::ExitStatus& exit,
                 nlohmann::json& exit_line);
void registerProcessRoutes(Router& r);
void registerPtyRoutes(Router& r);
void registerFileRoutes(Router& r);
void registerTemplateRoutes(Router& r);
void registerKeyRoutes(Router& r);
void registerNetworkRoutes(Router& r);

// "network" of POST /v1/sandboxes and the body of PUT /v1/sandboxes/{id}/network: validated by the
// gateway's own policy parser and returned normalised.
Result<nlohmann::json> parseNetworkPolicy(const nlohmann::json& j);
// What the operator should know about a policy parseNetworkPolicy accepted (allow rules for shared CDNs),
// returned with the answer as "warnings".
std::vector<std::string> networkWarnings(const nlohmann::json& policy);
// POST /v1/secrets
Result<core::SetSecret> parseSetSecret(std::string_view body);

// POST /v1/sandboxes
Result<core::CreateSandbox> parseCreateSandbox(std::string_view body, uint64_t host_memory_bytes);
// GET /v1/sandboxes?label=k=v&state=running
Result<core::ListSandboxes> parseListSandboxes(const http::Request& req);

struct ExecCommand {
  agent::ExecRequest request;
  std::optional<std::string> stdin_data;  // sent, then stdin is closed
};
// POST .../exec (with_stdin_and_timeout) and POST .../processes (without).
Result<ExecCommand> parseExec(std::string_view body, bool foreground);
// POST .../processes/{pid}/signal
Result<int> parseSignalBody(std::string_view body);
// GET .../exec upgraded to a WebSocket: the first text message is the request, POST .../exec's body with
// "stdin": true|false (stdin then streams in binary messages) in place of the data.
Result<agent::ExecRequest> parseExecSessionRequest(std::string_view text);
struct ExecControl {
  enum class Kind { kEof, kSignal } kind = Kind::kEof;
  int signal = 0;
};
// Later text messages of that session: {"type":"eof"}, {"type":"signal","signal":"INT"|2}.
Result<ExecControl> parseExecControl(std::string_view text);
// GET .../pty?cmd=/bin/sh&rows=24&cols=80
Result<agent::ExecRequest> parsePtyQuery(const http::Request& req);

struct PtyControl {
  enum class Kind { kResize, kEof } kind = Kind::kResize;
  uint16_t rows = 24, cols = 80;
};
// A PTY text message: {"type":"resize","rows":..,"cols":..} or {"type":"eof"} (the input ended: the
// terminal gets its EOF character).
Result<PtyControl> parsePtyControl(std::string_view text);

struct MkdirCommand {
  std::string path;
  bool parents = false;
  uint32_t mode = 0755;
};
Result<MkdirCommand> parseMkdir(std::string_view body);
struct MoveCommand {
  std::string from, to;
};
Result<MoveCommand> parseMove(std::string_view body);

// POST /v1/sandboxes/{id}/snapshots {"name"?} -> the name ("" = none)
Result<std::string> parseSnapshotBody(std::string_view body);
// POST /v1/sandboxes/{id}/rollback {"snapshot": id or name}
Result<core::RollbackSandbox> parseRollbackBody(std::string_view body);
// POST /v1/sandboxes/{id}/fork {"count"?: 1-64, "snapshot"?}
Result<core::ForkSandbox> parseForkBody(std::string_view body);
nlohmann::json snapshotJson(const store::SnapshotRecord& s);

// POST /v1/templates
Result<core::BuildTemplate> parseBuildTemplate(std::string_view body);
// POST /v1/keys
Result<std::string> parseCreateKey(std::string_view body);

}  // namespace space::api
