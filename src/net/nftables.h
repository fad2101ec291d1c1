// The one nftables table SPACE owns, `inet space`. Installed atomically (one transaction that creates the
// table, flushes it and fills it), removed by deleting only that table; nothing else on the host is read or
// changed. From every sandbox link (interfaces named kHostLinkPrefix*):
//   - TCP to the gateway's explicit-proxy port on the host end -> space-egress's proxy port;
//   - all other TCP -> space-egress's transparent port (original destination kept in conntrack);
//   - UDP/53 -> space-egress's DNS port;
//   - everything else to the host (input) or beyond (forward) is dropped, and sandboxes cannot be reached
//     from other sandboxes either;
//   - the gateway's own ports (transparent, proxy, DNS) accept nothing that did not come from a sandbox
//     link through those redirects: not from other interfaces, not from loopback.
#pragma once

#include <cstdint>
#include <string>

#include "common/result.h"

namespace space::net {

constexpr const char* kTableFamily = "inet";
constexpr const char* kTableName = "space";

struct EgressPorts {
  uint16_t transparent = 15001;
  uint16_t proxy = 15002;
  uint16_t dns = 15053;
  uint16_t explicit_proxy_port = 3128;  // what HTTP(S)_PROXY in the sandbox points at, on the host end
};

// The ruleset text (for review and tests).
std::string ruleset(const EgressPorts& ports);

Status installTable(const EgressPorts& ports);
Status removeTable();  // ok when it does not exist
Result<bool> tableExists();
Result<std::string> listTable();  // `nft list table inet space`

}  // namespace space::net
