#include "egress/registry.h"

#include <net/if.h>

namespace space::egress {

bool Sandbox::intercepts(std::string_view host) const {
  if (policy.tls == TlsMode::kInterceptAll) return true;
  for (const auto& s : secrets)
    if (s.boundTo(host)) return true;
  return false;
}

namespace {
bool overlaps(const Cidr& a, const Cidr& b) { return a.contains(b.base) || b.contains(a.base); }
}  // namespace

Status Registry::add(std::shared_ptr<const Sandbox> sb) {
  std::lock_guard lock(mu_);
  if (by_id_.count(sb->id)) return makeError(ErrorKind::kConflict, "sandbox {} is already registered", sb->id);
  for (const auto& [id, other] : by_id_)
    for (const auto& a : other->sources)
      for (const auto& b : sb->sources)
        if (overlaps(a, b))
          return makeError(ErrorKind::kConflict, "subnet {} overlaps {} of sandbox {}", b.str(), a.str(), id);
  by_id_[sb->id] = std::move(sb);
  return ok();
}

Status Registry::replace(std::shared_ptr<const Sandbox> sb) {
  std::lock_guard lock(mu_);
  auto it = by_id_.find(sb->id);
  if (it == by_id_.end()) return makeError(ErrorKind::kNotFound, "sandbox {} is not registered", sb->id);
  it->second = std::move(sb);
  return ok();
}

Status Registry::remove(const std::string& id) {
  std::lock_guard lock(mu_);
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return makeError(ErrorKind::kNotFound, "sandbox {} is not registered", id);
  link_index_.erase(it->second->link);
  by_id_.erase(it);
  return ok();
}

std::shared_ptr<const Sandbox> Registry::bySource(const IpAddress& ip) const {
  IpAddress judged = embeddedIpv4(ip).value_or(ip);  // a v4 sandbox seen through a dual-stack socket
  std::lock_guard lock(mu_);
  for (const auto& [id, sb] : by_id_)
    for (const auto& c : sb->sources)
      if (c.contains(ip) || c.contains(judged)) return sb;
  return nullptr;
}

bool Registry::onLink(const std::string& link, int arrival_ifindex) const {
  if (arrival_ifindex <= 0) return false;
  {
    std::lock_guard lock(mu_);
    auto it = link_index_.find(link);
    if (it != link_index_.end() && it->second == arrival_ifindex) return true;
  }
  int now = static_cast<int>(if_nametoindex(link.c_str()));  // 0: no such link (any more)
  std::lock_guard lock(mu_);
  link_index_[link] = now;
  return now == arrival_ifindex;
}

Registry::Sender Registry::sender(const IpAddress& ip, int arrival_ifindex) const {
  auto sb = bySource(ip);
  if (!sb || sb->link.empty() || onLink(sb->link, arrival_ifindex)) return {sb, false};
  return {nullptr, true};
}

std::shared_ptr<const Sandbox> Registry::byId(const std::string& id) const {
  std::lock_guard lock(mu_);
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : it->second;
}

std::vector<Cidr> Registry::subnets() const {
  std::lock_guard lock(mu_);
  std::vector<Cidr> out;
  for (const auto& [id, sb] : by_id_) out.insert(out.end(), sb->sources.begin(), sb->sources.end());
  return out;
}

size_t Registry::size() const {
  std::lock_guard lock(mu_);
  return by_id_.size();
}

}  // namespace space::egress
