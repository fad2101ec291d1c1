// A jail sandbox's link to the host: a veth pair whose host end ("spc" + index) carries the /30's .1 and
// whose sandbox end ("eth0", inside the sandbox's netns) carries .2 with a default route via .1. The
// nftables table (nftables.h) matches host ends by the "spc" prefix, so every sandbox link is covered the
// moment it exists.
#pragma once

#include <string>

#include "common/result.h"
#include "common/unique_fd.h"
#include "net/address_pool.h"

namespace space::net {

constexpr const char* kHostLinkPrefix = "spc";

class SandboxLink {
 public:
  // netns_fd: an fd of the sandbox's network namespace (/proc/PID/ns/net, or from a pidfd via
  // ioctl(PIDFD_GET_NET_NAMESPACE) where the kernel has it). host_name: "spc<something>", at most 15 bytes.
  static Result<SandboxLink> create(int netns_fd, const std::string& host_name, const SandboxSubnet& subnet);
  SandboxLink(SandboxLink&& o) noexcept;
  SandboxLink& operator=(SandboxLink&&) = delete;
  ~SandboxLink();  // deletes the pair (deleting one end removes both)

  const std::string& hostName() const { return host_name_; }
  const SandboxSubnet& subnet() const { return subnet_; }
  void release() { host_name_.clear(); }  // keep the link (daemon hand-over); reconcile removes it later

 private:
  SandboxLink(std::string name, SandboxSubnet s) : host_name_(std::move(name)), subnet_(s) {}
  std::string host_name_;
  SandboxSubnet subnet_;
};

// Deletes a host link by name (reconciling leftovers). kNotFound when it does not exist.
Status deleteHostLink(const std::string& host_name);

// A microVM's link: a tap ("spc" + index) with the same addressing (.1 on the host end) and the same
// nftables rules (they match the prefix). The guest configures .2 itself (its agent, at hand-over).
// Returns the tap's descriptor, for the VMM (QEMU `-netdev tap,fd=`): spaced makes it as root and the
// unprivileged, network-less VMM inherits it. The tap is not persistent: it exists while a descriptor
// of it is open, so it goes away with its VMM however that ends (deleteHostLink removes it earlier).
Result<UniqueFd> createSandboxTap(const std::string& tap_name, const SandboxSubnet& subnet);

}  // namespace space::net
