// DaemonConfig: every spaced flag; a JSON config file (--config) may set any of them, flags win.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/result.h"
#include "runtime/runtime.h"

namespace space::core {

// 0x0fff0000: below kUidBase (0x10000000, the first sandbox uid), outside the usual /etc/subuid ranges.
inline constexpr uint32_t kDefaultEgressUid = 0x0fff0000;

struct DaemonConfig {
  std::string socket_path = "/run/space/spaced.sock";
  std::string listen;  // "HOST:PORT"; empty = no TCP listener
  std::string state_dir = "/var/lib/space";
  std::string agent_binary;    // default: space-agent next to spaced
  std::string seccomp_policy;  // default: policies/seccomp/default.json next to the install
  std::string default_template = "python";
  int pool_size = 4;           // pre-started sandboxes per template
  std::string pool_templates;  // comma-separated; empty = default template only
  runtime::Limits default_limits;
  int64_t default_ttl_s = 0;  // 0 = no TTL unless asked
  int64_t max_ttl_s = 7 * 24 * 3600;
  // A paused sandbox's TTL stands still (core/ttl.h); this bounds how long it may stay paused. 0 = forever.
  int64_t max_paused_s = 30 * 24 * 3600;
  uint64_t disk_volume_bytes = 64ull << 30;  // sparse size of the XFS volume holding writable layers
  int max_sandboxes = 1000;
  // The largest template tree a client may upload (PUT /v1/templates/{name}/archive): its content, data
  // plus 512 bytes a member, uncompressed. Bigger uploads get 413.
  uint64_t template_upload_max_mib = 4096;
  std::string cgroup_parent = "space";  // sandboxes' cgroups live in <hierarchy>/<cgroup_parent>/<id>
  std::string log_level = "info";
  // The vm tier. Enabled when the guest artifacts exist (scripts/vm/build-guest) and QEMU runs; `auto`
  // isolation picks it only where KVM is proven (vm_accel).
  std::string vm_kernel = "/var/cache/space/vm/vmlinuz";
  // The customer's key-encryption key for snapshot archives (archive/kek.h): "file:<path>", "env:<VAR>" or
  // "command:<key-id>=<program> [args]". Empty: export and import are refused.
  std::string snapshot_kek;
  // The KEK snapshot_kek replaces (same syntax), while keys are rotated: POST /v1/keys/rotate re-wraps
  // every tenant's data key from it to snapshot_kek. Empty: nothing to rotate from.
  std::string snapshot_kek_previous;
  std::string snapshot_tenant = "default";
  std::string vm_initrd = "/var/cache/space/vm/initramfs.cpio";
  bool vm_allow_tcg = true;  // false: KVM or no vm tier (no software emulation)
  // "auto": KVM where a probe VM proves it runs the guest, else TCG (when allowed); "kvm": the probe must
  // succeed or spaced does not start; "tcg": emulation only, KVM never tried.
  std::string vm_accel = "auto";
  std::string vm_kvm_probe_cache_dir = "/run/space/kvm-probe";  // host-wide probe verdicts (a tmpfs)
  std::string uid_registry_dir = "/run/space/uid-blocks";       // host-wide claims of sandbox uid ranges
  std::string vm_kvm_node = "/dev/kvm";     // the KVM device spaced checks (config file only: tests move it)
  int64_t vm_kvm_probe_timeout_ms = 20000;  // how long the probe VM has to reach its agent under KVM
  int vm_pool_size = 2;                     // pooled VMs per pooled template (restored and stopped)
  uint64_t vm_default_memory_mib = 0;       // guest RAM of a VM when create gives none (0: default_limits)
  // The egress gateway (docs/egress.md). "auto": on when space-egress is found and nftables works, with a
  // log line saying which; "on": required (start-up fails without it); "off": jail sandboxes keep a
  // netns with only lo.
  std::string egress = "auto";
  std::string egress_binary;                  // default: space-egress next to spaced
  std::string egress_pool = "10.200.0.0/16";  // sandbox /30s are cut from it
  uint16_t egress_transparent_port = 15001;
  uint16_t egress_proxy_port = 15002;
  uint16_t egress_dns_port = 15053;
  std::string egress_upstream_resolvers;  // "1.1.1.1,9.9.9.9:53"; empty: the host's resolv.conf
  std::string egress_upstream_ca_file;    // CAs upstream certificates must chain to; empty: the system's
  // The gateway's own host identity (SECURITY.md E18): below the sandbox uid blocks (uid_blocks.h), far above
  // regular accounts; one per host (there is one gateway per host). Never 0.
  uint32_t egress_uid = kDefaultEgressUid;
  uint32_t egress_gid = kDefaultEgressUid;
  std::string egress_seccomp_policy;  // default: egress.json beside seccomp_policy
  // DANGER, tests only: CIDRs whose private addresses space-egress treats as public. Settable only in the
  // daemon's config file (no flag, no API); handed to space-egress's config file; logged loudly.
  std::vector<std::string> egress_test_external_subnets;

  static Result<DaemonConfig> fromJson(const nlohmann::json& j, DaemonConfig base);
  nlohmann::json toJson() const;
};

}  // namespace space::core
