// What commands print for scripts with --json: one JSON object per result on stdout, and a failure as
// {"error":{"code","message","hint"?,"reason"?}} on stderr (so stdout stays parseable); without --json,
// the text for people.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "cli/context.h"

namespace space::cli {

// One line of JSON on stdout.
void printJson(const nlohmann::json& j);
// With --json, the result object; otherwise `text` (and a newline) when it is not empty.
void printResult(const Context& ctx, const nlohmann::json& result, const std::string& text);
// The error as one JSON line on stderr; returns 1 (what fail() returns).
int printError(const Error& error, const std::string& hint);
// "reason" of a daemon error body {"error":{"reason":...}}; empty when absent.
std::string errorReasonFromBody(const std::string& body);

// The exit code a shell gives for a program that could not start: 127 when it is not there, 126 when it
// cannot be executed; 0 for any other failure.
int execFailureExitCode(const Error& error);

}  // namespace space::cli
