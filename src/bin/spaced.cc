// spaced: the SPACE daemon. Flags mirror DaemonConfig; --config FILE (JSON) may set any of them and
// flags given on the command line win.
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <filesystem>
#include <fstream>
#include <thread>

#include "api/api_server.h"
#include "api/logging.h"
#include "bin/manager_factory.h"
#include "core/config.h"
#include "http/server.h"

namespace {

using namespace space;
namespace fs = std::filesystem;

std::string selfDir() {
  std::error_code ec;
  auto exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string(".") : exe.parent_path().string();
}

void fillDefaults(core::DaemonConfig& c) {
  std::string dir = selfDir();
  if (c.agent_binary.empty()) c.agent_binary = dir + "/space-agent";
  if (c.egress_binary.empty()) c.egress_binary = dir + "/space-egress";
  if (c.seccomp_policy.empty()) {
    // In a build tree the binary sits in build/bin; an installed one uses /usr/share.
    fs::path in_tree = fs::path(dir) / "../../policies/seccomp/default.json";
    std::error_code ec;
    c.seccomp_policy = fs::exists(in_tree, ec) ? fs::weakly_canonical(in_tree, ec).string()
                                               : std::string("/usr/share/space/seccomp/default.json");
  }
  if (c.egress_seccomp_policy.empty())
    c.egress_seccomp_policy = (fs::path(c.seccomp_policy).parent_path() / "egress.json").string();
}

Result<nlohmann::json> readJsonFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return makeError(ErrorKind::kNotFound, "cannot open config file {}", path);
  auto j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded()) return makeError(ErrorKind::kInvalidArgument, "config file {} is not valid JSON", path);
  return j;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"spaced: the SPACE daemon (sandboxes for code written by AI agents)"};
  core::DaemonConfig flags;
  std::string config_file;
  double default_cpus = 1.0;
  uint64_t default_memory_mib = 512, default_disk_mib = 1024;
  bool cleanup = false;
  app.set_version_flag("--version", "spaced " SPACE_VERSION);
  app.add_option("--config", config_file, "JSON file setting any flag (flags given here win)");
  app.add_flag("--cleanup", cleanup,
               "delete every sandbox of the state directory, give back the node's volume, cgroups and egress "
               "gateway, and exit (nothing is served)");
  app.add_option("--socket", flags.socket_path, "unix socket of the API (trusted by its 0660 permissions)");
  app.add_option("--listen", flags.listen, "also serve TCP on HOST:PORT (every request needs an API key)");
  app.add_option("--state-dir", flags.state_dir, "database, templates and sandbox state");
  app.add_option("--agent-binary", flags.agent_binary, "space-agent binary (default: next to spaced)");
  app.add_option("--seccomp-policy", flags.seccomp_policy, "seccomp policy JSON for sandboxes");
  app.add_option("--default-template", flags.default_template, "template used when create names none");
  app.add_option("--pool-size", flags.pool_size, "pre-started sandboxes per pooled template")
      ->check(CLI::Range(0, 1000));
  app.add_option("--pool-templates", flags.pool_templates,
                 "comma-separated templates to pool (default: the default template)");
  app.add_option("--default-cpus", default_cpus, "CPU limit when create gives none")->check(CLI::Range(0.001, 64.0));
  app.add_option("--default-memory-mib", default_memory_mib, "memory limit when create gives none")
      ->check(CLI::Range(16, 1 << 30));
  app.add_option("--default-pids", flags.default_limits.pids, "pids limit when create gives none")
      ->check(CLI::Range(8, 4194304));
  app.add_option("--default-disk-mib", default_disk_mib, "disk quota when create gives none")
      ->check(CLI::Range(16, 1 << 30));
  app.add_option("--default-ttl", flags.default_ttl_s, "TTL in seconds when create gives none (0: none)");
  app.add_option("--max-ttl", flags.max_ttl_s, "largest TTL a client may ask for, in seconds");
  app.add_option("--cgroup-parent", flags.cgroup_parent,
                 "cgroup directory (in every hierarchy) holding the sandboxes' groups");
  app.add_option("--max-sandboxes", flags.max_sandboxes, "sandboxes this node runs at most");
  app.add_option("--disk-volume-bytes", flags.disk_volume_bytes, "sparse size of the volume holding writable layers");
  app.add_option("--egress", flags.egress,
                 "the egress gateway: auto (on when it can start, else off with the reason), on (required), off")
      ->check(CLI::IsMember({"auto", "on", "off"}));
  app.add_option("--egress-binary", flags.egress_binary, "space-egress binary (default: next to spaced)");
  app.add_option("--vm-kernel", flags.vm_kernel, "guest kernel of the vm tier (scripts/vm/build-guest)");
  app.add_option("--vm-initrd", flags.vm_initrd, "guest initramfs of the vm tier (scripts/vm/build-guest)");
  app.add_flag("--vm-allow-tcg,!--vm-no-tcg", flags.vm_allow_tcg,
               "where KVM is not proven, run VMs under software emulation (--vm-no-tcg: KVM or no vm tier)");
  app.add_option(
         "--vm-accel", flags.vm_accel,
         "auto: KVM where a probe VM proves it, else TCG; kvm: KVM or spaced does not start; tcg: emulation only")
      ->check(CLI::IsMember({"auto", "kvm", "tcg"}));
  app.add_option("--vm-kvm-probe-cache", flags.vm_kvm_probe_cache_dir, "host-wide cache of KVM probe verdicts");
  app.add_option("--vm-kvm-probe-timeout-ms", flags.vm_kvm_probe_timeout_ms,
                 "how long the KVM probe VM has to reach its agent")
      ->check(CLI::Range(1, 600000));
  app.add_option("--vm-default-memory-mib", flags.vm_default_memory_mib,
                 "guest RAM of a VM when create gives none (default: as --default-memory-mib)")
      ->check(CLI::Range(64, 1 << 30));
  app.add_option("--vm-pool-size", flags.vm_pool_size, "VMMs waiting to restore per pooled template")
      ->check(CLI::Range(0, 1000));
  app.add_option("--log-level", flags.log_level, "trace, debug, info, warn, error")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "critical", "off"}));
  CLI11_PARSE(app, argc, argv);

  // Defaults, then the file, then every flag that was given.
  core::DaemonConfig config;
  if (!config_file.empty()) {
    auto j = readJsonFile(config_file);
    auto parsed = j ? core::DaemonConfig::fromJson(*j, config) : Result<core::DaemonConfig>(tl::unexpected(j.error()));
    if (!parsed) {
      fmt::print(stderr, "spaced: {}\n", parsed.error().message);
      return 2;
    }
    config = *parsed;
  }
  auto given = [&](const char* name) { return app.count(name) > 0; };
  if (given("--socket")) config.socket_path = flags.socket_path;
  if (given("--listen")) config.listen = flags.listen;
  if (given("--state-dir")) config.state_dir = flags.state_dir;
  if (given("--agent-binary")) config.agent_binary = flags.agent_binary;
  if (given("--seccomp-policy")) config.seccomp_policy = flags.seccomp_policy;
  if (given("--default-template")) config.default_template = flags.default_template;
  if (given("--pool-size")) config.pool_size = flags.pool_size;
  if (given("--pool-templates")) config.pool_templates = flags.pool_templates;
  if (given("--default-cpus")) config.default_limits.cpu_millis = static_cast<uint32_t>(default_cpus * 1000 + 0.5);
  if (given("--default-memory-mib")) config.default_limits.memory_bytes = default_memory_mib << 20;
  if (given("--default-pids")) config.default_limits.pids = flags.default_limits.pids;
  if (given("--default-disk-mib")) config.default_limits.disk_bytes = default_disk_mib << 20;
  if (given("--default-ttl")) config.default_ttl_s = flags.default_ttl_s;
  if (given("--max-ttl")) config.max_ttl_s = flags.max_ttl_s;
  if (given("--max-sandboxes")) config.max_sandboxes = flags.max_sandboxes;
  if (given("--cgroup-parent")) config.cgroup_parent = flags.cgroup_parent;
  if (given("--disk-volume-bytes")) config.disk_volume_bytes = flags.disk_volume_bytes;
  if (given("--log-level")) config.log_level = flags.log_level;
  if (given("--egress")) config.egress = flags.egress;
  if (given("--egress-binary")) config.egress_binary = flags.egress_binary;
  if (given("--vm-kernel")) config.vm_kernel = flags.vm_kernel;
  if (given("--vm-initrd")) config.vm_initrd = flags.vm_initrd;
  if (given("--vm-allow-tcg") || given("--vm-no-tcg")) config.vm_allow_tcg = flags.vm_allow_tcg;
  if (given("--vm-accel")) config.vm_accel = flags.vm_accel;
  if (given("--vm-kvm-probe-cache")) config.vm_kvm_probe_cache_dir = flags.vm_kvm_probe_cache_dir;
  if (given("--vm-kvm-probe-timeout-ms")) config.vm_kvm_probe_timeout_ms = flags.vm_kvm_probe_timeout_ms;
  if (given("--vm-pool-size")) config.vm_pool_size = flags.vm_pool_size;
  if (given("--vm-default-memory-mib")) config.vm_default_memory_mib = flags.vm_default_memory_mib;
  fillDefaults(config);

  api::setupJsonLogging(spdlog::level::from_str(config.log_level));
  // Writes to a vanished client must fail with EPIPE, not kill the daemon.
  signal(SIGPIPE, SIG_IGN);
  // SIGTERM/SIGINT are taken by a waiting thread, so no handler runs at an arbitrary point.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  api::logJson(spdlog::level::info, "starting", {{"config", config.toJson()}, {"pid", getpid()}});
  auto manager = core::makeSandboxManager(config);
  if (!manager) {
    api::logJson(spdlog::level::critical, "cannot start the sandbox manager", {{"error", manager.error().message}});
    return 1;
  }
  if (cleanup) {
    auto drained = (*manager)->drain(/*delete_sandboxes=*/true);
    nlohmann::json report = {{"drain", drained ? *drained : nlohmann::json(drained.error().message)},
                             {"released", (*manager)->releaseIfIdle()}};
    api::logJson(spdlog::level::info, "cleaned up", report);
    spdlog::shutdown();
    fmt::print("{}\n", report.dump());
    std::fflush(stdout);
    _exit(drained && drained->value("sandboxes_left", 1) == 0 ? 0 : 1);
  }
  api::ApiOptions api_options;
  api_options.template_upload_limit_bytes = config.template_upload_max_mib << 20;
  api::ApiServer api_server(**manager, api_options);
  http::Server server([&](http::Request& req, http::BodyReader& body,
                          http::ResponseWriter& resp) { api_server.handle(req, body, resp); },
                      http::ServerOptions{},
                      [&](const std::string& reason) { api_server.metrics().countRejection(reason); });
  if (auto st = server.listenUnix(config.socket_path); !st) {
    api::logJson(spdlog::level::critical, "cannot listen",
                 {{"socket", config.socket_path}, {"error", st.error().message}});
    return 1;
  }
  if (!config.listen.empty()) {
    if (auto st = server.listenTcp(config.listen); !st) {
      api::logJson(spdlog::level::critical, "cannot listen",
                   {{"listen", config.listen}, {"error", st.error().message}});
      return 1;
    }
  }
  std::thread signal_waiter([&] {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    api::logJson(spdlog::level::info, "stopping; sandboxes keep running", {{"signal", sig}});
    server.stop();
  });
  signal_waiter.detach();
  api::logJson(spdlog::level::info, "serving", {{"socket", config.socket_path}, {"listen", config.listen}});
  server.run();
  // A node with no sandbox left leaves nothing behind; one with sandboxes keeps what they run on.
  api::logJson(spdlog::level::info, "stopped", {{"released", (*manager)->releaseIfIdle()}});
  spdlog::shutdown();
  // Threads of connections that outlived the drain may still hold the manager: leave without running
  // destructors under them. Sandboxes keep running and are reattached on the next start.
  _exit(0);
}
