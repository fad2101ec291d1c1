// space: the command-line client of spaced. Tables for people, --json for scripts; errors are one line
// "space: <message>" plus a hint, exit code 1 (2 for usage errors).
#include <fmt/format.h>

#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "cli/options.h"

using namespace space;
using namespace space::cli;

int main(int argc, char** argv) {
  CLI::App app{
      "space: sandboxes for code written by AI agents.\nSPACE_HOST=unix:///run/space/spaced.sock | http://HOST:PORT, "
      "SPACE_API_KEY=<key for TCP>"};
  // `space` alone prints this help and exits 0, as docker, kubectl and gh do.
  app.require_subcommand(0, 1);
  app.set_version_flag("--version", "space " SPACE_VERSION);
  // Subcommands pass options they do not know (--json) up to here, so `space ls --json` works.
  app.fallthrough();
  bool json = false;
  app.add_flag("--json", json, "machine-readable output");

  CreateOptions create;
  auto* c_create = app.add_subcommand("create", "create a sandbox; prints its id");
  addCreateOptions(c_create, create);

  std::vector<std::string> ls_labels;
  std::string ls_state;
  auto* c_ls = app.add_subcommand("ls", "list sandboxes");
  addRepeatable(c_ls, "--label,-l", ls_labels, "KEY=VALUE filter (repeatable)");
  c_ls->add_option("--state", ls_state, "running, paused, failed...");

  std::string id, proc, sig, name;
  auto* c_inspect = app.add_subcommand("inspect", "show a sandbox as JSON");
  c_inspect->add_option("ID", id)->required();

  std::vector<std::string> rm_ids;
  auto* c_rm = app.add_subcommand("rm", "delete sandboxes");
  c_rm->add_option("ID", rm_ids)->required();

  auto* c_pause = app.add_subcommand("pause", "pause sandboxes (every process stops; memory is kept)");
  c_pause->add_option("ID", rm_ids)->required();
  auto* c_resume = app.add_subcommand("resume", "resume paused sandboxes");
  c_resume->add_option("ID", rm_ids)->required();
  std::string ttl_value;
  auto* c_ttl = app.add_subcommand("ttl", "show or change a sandbox's TTL: 30m from now, +10m more, none");
  c_ttl->add_option("ID", id)->required();
  c_ttl->add_option("DURATION", ttl_value, "30m (from now), +10m (more than is left), none (no TTL)");
  c_ttl->footer(
      "\nThe TTL counts the time a sandbox runs: while it is paused the clock stands still and\n"
      "what is left is kept (a node deletes sandboxes paused longer than its max_paused_s).\n"
      "A fork gets its parent's TTL afresh from the fork, or the one `space fork --ttl` gives.");

  std::string snap_name, snap_ref;
  std::vector<std::string> snap_ids;
  int fork_count = 1;
  auto* c_snapshot = app.add_subcommand("snapshot", "snapshot a sandbox; prints only the snapshot id");
  c_snapshot->add_option("ID", id);
  c_snapshot->add_option("--name", snap_name, "a name to roll back to (unique per sandbox)");
  auto* c_snapshot_rm = c_snapshot->add_subcommand("rm", "delete snapshots");
  c_snapshot_rm->add_option("SNAPSHOT", snap_ids)->required();
  std::string archive_out, archive_in;
  auto* c_snapshot_export = c_snapshot->add_subcommand("export", "write a snapshot as an encrypted archive");
  c_snapshot_export->add_option("SNAPSHOT", snap_ref)->required();
  c_snapshot_export->add_option("-o,--output", archive_out, "archive file to write")->required();
  auto* c_snapshot_import =
      c_snapshot->add_subcommand("import", "an archive becomes a snapshot of a sandbox; prints its id");
  c_snapshot_import->add_option("FILE", archive_in)->required();
  c_snapshot_import->add_option("--sandbox", id, "the sandbox it belongs to (roll back or fork from it then)")
      ->required();
  auto* c_history = app.add_subcommand("history", "list a sandbox's snapshots, oldest first, with their disk use");
  c_history->add_option("ID", id)->required();
  // A VM's processes come back from its memory with copies of their random generators (SECURITY.md V9).
  RestoreOptions restore;
  const char* restore_hazard =
      "\nVM sandboxes: processes that were running continue from the snapshot's memory, random\n"
      "generators in it included (OpenSSL, Python's random, ...): without a reseed they repeat the\n"
      "same \"random\" bytes as the parent or the first run (a reused ECDSA nonce gives the key away).\n"
      "The guest's /run/space/generation changes; --on-restore signal (default) sends every process\n"
      "--restore-signal (default URG, ignored unless handled), kill ends them so that re-run\n"
      "commands seed afresh, none leaves them be. Jail sandboxes restart their processes anyway.\n"
      "docs/snapshots.md \"Generations\".";
  auto add_restore_options = [&](CLI::App* c) {
    c->add_option("--on-restore", restore.on_restore, "signal | kill | none: what running processes get")
        ->check(CLI::IsMember({"signal", "kill", "none"}));
    c->add_option("--restore-signal", restore.signal, "signal for --on-restore signal (name or number; default URG)");
    c->footer(restore_hazard);
  };
  auto* c_rollback = app.add_subcommand("rollback", "restore a sandbox in place to a snapshot (id or name)");
  c_rollback->add_option("ID", id)->required();
  c_rollback->add_option("SNAPSHOT", snap_ref)->required();
  add_restore_options(c_rollback);
  auto* c_fork = app.add_subcommand("fork", "new sandboxes from a snapshot of a sandbox; prints their ids");
  c_fork->add_option("ID", id)->required();
  c_fork->add_option("-n,--count", fork_count, "how many (1-64)")->check(CLI::Range(1, 64));
  c_fork->add_option("--snapshot", snap_ref, "start from this snapshot instead of one taken now");
  std::string fork_ttl;
  c_fork->add_option("--ttl", fork_ttl, "each new sandbox's TTL (default: the parent's, counted from the fork)");
  add_restore_options(c_fork);

  ExecOptions exec;
  auto* c_exec = addExecCommand(app, id, exec);

  CreateOptions run_create;
  ExecOptions run_exec;
  auto* c_run = addRunCommand(app, run_create, run_exec);

  ShellOptions shell;
  auto* c_shell = addShellCommand(app, id, shell);

  std::string cp_src, cp_dst;
  CpOptions cp;
  auto* c_cp = app.add_subcommand(
      "cp", "copy files in or out: space cp ./f ID:/root/  |  space cp -r ID:/root/dir ./  |  - is stdin/stdout");
  c_cp->add_option("SRC", cp_src)->required();
  c_cp->add_option("DST", cp_dst)->required();
  c_cp->add_flag("-r,--recursive", cp.recursive, "copy a directory (as one tar stream; with -, the tar itself)");
  c_cp->add_flag("-p,--parents", cp.parents, "make missing parent directories on the receiving side");

  std::string files_path, files_to;
  bool files_flag = false;
  auto* c_files = app.add_subcommand("files", "the files of a sandbox: ls, stat, mkdir, mv, rm");
  c_files->require_subcommand(1);
  auto* c_files_ls = c_files->add_subcommand("ls", "list a directory: space files ls ID PATH");
  auto* c_files_stat = c_files->add_subcommand("stat", "type, size, mode, owner, time of a path");
  auto* c_files_mkdir = c_files->add_subcommand("mkdir", "make a directory");
  c_files_mkdir->add_flag("-p,--parents", files_flag, "make missing parents too; no error if it exists");
  auto* c_files_rm = c_files->add_subcommand("rm", "remove a file or an empty directory");
  c_files_rm->add_flag("-r,--recursive", files_flag, "remove a directory and everything in it");
  for (auto* c : {c_files_ls, c_files_stat, c_files_mkdir, c_files_rm}) {
    c->add_option("ID", id)->required();
    c->add_option("PATH", files_path)->required();
  }
  auto* c_files_mv = c_files->add_subcommand("mv", "move or rename: space files mv ID FROM TO");
  c_files_mv->add_option("ID", id)->required();
  c_files_mv->add_option("FROM", files_path)->required();
  c_files_mv->add_option("TO", files_to)->required();

  bool follow = false;
  auto* c_logs = app.add_subcommand("logs", "output of a background process");
  c_logs->add_option("ID", id)->required();
  c_logs->add_option("PROCID", proc)->required();
  c_logs->add_flag("--follow,-f", follow, "keep streaming until the process exits");

  auto* c_ps = app.add_subcommand("ps", "background processes of a sandbox");
  c_ps->add_option("ID", id)->required();

  ExecOptions start;
  auto* c_start = addStartCommand(app, id, start);

  auto* c_kill = app.add_subcommand("kill", "signal a background process (default TERM)");
  c_kill->add_option("ID", id)->required();
  c_kill->add_option("PROCID", proc)->required();
  c_kill->add_option("SIG", sig);

  NetOptions net;
  bool net_follow = false;
  auto* c_net = app.add_subcommand("net",
                                   "show or change a sandbox's egress policy: space net ID [--allow R] [--deny R] "
                                   "[--remove R] [--reset] [--mode M]");
  // Not required at parse time: `space net log ID` has no ID before "log".
  c_net->add_option("ID", id);
  c_net->add_option("--mode", net.mode, "deny-all, allow-list or allow-all-public")
      ->check(CLI::IsMember({"deny-all", "allow-list", "allow-all-public"}));
  addRepeatable(c_net, "--allow", net.allow,
                "add an allow rule: DOMAIN, *.SUFFIX, IP, CIDR or [IPv6]/LEN, then :PORT[,PORT] (repeatable)");
  addRepeatable(c_net, "--deny", net.deny, "add a deny rule, same forms (repeatable)");
  addRepeatable(c_net, "--remove", net.remove, "remove the rules for this target (and port, when given) (repeatable)");
  c_net->add_flag("--reset", net.reset, "drop every rule and go back to deny-all (before --allow/--deny)");
  c_net->add_option("--tls", net.tls, "intercept-bound or intercept-all (every allowed TLS host, Host held to SNI)")
      ->check(CLI::IsMember({"intercept-bound", "intercept-all"}));
  auto* c_net_log =
      c_net->add_subcommand("log", "the gateway's decisions for a sandbox, as a table (--json: raw lines)");
  std::string net_log_id;
  c_net_log->add_option("ID", net_log_id)->required();
  c_net_log->add_flag("--follow,-f", net_follow, "keep printing new lines");

  SecretOptions secret;
  std::vector<std::string> secret_names;
  auto* c_secret =
      app.add_subcommand("secret", "credentials the egress gateway injects (values never enter a sandbox)");
  c_secret->require_subcommand(1);
  auto* c_secret_set = c_secret->add_subcommand("set", "store a secret: space secret set NAME --value-file F --host H");
  c_secret_set->add_option("NAME", secret.name)->required();
  c_secret_set->add_option("--value-file", secret.value_file, "file holding the value (- for stdin)")->required();
  addRepeatable(c_secret_set, "--host", secret.hosts, "host the value may be sent to, exact or *.suffix (repeatable)")
      ->required();
  c_secret_set->add_option("--header", secret.header, "header that carries it (default Authorization)");
  c_secret_set->add_option("--format", secret.format, "set the header to this, {} = the value (e.g. \"Bearer {}\")");
  addRepeatable(c_secret_set, "--method", secret.methods,
                "only requests with this method get it, e.g. GET (repeatable; default any)");
  addRepeatable(c_secret_set, "--path-prefix", secret.path_prefixes,
                "only requests whose path starts with this get it, e.g. /v1/ (repeatable; default any)");
  auto* c_secret_ls = c_secret->add_subcommand("ls", "list secrets (names and bindings only)");
  auto* c_secret_rm = c_secret->add_subcommand("rm", "remove secrets");
  c_secret_rm->add_option("NAME", secret_names)->required();

  auto* c_node = app.add_subcommand("node", "what this node offers: isolation tiers, accelerator, egress");
  bool drain_delete = false;
  auto* c_node_drain = c_node->add_subcommand(
      "drain", "take the node out of service: creates and forks refused, pools emptied; a stop then leaves nothing");
  c_node_drain->add_flag("--delete-sandboxes", drain_delete, "also delete every sandbox of the node");

  auto* c_key = app.add_subcommand("key", "API keys for TCP clients (run on the daemon's host)");
  c_key->require_subcommand(1);
  auto* c_key_create = c_key->add_subcommand("create", "make a key; prints the secret once");
  c_key_create->add_option("NAME", name)->required();
  auto* c_key_ls = c_key->add_subcommand("ls", "list keys");
  auto* c_key_revoke = c_key->add_subcommand("revoke", "revoke a key");
  c_key_revoke->add_option("ID", id)->required();
  auto* c_key_rotate = c_key->add_subcommand(
      "rotate", "snapshot keys: rewrap every data key from snapshot_kek_previous to snapshot_kek");
  std::string purge_older;
  auto* c_key_purge = c_key->add_subcommand("purge", "delete the records of revoked keys");
  c_key_purge->add_option("--older-than", purge_older, "only keys revoked at least this long ago, e.g. 30d");
  c_key->alias("keys");

  TemplateBuildOptions tb;
  auto* c_tpl = app.add_subcommand("template", "sandbox templates");
  c_tpl->require_subcommand(1);
  auto* c_tpl_build = c_tpl->add_subcommand("build", "build a template (progress on stderr)");
  c_tpl_build->add_option("NAME", tb.name)->required();
  c_tpl_build->add_option("--debootstrap", tb.debootstrap, "Debian suite, e.g. bookworm");
  c_tpl_build->add_option("--packages", tb.packages, "comma-separated extra packages");
  c_tpl_build->add_option("--variant", tb.variant, "debootstrap variant (default minbase)");
  c_tpl_build->add_option("--mirror", tb.mirror, "Debian mirror URL");
  c_tpl_build->add_option(
      "--from-dir", tb.from_dir,
      "a root filesystem directory on the daemon's host (packed and uploaded when SPACE_HOST is TCP)");
  c_tpl_build->add_option("--from-tar", tb.from_tar,
                          "a root filesystem tarball on the daemon's host (uploaded when SPACE_HOST is TCP)");
  c_tpl_build->add_option("--tar", tb.tar,
                          "a root filesystem tarball here (plain, gzip, zstd, xz; - for stdin), uploaded");
  auto* c_tpl_ls = c_tpl->add_subcommand("ls", "list templates");
  auto* c_tpl_rm = c_tpl->add_subcommand("rm", "remove a template");
  c_tpl_rm->add_option("NAME", name)->required();
  auto* c_tpl_warm =
      c_tpl->add_subcommand("warm", "make the template's VM memory snapshot now (else on first vm create)");
  c_tpl_warm->add_option("NAME", name)->required();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  if (app.get_subcommands().empty()) {
    fmt::print("{}", app.help());
    return 0;
  }

  auto ctx_or = contextFromEnv(json);
  if (!ctx_or) {
    fmt::print(stderr, "space: {}\nhint: SPACE_HOST is unix:///PATH or http://HOST:PORT\n", ctx_or.error().message);
    return 2;
  }
  Context& ctx = *ctx_or;
  if (c_create->parsed()) return cmdCreate(ctx, create);
  if (c_ls->parsed()) return cmdLs(ctx, ls_labels, ls_state);
  if (c_inspect->parsed()) return cmdInspect(ctx, id);
  if (c_rm->parsed()) return cmdRm(ctx, rm_ids);
  if (c_exec->parsed()) return cmdExec(ctx, id, exec);
  if (c_run->parsed()) return cmdRun(ctx, run_create, run_exec);
  if (c_shell->parsed()) return cmdShell(ctx, id, shell);
  if (c_cp->parsed()) return cmdCp(ctx, cp_src, cp_dst, cp);
  if (c_files_ls->parsed()) return cmdFilesLs(ctx, id, files_path);
  if (c_files_stat->parsed()) return cmdFilesStat(ctx, id, files_path);
  if (c_files_mkdir->parsed()) return cmdFilesMkdir(ctx, id, files_path, files_flag);
  if (c_files_mv->parsed()) return cmdFilesMv(ctx, id, files_path, files_to);
  if (c_files_rm->parsed()) return cmdFilesRm(ctx, id, files_path, files_flag);
  if (c_logs->parsed()) return cmdLogs(ctx, id, proc, follow);
  if (c_ps->parsed()) return cmdPs(ctx, id);
  if (c_start->parsed()) return cmdStart(ctx, id, start);
  if (c_kill->parsed()) return cmdKill(ctx, id, proc, sig);
  if (c_net_log->parsed()) return cmdNetLog(ctx, net_log_id, net_follow);
  if (c_net->parsed()) {
    if (id.empty())
      return fail(&ctx, Error{ErrorKind::kInvalidArgument, 0,
                              "space net ID [--allow R] [--deny R] [--remove R] [--reset] [--mode M] [--tls T] | space "
                              "net log ID [--follow]"});
    return cmdNet(ctx, id, net);
  }
  if (c_secret_set->parsed()) return cmdSecretSet(ctx, secret);
  if (c_secret_ls->parsed()) return cmdSecretLs(ctx);
  if (c_secret_rm->parsed()) return cmdSecretRm(ctx, secret_names);
  if (c_node->parsed()) return c_node_drain->parsed() ? cmdNodeDrain(ctx, drain_delete) : cmdNode(ctx);
  if (c_key_create->parsed()) return cmdKeyCreate(ctx, name);
  if (c_key_ls->parsed()) return cmdKeyLs(ctx);
  if (c_key_revoke->parsed()) return cmdKeyRevoke(ctx, id);
  if (c_key_rotate->parsed()) return cmdKeyRotate(ctx);
  if (c_key_purge->parsed()) return cmdKeyPurge(ctx, purge_older);
  if (c_tpl_build->parsed()) return cmdTemplateBuild(ctx, tb);
  if (c_tpl_ls->parsed()) return cmdTemplateLs(ctx);
  if (c_tpl_rm->parsed()) return cmdTemplateRm(ctx, name);
  if (c_tpl_warm->parsed()) return cmdTemplateWarm(ctx, name);
  if (c_snapshot_rm->parsed()) return cmdSnapshotRm(ctx, snap_ids);
  if (c_snapshot_export->parsed()) return cmdSnapshotExport(ctx, snap_ref, archive_out);
  if (c_snapshot_import->parsed()) return cmdSnapshotImport(ctx, archive_in, id);
  if (c_snapshot->parsed()) {
    if (id.empty())
      return fail(
          &ctx, Error{ErrorKind::kInvalidArgument, 0, "space snapshot ID [--name N] | space snapshot rm SNAPSHOT..."});
    return cmdSnapshot(ctx, id, snap_name);
  }
  if (c_history->parsed()) return cmdHistory(ctx, id);
  if (c_rollback->parsed()) return cmdRollback(ctx, id, snap_ref, restore);
  if (c_fork->parsed()) return cmdFork(ctx, id, fork_count, snap_ref, restore, fork_ttl);
  if (c_ttl->parsed()) return cmdTtl(ctx, id, ttl_value);
  if (c_pause->parsed()) return cmdPauseResume(ctx, rm_ids, true);
  if (c_resume->parsed()) return cmdPauseResume(ctx, rm_ids, false);
  return 2;
}
