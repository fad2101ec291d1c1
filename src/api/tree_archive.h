// A directory inside a sandbox as a tar stream (GET/PUT /v1/sandboxes/{id}/files/archive), written and
// read with libarchive over the agent's file operations, so every path stays confined to the sandbox
// root exactly as single-file transfers are. Symlinks go out as symlinks (never followed); coming in,
// only directories and regular files are made, anything else is counted as skipped.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "agent/client/agent_client.h"
#include "common/result.h"

namespace space::api {

// Receives the tar stream piece by piece; an error stops the walk.
using TarSink = std::function<Status(std::string_view)>;
// Fills out with up to max bytes of a tar stream; 0 at its end.
using TarSource = std::function<Result<size_t>(char* out, size_t max)>;

// Writes the tree under dir (a directory, or one file) as a ustar/pax stream whose names are relative to
// dir's parent ("dir/a/b"), the way `tar -C parent -c dir` names them.
Status writeTreeArchive(agent::AgentClient& agent, const std::string& dir, const TarSink& sink);

struct ExtractCounts {
  uint64_t files = 0, dirs = 0, bytes = 0, skipped = 0;
};
// Unpacks a tar stream into dir (made, with its parents, when missing). Absolute names and ".."
// components are refused with the entry's name; the archive is not trusted.
Result<ExtractCounts> extractTreeArchive(agent::AgentClient& agent, const std::string& dir, const TarSource& source);

// "a/./b/" -> "a/b"; kInvalidArgument for "", "/x" or anything with a ".." component.
Result<std::string> safeEntryName(std::string_view name);

}  // namespace space::api
