#include "cli/options.h"

namespace space::cli {

CLI::Option* addRepeatable(CLI::App* cmd, const std::string& names, std::vector<std::string>& into,
                           const std::string& help) {
  // CLI11 lets a vector option eat every following word up to the next flag, and then takes a "--"
  // right after it as the end of that option only: `-e A=1 -- sh -c x` would parse -c as a flag, and
  // `-e A=1 ID` would take the id as a second value.
  return cmd->add_option(names, into, help)->allow_extra_args(false)->take_all();
}

void addCreateOptions(CLI::App* cmd, CreateOptions& o) {
  cmd->add_option("--template,-t", o.template_name, "template (default: the daemon's)");
  cmd->add_option("--isolation", o.isolation, "auto, jail or vm")->check(CLI::IsMember({"auto", "jail", "vm"}));
  cmd->add_option("--cpus", o.cpus, "CPU limit, e.g. 0.5 or 2");
  cmd->add_option("--memory,-m", o.memory, "memory limit, e.g. 512M or 2G");
  cmd->add_option("--pids", o.pids, "process limit");
  cmd->add_option("--disk", o.disk, "disk quota, e.g. 1G");
  addRepeatable(cmd, "--env,-e", o.env, "KEY=VALUE for every process (repeatable)");
  addRepeatable(cmd, "--label,-l", o.labels, "KEY=VALUE label (repeatable)");
  cmd->add_option("--ttl", o.ttl, "delete after this long, e.g. 30m or 2h");
  cmd->add_option("--history-every", o.history_every,
                  "snapshot automatically this often, e.g. 10m; kept: all for 1h, hourly for 1d, daily for 7d");
  cmd->add_flag("--history-after-exec", o.history_after_exec,
                "snapshot automatically after each exec that changed files (thinned like --history-every)");
  cmd->add_option("--idle-pause", o.idle_pause, "pause after this long without use, e.g. 10m; the next use resumes it");
  cmd->add_option("--net-mode", o.net_mode, "egress mode: deny-all (default), allow-list, allow-all-public")
      ->check(CLI::IsMember({"deny-all", "allow-list", "allow-all-public"}));
  addRepeatable(cmd, "--net-allow", o.net_allow,
                "allow a domain (*.suffix for subdomains) or CIDR, [:PORT] (repeatable)");
  addRepeatable(cmd, "--net-deny", o.net_deny, "deny a domain or CIDR, [:PORT] (repeatable)");
  cmd->add_option("--net-tls", o.net_tls,
                  "intercept-bound (default: TLS is terminated only for hosts a secret is bound to) or intercept-all "
                  "(every allowed TLS host, so Host is held to SNI)")
      ->check(CLI::IsMember({"intercept-bound", "intercept-all"}));
  addRepeatable(cmd, "--secret", o.secrets, "stored secret NAME: the sandbox gets $NAME = a placeholder (repeatable)");
}

namespace {

void addProcessOptions(CLI::App* cmd, ExecOptions& o) {
  cmd->add_option("--cwd,-w", o.cwd, "working directory inside the sandbox");
  cmd->add_option("--user,-u", o.user, "user inside the sandbox");
}

void addForegroundOptions(CLI::App* cmd, ExecOptions& o) {
  cmd->add_option("--timeout", o.timeout, "kill after this long, e.g. 30s or 1500ms (exit code 124)");
  cmd->add_flag("--interactive,-i", o.interactive, "send this terminal's stdin to the command as it is typed");
}

void addCommandArgs(CLI::App* cmd, std::vector<std::string>& argv) {
  cmd->add_option("CMD", argv, "command and arguments")->required();
}

}  // namespace

CLI::App* addExecCommand(CLI::App& app, std::string& id, ExecOptions& o) {
  auto* cmd = app.add_subcommand("exec", "run a command in a sandbox: space exec [opts] ID -- CMD [ARGS...]");
  cmd->add_option("ID", id)->required();
  addRepeatable(cmd, "--env,-e", o.env, "KEY=VALUE (repeatable)");
  addProcessOptions(cmd, o);
  addForegroundOptions(cmd, o);
  addCommandArgs(cmd, o.argv);
  return cmd;
}

CLI::App* addRunCommand(CLI::App& app, CreateOptions& c, ExecOptions& o) {
  auto* cmd = app.add_subcommand("run", "create a sandbox, run one command, delete it: space run [opts] -- CMD...");
  addCreateOptions(cmd, c);  // --env here is the sandbox's, which the command inherits
  addProcessOptions(cmd, o);
  addForegroundOptions(cmd, o);
  addCommandArgs(cmd, o.argv);
  return cmd;
}

CLI::App* addStartCommand(CLI::App& app, std::string& id, ExecOptions& o) {
  auto* cmd = app.add_subcommand("start", "start a background process: space start [opts] ID -- CMD...");
  cmd->add_option("ID", id)->required();
  addRepeatable(cmd, "--env,-e", o.env, "KEY=VALUE (repeatable)");
  addProcessOptions(cmd, o);
  addCommandArgs(cmd, o.argv);
  return cmd;
}

CLI::App* addShellCommand(CLI::App& app, std::string& id, ShellOptions& o) {
  auto* cmd = app.add_subcommand("shell", "interactive terminal in a sandbox: space shell ID [-- PROGRAM ARGS...]");
  cmd->add_option("ID", id)->required();
  cmd->add_option("--cmd", o.program, "program to run on the terminal (arguments go after --)");
  cmd->add_option("PROGRAM", o.argv, "program and arguments, after --");
  return cmd;
}

}  // namespace space::cli
