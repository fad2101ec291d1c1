#include "runtime/host/network.h"

#include <fcntl.h>
#include <net/if.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include "common/unique_fd.h"
#include "net/veth.h"

namespace space::host {

std::optional<net::SandboxSubnet> persistedSubnet(const nlohmann::json& state) {
  if (!state.contains("net") || !state["net"].is_object() || !state["net"].contains("network")) return std::nullopt;
  net::SandboxSubnet s;
  s.network = state["net"]["network"].get<uint32_t>();
  return s;
}

std::string persistedLink(const nlohmann::json& state) {
  if (!state.contains("net") || !state["net"].is_object()) return {};
  return state["net"].value("link", std::string());
}

std::optional<runtime::SandboxNetwork> persistedNetwork(const nlohmann::json& state) {
  auto subnet = persistedSubnet(state);
  if (!subnet) return std::nullopt;
  return runtime::SandboxNetwork{*subnet, persistedLink(state)};
}

std::string linkNameFor(const net::SandboxSubnet& subnet) {
  // The /30 index within the IPv4 space: "spc" + at most 8 hex digits.
  return fmt::format("{}{:x}", net::kHostLinkPrefix, subnet.network >> 2);
}

Status attachNetwork(net::AddressPool& pool, pid_t pid, nlohmann::json& state) {
  ASSIGN_OR_RETURN(net::SandboxSubnet subnet, pool.allocate());
  std::string link = linkNameFor(subnet);
  state["net"] = {{"subnet", subnet.cidr()}, {"network", subnet.network}, {"link", link}};
  std::string ns_path = "/proc/" + std::to_string(pid) + "/ns/net";
  UniqueFd ns(open(ns_path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!ns) return sysError(errno, "open {}", ns_path);
  ASSIGN_OR_RETURN(net::SandboxLink made, net::SandboxLink::create(ns.get(), link, subnet));
  // The link lives as long as the sandbox: destroy (or the namespace's end) removes it, not this scope.
  made.release();
  return ok();
}

Status relinkNetwork(pid_t pid, const nlohmann::json& state) {
  auto subnet = persistedSubnet(state);
  if (!subnet) return ok();
  std::string link = persistedLink(state);
  // The old namespace's end goes with it, asynchronously: the host end may still be there.
  if (auto st = net::deleteHostLink(link);
      !st && st.error().kind != ErrorKind::kNotFound && st.error().sys_errno != ENODEV)
    return st;
  std::string ns_path = "/proc/" + std::to_string(pid) + "/ns/net";
  UniqueFd ns(open(ns_path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!ns) return sysError(errno, "open {}", ns_path);
  ASSIGN_OR_RETURN(net::SandboxLink made, net::SandboxLink::create(ns.get(), link, *subnet));
  made.release();
  return ok();
}

Status detachNetwork(net::AddressPool& pool, const nlohmann::json& state) {
  auto subnet = persistedSubnet(state);
  if (!subnet) return ok();
  std::string link = persistedLink(state);
  if (!link.empty()) {
    // Usually gone already: the pair died with the sandbox's namespace.
    auto st = net::deleteHostLink(link);
    if (!st && st.error().kind != ErrorKind::kNotFound && st.error().sys_errno != ENODEV) return st;
  }
  pool.release(*subnet);
  return ok();
}

std::map<std::string, std::string> proxyEnv(const net::SandboxSubnet& subnet, const NetworkConfig& config) {
  std::string proxy = fmt::format("http://{}:{}", subnet.hostText(), config.explicit_proxy_port);
  return {{"HTTP_PROXY", proxy},
          {"HTTPS_PROXY", proxy},
          {"http_proxy", proxy},
          {"https_proxy", proxy},
          {"NO_PROXY", "localhost,127.0.0.1"},
          {"no_proxy", "localhost,127.0.0.1"}};
}

void removeUnknownLinks(const std::set<std::string>& keep) {
  struct if_nameindex* list = if_nameindex();
  if (!list) return;
  std::vector<std::string> stale;
  for (struct if_nameindex* i = list; i->if_index != 0; ++i) {
    std::string name = i->if_name;
    if (name.rfind(net::kHostLinkPrefix, 0) == 0 && !keep.count(name)) stale.push_back(name);
  }
  if_freenameindex(list);
  for (const auto& name : stale) {
    spdlog::warn("reconcile: removing sandbox link {} that belongs to no sandbox", name);
    if (auto st = net::deleteHostLink(name); !st)
      spdlog::error("reconcile: delete link {}: {}", name, st.error().message);
  }
}

}  // namespace space::host
