// The flags of the commands that start processes (create, run, exec, start, shell), shared by main.cc and
// the parsing tests. Like docker and kubectl: a repeatable flag takes exactly one value each time it is
// given (-e A=1 -e B=2), and "--" always ends the options; what follows is the command, verbatim.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "cli/commands.h"

namespace space::cli {

// A flag that may be given many times, one value each time.
CLI::Option* addRepeatable(CLI::App* cmd, const std::string& names, std::vector<std::string>& into,
                           const std::string& help);

void addCreateOptions(CLI::App* cmd, CreateOptions& o);

CLI::App* addExecCommand(CLI::App& app, std::string& id, ExecOptions& o);
CLI::App* addRunCommand(CLI::App& app, CreateOptions& c, ExecOptions& o);
CLI::App* addStartCommand(CLI::App& app, std::string& id, ExecOptions& o);

CLI::App* addShellCommand(CLI::App& app, std::string& id, ShellOptions& o);

}  // namespace space::cli
