// The sandboxes space-egress serves, keyed by the source subnet that identifies each (pushed by spaced over
// the control socket), and checked against the host link each sandbox's traffic must arrive on (V8). Connections take a
// snapshot (shared_ptr<const Sandbox>) so an update never changes the rules under a request in flight; new connections
// and requests see the update.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/result.h"
#include "egress/address.h"
#include "egress/policy.h"
#include "egress/secrets.h"
#include "egress/tls_ca.h"

namespace space::egress {

struct Sandbox {
  std::string id;
  std::vector<Cidr> sources;
  // The host end of the sandbox's link (a jail's veth, a VM's tap, "spc..."): its packets arrive there and
  // nowhere else. Empty: not checked (a registration from a standalone config that names no link).
  std::string link;
  Policy policy;
  std::vector<SecretBinding> secrets;
  std::shared_ptr<tls::CertAuthority> ca;

  // Whether TLS to host (a name the connection was allowed for) is terminated: a secret is bound to it,
  // or the policy intercepts all allowed TLS.
  bool intercepts(std::string_view host) const;
};

class Registry {
 public:
  // Refuses an id that exists or a source subnet that overlaps another sandbox's.
  Status add(std::shared_ptr<const Sandbox> sb);
  Status replace(std::shared_ptr<const Sandbox> sb);  // same id, e.g. a policy update
  Status remove(const std::string& id);
  std::shared_ptr<const Sandbox> bySource(const IpAddress& ip) const;
  // Who sent what arrived on interface `arrival_ifindex` from `ip`: the sandbox owning the address, when
  // that sandbox names no link or this is its link. A source of a sandbox arriving on another interface
  // (a guest spoofing its neighbour) is nobody's: sb null, wrong_link true. An arrival of 0 (unknown)
  // matches no link.
  struct Sender {
    std::shared_ptr<const Sandbox> sb;
    bool wrong_link = false;
  };
  Sender sender(const IpAddress& ip, int arrival_ifindex) const;
  std::shared_ptr<const Sandbox> byId(const std::string& id) const;
  std::vector<Cidr> subnets() const;
  size_t size() const;

 private:
  bool onLink(const std::string& link, int arrival_ifindex) const;

  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<const Sandbox>> by_id_;
  // Link name -> ifindex as last resolved. A link made again under its name (a rollback's new veth, a
  // restored VM's tap) gets a new index: a mismatch resolves the name once more before it refuses.
  mutable std::map<std::string, int> link_index_;
};

}  // namespace space::egress
