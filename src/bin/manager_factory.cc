#include "bin/manager_factory.h"

#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

#include "archive/kek.h"
#include "archive/key_store.h"
#include "core/egress_supervisor.h"
#include "core/file_table.h"
#include "core/manager_impl.h"
#include "core/memory_sealer.h"
#include "runtime/jail/jail_runtime.h"
#include "runtime/registry.h"
#include "runtime/vm/vm_runtime.h"

namespace space::core {

namespace {

struct Egress {
  std::unique_ptr<EgressSupervisor> supervisor;
  std::shared_ptr<net::AddressPool> pool;
};

// The egress switch: "off" keeps sandboxes without a network; "auto" turns egress on when it can and
// says loudly when it cannot; "on" refuses to start without it.
Result<std::optional<Egress>> startEgress(const DaemonConfig& config, std::string* off_reason) {
  if (config.egress == "off") {
    *off_reason = "egress is off by configuration (egress = off; start spaced with --egress on or auto)";
    spdlog::warn("egress: OFF by configuration; jail sandboxes get a network namespace with only lo (no network)");
    return std::optional<Egress>();
  }
  ASSIGN_OR_RETURN(net::AddressPool pool, net::AddressPool::parse(config.egress_pool));
  EgressSettings s;
  s.binary = config.egress_binary;
  s.state_dir = config.state_dir;
  s.ports.transparent = config.egress_transparent_port;
  s.ports.proxy = config.egress_proxy_port;
  s.ports.dns = config.egress_dns_port;
  s.pool = pool.cidr();
  s.upstream_resolvers = config.egress_upstream_resolvers;
  s.upstream_ca_file = config.egress_upstream_ca_file;
  s.test_external_subnets = config.egress_test_external_subnets;
  s.uid = config.egress_uid;
  s.gid = config.egress_gid;
  s.seccomp_policy = config.egress_seccomp_policy;
  if (!config.listen.empty()) s.protected_listeners.push_back(config.listen);
  auto sup = EgressSupervisor::start(s);
  if (!sup) {
    if (config.egress == "on") return tl::unexpected(sup.error().context("egress is on"));
    *off_reason = "egress is unavailable: " + sup.error().message;
    spdlog::warn("egress: OFF, unavailable ({}); jail sandboxes get a network namespace with only lo (no network)",
                 sup.error().message);
    return std::optional<Egress>();
  }
  spdlog::info("egress: on; sandbox pool {}, space-egress pid {}", s.pool, (*sup)->pid());
  return std::optional<Egress>(Egress{std::move(*sup), std::make_shared<net::AddressPool>(pool)});
}

}  // namespace

// A snapshot_kek that cannot be read, or that does not open the data key this node already holds, is
// found now rather than at the first export or import. Between setting a new key and `space key rotate`
// the previous key still opens it: that is only a warning.
Status checkSnapshotKek(const DaemonConfig& config) {
  if (config.snapshot_kek.empty()) return ok();
  auto kek = archive::kekFromSpec(config.snapshot_kek);
  if (!kek) return tl::unexpected(kek.error().context("snapshot_kek"));
  archive::KeyStore keys(config.state_dir + "/keys");
  auto dek = keys.dataKey(config.snapshot_tenant, **kek);
  if (dek) return ok();
  if (!config.snapshot_kek_previous.empty()) {
    auto previous = archive::kekFromSpec(config.snapshot_kek_previous);
    if (previous && keys.dataKey(config.snapshot_tenant, **previous)) {
      spdlog::warn(
          "snapshot_kek does not open the stored data key yet; snapshot_kek_previous does: run "
          "`space key rotate`");
      return ok();
    }
  }
  Error e = dek.error();
  e.kind = ErrorKind::kInvalidArgument;
  return tl::unexpected(e.context(
      fmt::format("snapshot_kek does not open the data key in {}/keys (a different key than the one it was made with; "
                  "set snapshot_kek_previous to the old key and run `space key rotate`)",
                  config.state_dir)));
}

Result<std::unique_ptr<SandboxManager>> makeSandboxManager(const DaemonConfig& config) {
  if (mkdir(config.state_dir.c_str(), 0711) < 0 && errno != EEXIST)
    return sysError(errno, "create state directory {}", config.state_dir);
  // Each sandbox's init resolves its root under <state_dir>/sandboxes as its own unprivileged uid before
  // pivot_root: the state directory must be traversable (x) by others, never readable.
  struct stat st;
  if (stat(config.state_dir.c_str(), &st) < 0) return sysError(errno, "stat {}", config.state_dir);
  if ((st.st_mode & 0011) != 0011 && chmod(config.state_dir.c_str(), (st.st_mode & 07777) | 0011) < 0)
    return sysError(errno, "make state directory {} traversable", config.state_dir);
  ASSIGN_OR_RETURN(auto store, store::Store::open(config.state_dir));
  TRY(checkSnapshotKek(config));
  if (config.max_sandboxes > static_cast<int>(kSlotsPerBlock))
    return makeError(ErrorKind::kInvalidArgument, "max_sandboxes {} exceeds the {} uid ranges a node has",
                     config.max_sandboxes, kSlotsPerBlock);
  bool legacy_sandboxes = false;
  if (access((config.state_dir + "/uid-block").c_str(), F_OK) != 0) {
    store::SandboxFilter all;
    all.include_pooled = true;
    auto rows = store->listSandboxes(all);
    legacy_sandboxes = rows && !rows->empty();
  }
  ensureFileTable(config);
  ASSIGN_OR_RETURN(UidBlock uid_block, UidBlock::claim(config.uid_registry_dir, config.state_dir, legacy_sandboxes));

  jail::JailConfig jail_config;
  jail_config.state_dir = config.state_dir;
  jail_config.agent_binary = config.agent_binary;
  jail_config.seccomp_policy = config.seccomp_policy;
  jail_config.cgroup_parent = config.cgroup_parent;
  jail_config.volume_bytes = config.disk_volume_bytes;
  std::string egress_off_reason;
  ASSIGN_OR_RETURN(auto egress, startEgress(config, &egress_off_reason));
  if (egress) {
    jail_config.network_pool = egress->pool;
    jail_config.network.explicit_proxy_port = egress->supervisor->ports().explicit_proxy_port;
  }
  ASSIGN_OR_RETURN(auto jail, jail::JailRuntime::create(jail_config));

  // The vm tier: present when the guest artifacts and QEMU are; a node without them runs jails only and
  // says why to every vm request.
  runtime::Registry runtimes;
  std::string layers_dir = jail->volume().layersDir(), snapshots_dir = jail->volume().snapshotsDir();
  runtimes.add(std::move(jail));
  {
    vm::VmConfig vm_config;
    vm_config.state_dir = config.state_dir;
    vm_config.kernel = config.vm_kernel;
    vm_config.initrd = config.vm_initrd;
    vm_config.allow_tcg = config.vm_allow_tcg;
    vm_config.accel = config.vm_accel == "kvm"   ? vm::AccelMode::kKvm
                      : config.vm_accel == "tcg" ? vm::AccelMode::kTcg
                                                 : vm::AccelMode::kAuto;
    vm_config.kvm_probe_cache_dir = config.vm_kvm_probe_cache_dir;
    vm_config.kvm_node = config.vm_kvm_node;
    vm_config.kvm_probe_timeout = std::chrono::milliseconds(config.vm_kvm_probe_timeout_ms);
    vm_config.cgroup_parent = config.cgroup_parent;
    if (egress) vm_config.network_pool = egress->pool;
    vm_config.layers_dir = layers_dir;
    vm_config.snapshots_dir = snapshots_dir;
    vm_config.memory_sealer = makeMemorySealer(config.snapshot_kek, config.state_dir + "/keys", config.snapshot_tenant);
    auto made = vm::VmRuntime::create(vm_config);
    if (made) {
      runtimes.add(std::move(*made));
    } else if (config.vm_accel == "kvm") {
      // The operator asked for KVM: a node that cannot give it does not start.
      return tl::unexpected(made.error().context("vm_accel is kvm"));
    } else {
      spdlog::warn("vm tier unavailable: {}", made.error().message);
      // What the host offers all the same, for the operator who builds the guest next.
      nlohmann::json details = nlohmann::json::object();
      if (auto pre = vm::kvmPreflight()) details["kvm"] = pre->toJson();
      runtimes.addUnavailable("vm", made.error().message, std::move(details));
    }
  }

  auto templates = std::make_unique<store::TemplateBuilder>(config.state_dir, *store);
  if (auto st = templates->removeInterruptedBuilds(); !st) return tl::unexpected(st.error());
  auto manager = std::make_unique<Manager>(config, std::move(store), std::move(runtimes), std::move(templates));
  manager->setUidBlock(std::move(uid_block));
  if (egress)
    manager->setEgress(std::move(egress->supervisor));
  else
    manager->setEgressOffReason(egress_off_reason);
  TRY(manager->startBackground());
  return std::unique_ptr<SandboxManager>(std::move(manager));
}

}  // namespace space::core
