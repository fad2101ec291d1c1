// DaemonConfig <-> JSON. The file format uses the flag names (with underscores), so that an operator can
// move any flag into the file; unknown keys are refused because a misspelt key would silently do nothing.
#include "core/config.h"

#include <cmath>

#include "core/uid_blocks.h"

namespace space::core {
namespace {

using nlohmann::json;

Status typeError(const std::string& key, const char* want) {
  return makeError(ErrorKind::kInvalidArgument, "config: '{}' must be {}", key, want);
}

Status readString(const json& j, const std::string& key, std::string& out) {
  if (!j.is_string()) return typeError(key, "a string");
  out = j.get<std::string>();
  return ok();
}

template <class Int>
Status readInt(const json& j, const std::string& key, Int& out, int64_t min, int64_t max) {
  if (!j.is_number_integer()) return typeError(key, "an integer");
  if (j.is_number_unsigned() && j.get<uint64_t>() > static_cast<uint64_t>(max)) {
    return makeError(ErrorKind::kInvalidArgument, "config: '{}' must be at most {}", key, max);
  }
  int64_t v = j.get<int64_t>();
  if (v < min || v > max) {
    return makeError(ErrorKind::kInvalidArgument, "config: '{}' must be between {} and {}", key, min, max);
  }
  out = static_cast<Int>(v);
  return ok();
}

Status readLimits(const json& j, runtime::Limits& l) {
  if (!j.is_object()) return typeError("default_limits", "an object");
  for (const auto& [key, v] : j.items()) {
    std::string name = "default_limits." + key;
    if (key == "cpus") {
      if (!v.is_number() || !(v.get<double>() > 0) || v.get<double>() > 64)
        return typeError(name, "a number in (0, 64]");
      l.cpu_millis = static_cast<uint32_t>(std::lround(v.get<double>() * 1000));
    } else if (key == "memory_mib") {
      uint64_t mib = 0;
      TRY(readInt(v, name, mib, 16, int64_t{1} << 30));
      l.memory_bytes = mib << 20;
    } else if (key == "pids") {
      TRY(readInt(v, name, l.pids, 8, 4194304));
    } else if (key == "disk_mib") {
      uint64_t mib = 0;
      TRY(readInt(v, name, mib, 16, int64_t{1} << 30));
      l.disk_bytes = mib << 20;
    } else if (key == "disk_inodes") {
      TRY(readInt(v, name, l.disk_inodes, 64, int64_t{1} << 40));
    } else if (key == "nofile") {
      TRY(readInt(v, name, l.nofile, 64, 1 << 20));
    } else {
      return makeError(ErrorKind::kInvalidArgument, "config: unknown key '{}'", name);
    }
  }
  return ok();
}

}  // namespace

Result<DaemonConfig> DaemonConfig::fromJson(const json& j, DaemonConfig base) {
  if (!j.is_object()) return makeError(ErrorKind::kInvalidArgument, "config: the file must hold a JSON object");
  DaemonConfig c = std::move(base);
  for (const auto& [key, v] : j.items()) {
    if (key == "socket") {
      TRY(readString(v, key, c.socket_path));
    } else if (key == "listen") {
      TRY(readString(v, key, c.listen));
    } else if (key == "state_dir") {
      TRY(readString(v, key, c.state_dir));
    } else if (key == "agent_binary") {
      TRY(readString(v, key, c.agent_binary));
    } else if (key == "seccomp_policy") {
      TRY(readString(v, key, c.seccomp_policy));
    } else if (key == "default_template") {
      TRY(readString(v, key, c.default_template));
    } else if (key == "pool_size") {
      TRY(readInt(v, key, c.pool_size, 0, 1000));
    } else if (key == "cgroup_parent") {
      TRY(readString(v, key, c.cgroup_parent));
      if (c.cgroup_parent.empty() || c.cgroup_parent.find_first_of("/.") != std::string::npos)
        return makeError(ErrorKind::kInvalidArgument, "cgroup_parent must be a plain directory name");
    } else if (key == "pool_templates") {
      TRY(readString(v, key, c.pool_templates));
    } else if (key == "default_limits") {
      TRY(readLimits(v, c.default_limits));
    } else if (key == "default_ttl_s") {
      TRY(readInt(v, key, c.default_ttl_s, 0, int64_t{1} << 40));
    } else if (key == "max_ttl_s") {
      TRY(readInt(v, key, c.max_ttl_s, 0, int64_t{1} << 40));
    } else if (key == "max_paused_s") {
      TRY(readInt(v, key, c.max_paused_s, 0, int64_t{1} << 40));
    } else if (key == "disk_volume_bytes") {
      TRY(readInt(v, key, c.disk_volume_bytes, int64_t{300} << 20, int64_t{1} << 50));  // mkfs.xfs: 300 MiB at least
    } else if (key == "max_sandboxes") {
      TRY(readInt(v, key, c.max_sandboxes, 0, 1000000));
    } else if (key == "template_upload_max_mib") {
      TRY(readInt(v, key, c.template_upload_max_mib, 1, int64_t{1} << 30));
    } else if (key == "snapshot_kek") {
      TRY(readString(v, key, c.snapshot_kek));
    } else if (key == "snapshot_kek_previous") {
      TRY(readString(v, key, c.snapshot_kek_previous));
    } else if (key == "snapshot_tenant") {
      TRY(readString(v, key, c.snapshot_tenant));
    } else if (key == "vm_kernel") {
      TRY(readString(v, key, c.vm_kernel));
    } else if (key == "vm_initrd") {
      TRY(readString(v, key, c.vm_initrd));
    } else if (key == "vm_allow_tcg") {
      if (!v.is_boolean()) return makeError(ErrorKind::kInvalidArgument, "config: '{}' must be true or false", key);
      c.vm_allow_tcg = v.get<bool>();
    } else if (key == "vm_accel") {
      TRY(readString(v, key, c.vm_accel));
      if (c.vm_accel != "auto" && c.vm_accel != "kvm" && c.vm_accel != "tcg")
        return makeError(ErrorKind::kInvalidArgument, "config: vm_accel must be \"auto\", \"kvm\" or \"tcg\"");
    } else if (key == "uid_registry_dir") {
      TRY(readString(v, key, c.uid_registry_dir));
    } else if (key == "vm_kvm_node") {
      TRY(readString(v, key, c.vm_kvm_node));
    } else if (key == "vm_kvm_probe_cache_dir") {
      TRY(readString(v, key, c.vm_kvm_probe_cache_dir));
    } else if (key == "vm_kvm_probe_timeout_ms") {
      TRY(readInt(v, key, c.vm_kvm_probe_timeout_ms, 1, 600000));
    } else if (key == "vm_default_memory_mib") {
      TRY(readInt(v, key, c.vm_default_memory_mib, 0, int64_t{1} << 30));
      if (c.vm_default_memory_mib != 0 && c.vm_default_memory_mib < 64)
        return makeError(ErrorKind::kInvalidArgument,
                         "config: 'vm_default_memory_mib' must be 0 (the default limits) or at least 64");
    } else if (key == "vm_pool_size") {
      TRY(readInt(v, key, c.vm_pool_size, 0, 1000));
    } else if (key == "egress") {
      // true/false, or "auto" | "on" | "off".
      if (v.is_boolean()) {
        c.egress = v.get<bool>() ? "on" : "off";
      } else {
        TRY(readString(v, key, c.egress));
        if (c.egress != "auto" && c.egress != "on" && c.egress != "off")
          return makeError(ErrorKind::kInvalidArgument, "config: egress must be true, false or \"auto\"");
      }
    } else if (key == "egress_binary") {
      TRY(readString(v, key, c.egress_binary));
    } else if (key == "egress_pool") {
      TRY(readString(v, key, c.egress_pool));
    } else if (key == "egress_transparent_port") {
      TRY(readInt(v, key, c.egress_transparent_port, 1, 65535));
    } else if (key == "egress_proxy_port") {
      TRY(readInt(v, key, c.egress_proxy_port, 1, 65535));
    } else if (key == "egress_dns_port") {
      TRY(readInt(v, key, c.egress_dns_port, 1, 65535));
    } else if (key == "egress_upstream_resolvers") {
      TRY(readString(v, key, c.egress_upstream_resolvers));
    } else if (key == "egress_upstream_ca_file") {
      TRY(readString(v, key, c.egress_upstream_ca_file));
    } else if (key == "egress_uid" || key == "egress_gid") {
      uint32_t& out = key == "egress_uid" ? c.egress_uid : c.egress_gid;
      // Not root, and not inside the sandbox uid blocks: the gateway must share its uid with no sandbox.
      TRY(readInt(v, key, out, 1, int64_t{kUidBase} - 1));
    } else if (key == "egress_seccomp_policy") {
      TRY(readString(v, key, c.egress_seccomp_policy));
    } else if (key == "egress_test_external_subnets") {
      if (!v.is_array())
        return makeError(ErrorKind::kInvalidArgument, "config: {} must be an array of CIDR strings", key);
      c.egress_test_external_subnets.clear();
      for (const auto& e : v) {
        if (!e.is_string())
          return makeError(ErrorKind::kInvalidArgument, "config: {} must be an array of CIDR strings", key);
        c.egress_test_external_subnets.push_back(e.get<std::string>());
      }
    } else if (key == "log_level") {
      TRY(readString(v, key, c.log_level));
      static const char* kLevels[] = {"trace", "debug", "info", "warn", "error", "critical", "off"};
      bool known = false;
      for (const char* l : kLevels) known = known || c.log_level == l;
      if (!known)
        return makeError(ErrorKind::kInvalidArgument,
                         "config: log_level '{}' is not one of trace, debug, info, warn, error, critical, off",
                         c.log_level);
    } else {
      return makeError(ErrorKind::kInvalidArgument, "config: unknown key '{}'", key);
    }
  }
  if (c.default_ttl_s > c.max_ttl_s && c.max_ttl_s > 0) {
    return makeError(ErrorKind::kInvalidArgument, "config: default_ttl_s ({}) exceeds max_ttl_s ({})", c.default_ttl_s,
                     c.max_ttl_s);
  }
  return c;
}

nlohmann::json DaemonConfig::toJson() const {
  return {
      {"socket", socket_path},
      {"listen", listen},
      {"state_dir", state_dir},
      {"agent_binary", agent_binary},
      {"seccomp_policy", seccomp_policy},
      {"default_template", default_template},
      {"pool_size", pool_size},
      {"pool_templates", pool_templates},
      {"cgroup_parent", cgroup_parent},
      {"default_limits",
       {{"cpus", default_limits.cpu_millis / 1000.0},
        {"memory_mib", default_limits.memory_bytes >> 20},
        {"pids", default_limits.pids},
        {"disk_mib", default_limits.disk_bytes >> 20},
        {"disk_inodes", default_limits.disk_inodes},
        {"nofile", default_limits.nofile}}},
      {"default_ttl_s", default_ttl_s},
      {"max_ttl_s", max_ttl_s},
      {"max_paused_s", max_paused_s},
      {"disk_volume_bytes", disk_volume_bytes},
      {"max_sandboxes", max_sandboxes},
      {"template_upload_max_mib", template_upload_max_mib},
      {"log_level", log_level},
      {"vm_kernel", vm_kernel},
      {"snapshot_kek", snapshot_kek.empty() ? "" : snapshot_kek.substr(0, snapshot_kek.find(':')) + ":…"},
      {"snapshot_kek_previous",
       snapshot_kek_previous.empty() ? "" : snapshot_kek_previous.substr(0, snapshot_kek_previous.find(':')) + ":…"},
      {"snapshot_tenant", snapshot_tenant},
      {"vm_initrd", vm_initrd},
      {"vm_allow_tcg", vm_allow_tcg},
      {"vm_accel", vm_accel},
      {"vm_kvm_probe_cache_dir", vm_kvm_probe_cache_dir},
      {"vm_kvm_node", vm_kvm_node},
      {"uid_registry_dir", uid_registry_dir},
      {"vm_kvm_probe_timeout_ms", vm_kvm_probe_timeout_ms},
      {"vm_pool_size", vm_pool_size},
      {"vm_default_memory_mib", vm_default_memory_mib},
      {"egress", egress},
      {"egress_binary", egress_binary},
      {"egress_pool", egress_pool},
      {"egress_transparent_port", egress_transparent_port},
      {"egress_proxy_port", egress_proxy_port},
      {"egress_dns_port", egress_dns_port},
      {"egress_upstream_resolvers", egress_upstream_resolvers},
      {"egress_upstream_ca_file", egress_upstream_ca_file},
      {"egress_uid", egress_uid},
      {"egress_gid", egress_gid},
      {"egress_seccomp_policy", egress_seccomp_policy},
      {"egress_test_external_subnets", egress_test_external_subnets}};
}

}  // namespace space::core
