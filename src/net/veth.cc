#include "net/veth.h"

#include "common/defer.h"
#include "sys/rtnetlink.h"

namespace space::net {

Result<SandboxLink> SandboxLink::create(int netns_fd, const std::string& host_name, const SandboxSubnet& subnet) {
  if (!host_name.starts_with(kHostLinkPrefix))
    return makeError(ErrorKind::kInvalidArgument, "host link '{}' must start with '{}'", host_name, kHostLinkPrefix);
  ASSIGN_OR_RETURN(auto host, sys::Rtnl::open());
  TRY(host.addVeth(host_name, "eth0", netns_fd));
  Defer undo([&] { (void)host.deleteLink(host_name); });
  TRY(host.addAddressV4(host_name, subnet.hostAddress(), SandboxSubnet::kPrefix));
  TRY(host.setUp(host_name));
  ASSIGN_OR_RETURN(auto inside, sys::Rtnl::open(netns_fd));
  TRY(inside.setUp("lo"));
  TRY(inside.addAddressV4("eth0", subnet.sandboxAddress(), SandboxSubnet::kPrefix));
  TRY(inside.setUp("eth0"));
  TRY(inside.addDefaultRouteV4(subnet.hostAddress()));
  undo.dismiss();
  return SandboxLink(host_name, subnet);
}

SandboxLink::SandboxLink(SandboxLink&& o) noexcept : host_name_(std::move(o.host_name_)), subnet_(o.subnet_) {
  o.host_name_.clear();
}

SandboxLink::~SandboxLink() {
  if (!host_name_.empty()) (void)deleteHostLink(host_name_);
}

Status deleteHostLink(const std::string& host_name) {
  ASSIGN_OR_RETURN(auto host, sys::Rtnl::open());
  return host.deleteLink(host_name);
}

Result<UniqueFd> createSandboxTap(const std::string& tap_name, const SandboxSubnet& subnet) {
  if (!tap_name.starts_with(kHostLinkPrefix))
    return makeError(ErrorKind::kInvalidArgument, "tap '{}' must start with '{}'", tap_name, kHostLinkPrefix);
  ASSIGN_OR_RETURN(auto host, sys::Rtnl::open());
  // Closing the descriptor on any failure below removes the tap again.
  ASSIGN_OR_RETURN(UniqueFd tap, host.addTap(tap_name));
  // A fixed address per /30 (locally administered, "SH" for the sandbox's host end): a VM rolled back to
  // a snapshot finds its gateway where its ARP cache says, on the tap made anew for it.
  uint32_t i = subnet.network >> 2;
  const unsigned char mac[6] = {0x02,
                                0x53,
                                0x48,
                                static_cast<unsigned char>(i >> 16),
                                static_cast<unsigned char>(i >> 8),
                                static_cast<unsigned char>(i)};
  TRY(host.setMac(tap_name, mac));
  TRY(host.addAddressV4(tap_name, subnet.hostAddress(), SandboxSubnet::kPrefix));
  TRY(host.setUp(tap_name));
  return tap;
}

}  // namespace space::net
