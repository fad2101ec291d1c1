// The sandboxes space-egress serves, keyed by the source subnet that identifies each (pushed by spaced over
// the control socket). Connections take a snapshot (shared_ptr<const Sandbox>) so an update never changes
// the rules under a request in flight; new connections and requests see the update.
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
  std::shared_ptr<const Sandbox> byId(const std::string& id) const;
  std::vector<Cidr> subnets() const;
  size_t size() const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<const Sandbox>> by_id_;
};

}  // namespace space::egress
