// A minimal rtnetlink client: the few link, address and route operations sandbox networking needs,
// without forking ip(8) per sandbox. Each call sends one request and waits for its ACK.
#pragma once

#include <cstdint>
#include <string>

#include "common/result.h"
#include "common/unique_fd.h"

namespace space::sys {

class Rtnl {
 public:
  // A NETLINK_ROUTE socket in the calling thread's network namespace, or in netns_fd's (opened from a
  // short-lived thread that joined it; the socket stays bound to that namespace).
  static Result<Rtnl> open(int netns_fd = -1);

  // A veth pair: host_name here, peer_name created directly inside peer_netns_fd.
  Status addVeth(const std::string& host_name, const std::string& peer_name, int peer_netns_fd);
  // A tap device and a descriptor of it. Not persistent: the device goes away when the last descriptor
  // is closed (for a VM's tap: when its VMM exits, however it exits).
  Result<UniqueFd> addTap(const std::string& name);
  Status deleteLink(const std::string& name);
  Result<int> linkIndex(const std::string& name);
  Status setUp(const std::string& name);
  // The link's hardware address (6 bytes), e.g. a restored VM's NIC, which keeps its template's otherwise.
  Status setMac(const std::string& name, const unsigned char mac[6]);
  Status addAddressV4(const std::string& name, uint32_t address, int prefix);     // host order
  Status deleteAddressV4(const std::string& name, uint32_t address, int prefix);  // host order
  Status addDefaultRouteV4(uint32_t gateway);  // replaces the default route if there is one

 private:
  explicit Rtnl(UniqueFd fd) : fd_(std::move(fd)) {}
  Status request(void* msg, size_t len, const char* what);
  Status addressV4(uint16_t type, uint16_t flags, const std::string& name, uint32_t address, int prefix,
                   const char* what);
  UniqueFd fd_;
  uint32_t seq_ = 1;
};

}  // namespace space::sys
