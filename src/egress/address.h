// IP addresses, CIDRs and the default-deny classification of SECURITY.md's egress section. Every input
// here comes from a sandbox (a Host header, an SNI, a CONNECT target, a DNS answer), so parsers answer
// instead of asserting.
#pragma once

#include <array>
#include <compare>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

struct sockaddr;

namespace space::egress {

struct IpAddress {
  bool v6 = false;
  std::array<uint8_t, 16> bytes{};  // IPv4: the first four bytes, network order

  static IpAddress fromV4(uint32_t host_order);
  uint32_t v4Value() const;  // host order; only for !v6
  std::string str() const;
  auto operator<=>(const IpAddress&) const = default;
};

// Strict canonical forms only: dotted quad of four decimal bytes, or RFC 4291 IPv6 text (no zone id).
Result<IpAddress> parseIp(std::string_view text);

// inet_aton's reading of a name that looks like an IPv4 literal: 2130706433, 0177.0.0.1, 0x7f.1, 127.1.
// Browsers and libcs treat these as addresses, so the gateway must too (E2). nullopt when the text is not
// such a literal (it is then a name).
std::optional<IpAddress> parseLooseIpv4(std::string_view text);

// A host as written in a URL, Host header, CONNECT line or SNI: "[v6]" or bare v6, or any IPv4 spelling.
// nullopt: it is a name. Error: it tried to be an address but is malformed or carries a zone id (E3).
Result<std::optional<IpAddress>> parseHostLiteral(std::string_view host);

std::optional<IpAddress> fromSockaddr(const struct sockaddr* sa);

struct Cidr {
  IpAddress base;
  int prefix = 0;

  bool contains(const IpAddress& ip) const;
  std::string str() const;
  bool operator==(const Cidr&) const = default;
};
Result<Cidr> parseCidr(std::string_view text);  // "10.0.0.0/8", "fc00::/7", or a bare address (/32, /128)

// IPv4 carried inside IPv6: ::ffff:0:0/96, 64:ff9b::/96, 64:ff9b:1::/48, 2002::/16 (6to4), 2001::/32
// (Teredo, client address inverted). Also the deprecated IPv4-compatible ::/96 (except :: and ::1).
std::optional<IpAddress> embeddedIpv4(const IpAddress& ip);

// Facts about this host that the default-deny list needs (E12).
struct HostFacts {
  std::vector<IpAddress> host_addresses;  // every address configured on the host
  std::vector<Cidr> sandbox_subnets;      // every sandbox's subnet and the pool they come from
  struct Listener {
    IpAddress address;  // unspecified (0.0.0.0 / ::) means every address
    uint16_t port = 0;
  };
  std::vector<Listener> gateway_listeners;  // space-egress's own ports, spaced's API
};

enum class AddressClass {
  kPublic,
  kReserved,  // one of the fixed default-deny ranges; an explicit operator CIDR rule may allow it
  kLateral,   // the host itself, the gateway, another sandbox: never allowed (E12)
};

struct Classification {
  AddressClass cls = AddressClass::kPublic;
  std::string range;  // "169.254.0.0/16", "host address", "sandbox subnet 10.200.0.4/30", ...
  IpAddress judged;   // the address judged: the IPv4 unwrapped from an IPv6 form, or the input
};

// Classifies ip (after unwrapping embedded IPv4) against the default-deny list and the host facts.
// test_external_subnets: CIDRs the test harness declared external; a reserved address inside one is public.
Classification classify(const IpAddress& ip, uint16_t port, const HostFacts& facts,
                        const std::vector<Cidr>& test_external_subnets);

// The fixed list, for documentation and tests.
const std::vector<Cidr>& defaultDenyRanges();

}  // namespace space::egress
