// Sandbox subnets: a configurable IPv4 pool (default 10.200.0.0/16) cut into /30s, one per sandbox:
// .0 network, .1 the host end (the sandbox's gateway), .2 the sandbox, .3 broadcast.
#pragma once

#include <cstdint>
#include <mutex>
#include <set>
#include <string>

#include "common/result.h"

namespace space::net {

struct SandboxSubnet {
  uint32_t network = 0;  // host order
  uint32_t hostAddress() const { return network + 1; }
  uint32_t sandboxAddress() const { return network + 2; }
  static constexpr int kPrefix = 30;
  std::string cidr() const;      // "10.200.0.4/30"
  std::string hostText() const;  // "10.200.0.5"
  std::string sandboxText() const;
};

std::string ipv4Text(uint32_t host_order);

class AddressPool {
 public:
  // pool: "10.200.0.0/16"; prefix at most /29 (room for two /30s).
  static Result<AddressPool> parse(const std::string& pool);
  Result<SandboxSubnet> allocate();
  // Marks a subnet used again (reconciling after a daemon restart).
  Status reserve(const SandboxSubnet& s);
  void release(const SandboxSubnet& s);
  std::string cidr() const;
  size_t capacity() const { return size_t(1) << (30 - prefix_); }

  AddressPool(const AddressPool& o) : base_(o.base_), prefix_(o.prefix_), used_(o.used_), next_(o.next_) {}

 private:
  AddressPool() = default;
  uint32_t base_ = 0;
  int prefix_ = 16;
  std::mutex mu_;
  std::set<uint32_t> used_;
  uint32_t next_ = 0;
};

}  // namespace space::net
