// Runs host tools that build templates (debootstrap, tar, cp): argv straight to exec, never through a
// shell, so a template path or package name cannot inject commands.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "common/result.h"

namespace space::sys {

using LineFn = std::function<void(const std::string& line)>;

// Runs argv[0] (looked up in a PATH that includes the sbin directories) with stdin from /dev/null and
// stdout and stderr merged into one pipe; each output line goes to on_line as soon as it is complete.
// Succeeds only when the command exits with status 0; otherwise the error names the command, its exit
// status and its last lines of output.
Status runCommand(const std::vector<std::string>& argv, const LineFn& on_line);

// Runs a host tool (mkfs) with an empty environment and stdout to /dev/null; fails unless it exits 0.
Status runTool(const std::vector<std::string>& argv);

}  // namespace space::sys
