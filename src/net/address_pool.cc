#include "net/address_pool.h"

#include <arpa/inet.h>

namespace space::net {

std::string ipv4Text(uint32_t v) {
  return fmt::format("{}.{}.{}.{}", v >> 24, (v >> 16) & 0xff, (v >> 8) & 0xff, v & 0xff);
}

std::string SandboxSubnet::cidr() const { return fmt::format("{}/{}", ipv4Text(network), kPrefix); }
std::string SandboxSubnet::hostText() const { return ipv4Text(hostAddress()); }
std::string SandboxSubnet::sandboxText() const { return ipv4Text(sandboxAddress()); }

Result<AddressPool> AddressPool::parse(const std::string& pool) {
  size_t slash = pool.find('/');
  if (slash == std::string::npos) return makeError(ErrorKind::kInvalidArgument, "pool '{}' needs a /prefix", pool);
  in_addr a{};
  if (inet_pton(AF_INET, pool.substr(0, slash).c_str(), &a) != 1)
    return makeError(ErrorKind::kInvalidArgument, "pool '{}' is not an IPv4 CIDR", pool);
  int prefix = 0;
  try {
    prefix = std::stoi(pool.substr(slash + 1));
  } catch (...) {
    return makeError(ErrorKind::kInvalidArgument, "bad prefix in '{}'", pool);
  }
  if (prefix < 8 || prefix > 29) return makeError(ErrorKind::kInvalidArgument, "pool prefix must be /8../29");
  AddressPool p;
  p.prefix_ = prefix;
  p.base_ = ntohl(a.s_addr) & (~uint32_t(0) << (32 - prefix));
  return p;
}

std::string AddressPool::cidr() const { return fmt::format("{}/{}", ipv4Text(base_), prefix_); }

Result<SandboxSubnet> AddressPool::allocate() {
  std::lock_guard lock(mu_);
  size_t n = capacity();
  for (size_t i = 0; i < n; ++i) {
    uint32_t idx = uint32_t((next_ + i) % n);
    uint32_t net = base_ + idx * 4;
    if (used_.insert(net).second) {
      next_ = uint32_t((idx + 1) % n);
      return SandboxSubnet{net};
    }
  }
  return makeError(ErrorKind::kResourceExhausted, "address pool {} is exhausted", cidr());
}

Status AddressPool::reserve(const SandboxSubnet& s) {
  std::lock_guard lock(mu_);
  if (s.network < base_ || s.network >= base_ + capacity() * 4 || s.network % 4)
    return makeError(ErrorKind::kInvalidArgument, "{} is not a subnet of pool {}", s.cidr(), cidr());
  if (!used_.insert(s.network).second) return makeError(ErrorKind::kConflict, "{} is already in use", s.cidr());
  return ok();
}

void AddressPool::release(const SandboxSubnet& s) {
  std::lock_guard lock(mu_);
  used_.erase(s.network);
}

}  // namespace space::net
