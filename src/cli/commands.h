// The space commands, free of CLI11 (main.cc maps flags onto these option structs). Each returns the
// process exit code.
#pragma once

#include <string>
#include <vector>

#include "cli/context.h"

namespace space::cli {

struct CreateOptions {
  std::string template_name, isolation, cpus, memory, pids, disk, ttl, idle_pause, history_every;
  bool history_after_exec = false;
  std::vector<std::string> env, labels;
  std::string net_mode, net_tls;
  std::vector<std::string> net_allow, net_deny, secrets;
};

struct SecretOptions {
  std::string name, value_file, header, format;
  std::vector<std::string> hosts, methods, path_prefixes;
};
// One rule as typed after --allow/--deny/--remove: "api.example.com", "*.example.com:443",
// "203.0.113.0/24", "10.252.77.0/24:8080", "10.252.77.2" (an address is taken as /32 or /128),
// "2001:db8::1", "[2001:db8::]/32:443"; a port may be a list ("80,443"). Gives {"action", "domain" |
// "cidr", "ports"?}; the daemon validates the address and the name.
Result<nlohmann::json> ruleFromText(const std::string& action, const std::string& text);

struct NetOptions {
  std::string mode;
  std::string tls;  // intercept-bound | intercept-all; empty: unchanged
  std::vector<std::string> allow, deny, remove;
  bool reset = false;
  bool changes() const {
    return !mode.empty() || !tls.empty() || !allow.empty() || !deny.empty() || !remove.empty() || reset;
  }
};
// The policy `space net` / `space create --net-*` sends: base's mode, rules and tls (no rules after
// --reset), each --remove taken out (an error when it matches no rule), one rule per --allow/--deny, and
// the mode and tls replaced when given.
Result<nlohmann::json> networkPolicy(const NetOptions& o, const nlohmann::json& base);
// What a mode change does to the rules that stay ("" when the mode is unchanged).
std::string modeChangeNote(const std::string& from, const nlohmann::json& policy);
// `space net log`: one audit line as a table row (TIME VERDICT DESTINATION RULE REASON).
std::vector<std::string> auditRow(const nlohmann::json& line);
// Prints the "warnings" of an answer (allow rules for shared CDNs) to stderr.
void printWarnings(const nlohmann::json& answer);
struct ExecOptions {
  std::vector<std::string> env;
  std::string cwd, user, timeout;
  bool interactive = false;
  std::vector<std::string> argv;
};

struct ShellOptions {
  std::string program = "/bin/sh";  // --cmd
  std::vector<std::string> argv;    // after "--": program and arguments (wins over --cmd)
};

// Builds the create body from the flags (kInvalidArgument on bad sizes or pairs).
Result<nlohmann::json> createBody(const CreateOptions& o);
// POST /v1/sandboxes, printing the daemon's progress lines (a template's first VM warming) on stderr;
// the created sandbox.
Result<nlohmann::json> createSandbox(Context& ctx, const nlohmann::json& body);
Result<nlohmann::json> execBody(const ExecOptions& o);
// Splits a cp argument: "sb-1:/root/x" -> {"sb-1", "/root/x"}; a local path -> {"", path}.
std::pair<std::string, std::string> splitRemote(const std::string& arg);

int cmdCreate(Context& ctx, const CreateOptions& o);
int cmdLs(Context& ctx, const std::vector<std::string>& labels, const std::string& state);
int cmdInspect(Context& ctx, const std::string& id);
int cmdRm(Context& ctx, const std::vector<std::string>& ids);
int cmdExec(Context& ctx, const std::string& id, const ExecOptions& o);
int cmdRun(Context& ctx, const CreateOptions& c, const ExecOptions& o);
// The PTY route's target: cmd= the program, one arg= per argument, the terminal's size.
Result<std::string> shellTarget(const std::string& id, const ShellOptions& o, int rows, int cols);
int cmdShell(Context& ctx, const std::string& id, const ShellOptions& o);
struct CpOptions {
  bool recursive = false;  // -r: directories, as one tar stream
  bool parents = false;    // -p: make missing parent directories on the receiving side
};
int cmdCp(Context& ctx, const std::string& src, const std::string& dst, const CpOptions& o);
// space files ls|stat|mkdir|mv|rm: the sandbox file API.
int cmdFilesLs(Context& ctx, const std::string& id, const std::string& path);
int cmdFilesStat(Context& ctx, const std::string& id, const std::string& path);
int cmdFilesMkdir(Context& ctx, const std::string& id, const std::string& path, bool parents);
int cmdFilesMv(Context& ctx, const std::string& id, const std::string& from, const std::string& to);
int cmdFilesRm(Context& ctx, const std::string& id, const std::string& path, bool recursive);
int cmdLogs(Context& ctx, const std::string& id, const std::string& proc, bool follow);
int cmdPs(Context& ctx, const std::string& id);
int cmdStart(Context& ctx, const std::string& id, const ExecOptions& o);
int cmdKill(Context& ctx, const std::string& id, const std::string& proc, const std::string& sig);
// What `space node` prints: the tiers table, the KVM line, what auto picks, egress; fields the daemon
// left out are printed as not reported.
std::string nodeText(const nlohmann::json& node);
int cmdNode(Context& ctx);
int cmdNodeDrain(Context& ctx, bool delete_sandboxes);
int cmdKeyCreate(Context& ctx, const std::string& name);
int cmdKeyLs(Context& ctx);
int cmdKeyRotate(Context& ctx);
int cmdKeyPurge(Context& ctx, const std::string& older_than);
int cmdKeyRevoke(Context& ctx, const std::string& id);

struct TemplateBuildOptions {
  std::string name, debootstrap, packages, variant, mirror, from_dir, from_tar;
  std::string tar;  // a tarball (or "-": stdin) uploaded to the daemon
};
int cmdTemplateBuild(Context& ctx, const TemplateBuildOptions& o);
int cmdTemplateLs(Context& ctx);
int cmdTemplateRm(Context& ctx, const std::string& name);
int cmdTemplateWarm(Context& ctx, const std::string& name);
int cmdNet(Context& ctx, const std::string& id, const NetOptions& o);
int cmdNetLog(Context& ctx, const std::string& id, bool follow);
int cmdSecretSet(Context& ctx, const SecretOptions& o);
int cmdSecretLs(Context& ctx);
int cmdSecretRm(Context& ctx, const std::vector<std::string>& names);
int cmdPauseResume(Context& ctx, const std::vector<std::string>& ids, bool pause);
int cmdSnapshot(Context& ctx, const std::string& id, const std::string& name);
int cmdHistory(Context& ctx, const std::string& id);
int cmdSnapshotExport(Context& ctx, const std::string& snap, const std::string& out);
int cmdSnapshotImport(Context& ctx, const std::string& file, const std::string& id);
int cmdSnapshotRm(Context& ctx, const std::vector<std::string>& snaps);
// --on-restore / --restore-signal of rollback and fork; empty = the daemon's default.
struct RestoreOptions {
  std::string on_restore;
  std::string signal;
};
int cmdRollback(Context& ctx, const std::string& id, const std::string& snap, const RestoreOptions& restore = {});
int cmdFork(Context& ctx, const std::string& id, int count, const std::string& snap, const RestoreOptions& restore = {},
            const std::string& ttl = {});
// Shows the TTL, or sets it: "30m" from now, "+10m" more than is left, "none".
int cmdTtl(Context& ctx, const std::string& id, const std::string& value);

}  // namespace space::cli
