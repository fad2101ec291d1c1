// What every space command shares: the daemon client, output mode, and one way of reporting failures
// ("space: <message>" plus a hint, exit code 1).
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"
#include "common/unique_fd.h"
#include "http/client.h"

namespace space::cli {

struct Context {
  http::Client client;
  bool json = false;
};

// SPACE_HOST (default unix:///run/space/spaced.sock) and SPACE_API_KEY.
Result<Context> contextFromEnv(bool json);

// Prints "space: <message>" and a hint for what to do; returns 1.
int fail(const Context* ctx, const Error& error);
// The "hint:" line fail() prints under the daemon's message; empty when there is nothing to add.
std::string failureHint(const Error& error);
// Turns a non-2xx response into an Error carrying the daemon's message.
Status checkResponse(const http::ClientResponse& resp);
// request + checkResponse + JSON parse (null for empty bodies).
Result<nlohmann::json> callJson(Context& ctx, const std::string& method, const std::string& target,
                                const std::optional<nlohmann::json>& body = std::nullopt);

// "512M", "1G", "2048" (MiB), "1.5G" -> MiB.
Result<uint64_t> parseSizeMiB(std::string_view text);
// "K=V" -> {K, V}.
Result<std::pair<std::string, std::string>> parseKeyValue(std::string_view what, std::string_view text);
// Exit code of a finished process as a shell reports it: code, 128+signal, 124 on timeout.
int exitCodeOf(const nlohmann::json& exit_event);

// Sends `size` bytes read from fd (the file `name`, for errors) as the request body.
Result<http::ClientResponse> uploadFromFd(Context& ctx, const std::string& method, const std::string& target, int fd,
                                          uint64_t size, const std::string& name);
// A nameless file in the temporary directory ($TMPDIR or /tmp) for spooled streams (cp.cc).
Result<UniqueFd> anonymousFile();
// A local file to upload, or stdin for "-": itself when it is a regular file, else spooled (cp.cc).
Result<UniqueFd> openLocalSource(const std::string& local);
// GET target into the local file `local` (temporary name, fsync, rename); 0 or fail()'s code.
int downloadToFile(Context& ctx, const std::string& target, const std::string& local);

// Columns padded to their widest cell, two spaces apart; the last column is not padded.
std::string formatTable(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows);
void printTable(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows);

}  // namespace space::cli
