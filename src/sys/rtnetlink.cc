#include "sys/rtnetlink.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_link.h>
#include <linux/if_tun.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/veth.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <cstring>
#include <thread>

namespace space::sys {

namespace {

// Builds one netlink message in a fixed buffer; attributes may nest.
struct Msg {
  alignas(nlmsghdr) char buf[4096];
  nlmsghdr* hdr() { return reinterpret_cast<nlmsghdr*>(buf); }

  Msg(uint16_t type, uint16_t flags) {
    std::memset(buf, 0, sizeof buf);
    hdr()->nlmsg_len = NLMSG_LENGTH(0);
    hdr()->nlmsg_type = type;
    hdr()->nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK | flags;
  }
  void* tail() { return buf + NLMSG_ALIGN(hdr()->nlmsg_len); }
  template <class T>
  T* put(const T& v) {
    void* at = tail();
    std::memcpy(at, &v, sizeof v);
    hdr()->nlmsg_len = NLMSG_ALIGN(hdr()->nlmsg_len) + sizeof v;
    return static_cast<T*>(at);
  }
  rtattr* attr(uint16_t type, const void* data, size_t len) {
    auto* a = static_cast<rtattr*>(tail());
    a->rta_type = type;
    a->rta_len = uint16_t(RTA_LENGTH(len));
    if (len) std::memcpy(RTA_DATA(a), data, len);
    hdr()->nlmsg_len = NLMSG_ALIGN(hdr()->nlmsg_len) + RTA_ALIGN(a->rta_len);
    return a;
  }
  rtattr* begin(uint16_t type) { return attr(type, nullptr, 0); }
  void end(rtattr* nest) { nest->rta_len = uint16_t(static_cast<char*>(tail()) - reinterpret_cast<char*>(nest)); }
  void str(uint16_t type, const std::string& s) { attr(type, s.c_str(), s.size() + 1); }
};

Result<UniqueFd> socketHere() {
  UniqueFd fd(socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE));
  if (!fd) return sysError(errno, "socket(NETLINK_ROUTE)");
  sockaddr_nl sa{};
  sa.nl_family = AF_NETLINK;
  if (bind(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) return sysError(errno, "bind netlink");
  return fd;
}

}  // namespace

Result<Rtnl> Rtnl::open(int netns_fd) {
  if (netns_fd < 0) {
    ASSIGN_OR_RETURN(auto fd, socketHere());
    return Rtnl(std::move(fd));
  }
  // setns(CLONE_NEWNET) affects only the calling thread; a throw-away thread keeps this one where it is.
  Result<UniqueFd> out = makeError(ErrorKind::kInternal, "unset");
  std::thread t([&] {
    if (setns(netns_fd, CLONE_NEWNET) != 0) {
      out = sysError(errno, "setns(netns fd {})", netns_fd);
      return;
    }
    out = socketHere();
  });
  t.join();
  if (!out) return tl::unexpected(out.error());
  return Rtnl(std::move(*out));
}

Status Rtnl::request(void* msg, size_t len, const char* what) {
  auto* h = static_cast<nlmsghdr*>(msg);
  h->nlmsg_seq = ++seq_;
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  if (sendto(fd_.get(), msg, len, 0, reinterpret_cast<sockaddr*>(&kernel), sizeof kernel) < 0)
    return sysError(errno, "netlink send ({})", what);
  alignas(nlmsghdr) char reply[8192];
  while (true) {
    ssize_t n = recv(fd_.get(), reply, sizeof reply, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return sysError(errno, "netlink recv ({})", what);
    }
    for (auto* r = reinterpret_cast<nlmsghdr*>(reply); NLMSG_OK(r, size_t(n)); r = NLMSG_NEXT(r, n)) {
      if (r->nlmsg_seq != h->nlmsg_seq || r->nlmsg_type != NLMSG_ERROR) continue;
      auto* err = static_cast<nlmsgerr*>(NLMSG_DATA(r));
      if (err->error == 0) return ok();
      return sysError(-err->error, "{}", what);
    }
  }
}

Status Rtnl::addVeth(const std::string& host_name, const std::string& peer_name, int peer_netns_fd) {
  if (host_name.size() >= IFNAMSIZ || peer_name.size() >= IFNAMSIZ)
    return makeError(ErrorKind::kInvalidArgument, "interface names are at most {} bytes", IFNAMSIZ - 1);
  Msg m(RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL);
  m.put(ifinfomsg{});
  m.str(IFLA_IFNAME, host_name);
  rtattr* linkinfo = m.begin(IFLA_LINKINFO);
  m.str(IFLA_INFO_KIND, "veth");
  rtattr* data = m.begin(IFLA_INFO_DATA);
  rtattr* peer = m.begin(VETH_INFO_PEER);
  m.put(ifinfomsg{});  // the peer's own ifinfomsg precedes its attributes
  m.str(IFLA_IFNAME, peer_name);
  uint32_t fd = uint32_t(peer_netns_fd);
  if (peer_netns_fd >= 0) m.attr(IFLA_NET_NS_FD, &fd, sizeof fd);
  m.end(peer);
  m.end(data);
  m.end(linkinfo);
  return request(m.buf, m.hdr()->nlmsg_len, fmt::format("create veth {} <-> {}", host_name, peer_name).c_str());
}

Result<UniqueFd> Rtnl::addTap(const std::string& name) {
  if (name.size() >= IFNAMSIZ)
    return makeError(ErrorKind::kInvalidArgument, "interface names are at most {} bytes", IFNAMSIZ - 1);
  UniqueFd tun(::open("/dev/net/tun", O_RDWR | O_CLOEXEC));
  if (!tun) return sysError(errno, "open /dev/net/tun");
  ifreq ifr{};
  // IFF_VNET_HDR: QEMU's virtio-net passes offload metadata through the tap.
  ifr.ifr_flags = IFF_TAP | IFF_NO_PI | IFF_VNET_HDR;
  std::strncpy(ifr.ifr_name, name.c_str(), IFNAMSIZ - 1);
  // TUNSETIFF attaches to an existing device of that name instead of failing: refuse that.
  if (linkIndex(name)) return makeError(ErrorKind::kConflict, "link {} exists already", name);
  if (ioctl(tun.get(), TUNSETIFF, &ifr) != 0) return sysError(errno, "TUNSETIFF {}", name);
  return tun;
}

Status Rtnl::deleteLink(const std::string& name) {
  ASSIGN_OR_RETURN(int index, linkIndex(name));
  Msg m(RTM_DELLINK, 0);
  ifinfomsg ifi{};
  ifi.ifi_index = index;
  m.put(ifi);
  return request(m.buf, m.hdr()->nlmsg_len, fmt::format("delete link {}", name).c_str());
}

Result<int> Rtnl::linkIndex(const std::string& name) {
  // if_nametoindex asks the namespace of its own socket, which is the thread's, not ours: use netlink.
  Msg m(RTM_GETLINK, 0);
  m.hdr()->nlmsg_flags = NLM_F_REQUEST;
  m.put(ifinfomsg{});
  m.str(IFLA_IFNAME, name);
  m.hdr()->nlmsg_seq = ++seq_;
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  if (sendto(fd_.get(), m.buf, m.hdr()->nlmsg_len, 0, reinterpret_cast<sockaddr*>(&kernel), sizeof kernel) < 0)
    return sysError(errno, "netlink send (get link {})", name);
  alignas(nlmsghdr) char reply[16384];
  ssize_t n = recv(fd_.get(), reply, sizeof reply, 0);
  if (n < 0) return sysError(errno, "netlink recv (get link {})", name);
  for (auto* r = reinterpret_cast<nlmsghdr*>(reply); NLMSG_OK(r, size_t(n)); r = NLMSG_NEXT(r, n)) {
    if (r->nlmsg_type == NLMSG_ERROR) {
      auto* err = static_cast<nlmsgerr*>(NLMSG_DATA(r));
      return sysError(-err->error, "get link {}", name);
    }
    if (r->nlmsg_type == RTM_NEWLINK) return static_cast<ifinfomsg*>(NLMSG_DATA(r))->ifi_index;
  }
  return makeError(ErrorKind::kNotFound, "link {} not found", name);
}

Status Rtnl::setUp(const std::string& name) {
  ASSIGN_OR_RETURN(int index, linkIndex(name));
  Msg m(RTM_NEWLINK, 0);
  ifinfomsg ifi{};
  ifi.ifi_index = index;
  ifi.ifi_flags = IFF_UP;
  ifi.ifi_change = IFF_UP;
  m.put(ifi);
  return request(m.buf, m.hdr()->nlmsg_len, fmt::format("set {} up", name).c_str());
}

Status Rtnl::setMac(const std::string& name, const unsigned char mac[6]) {
  ASSIGN_OR_RETURN(int index, linkIndex(name));
  Msg m(RTM_NEWLINK, 0);
  ifinfomsg ifi{};
  ifi.ifi_index = index;
  m.put(ifi);
  m.attr(IFLA_ADDRESS, mac, 6);
  return request(m.buf, m.hdr()->nlmsg_len, fmt::format("set address of {}", name).c_str());
}

Status Rtnl::addressV4(uint16_t type, uint16_t flags, const std::string& name, uint32_t address, int prefix,
                       const char* what) {
  ASSIGN_OR_RETURN(int index, linkIndex(name));
  Msg m(type, flags);
  ifaddrmsg ifa{};
  ifa.ifa_family = AF_INET;
  ifa.ifa_prefixlen = uint8_t(prefix);
  ifa.ifa_index = uint32_t(index);
  m.put(ifa);
  uint32_t be = htonl(address);
  m.attr(IFA_LOCAL, &be, 4);
  m.attr(IFA_ADDRESS, &be, 4);
  return request(m.buf, m.hdr()->nlmsg_len, fmt::format("{} {}", what, name).c_str());
}

Status Rtnl::addAddressV4(const std::string& name, uint32_t address, int prefix) {
  return addressV4(RTM_NEWADDR, NLM_F_CREATE | NLM_F_EXCL, name, address, prefix, "add address to");
}

Status Rtnl::deleteAddressV4(const std::string& name, uint32_t address, int prefix) {
  return addressV4(RTM_DELADDR, 0, name, address, prefix, "delete address from");
}

// Replaces any default route: a VM forked from another keeps its parent's until its own is set.
Status Rtnl::addDefaultRouteV4(uint32_t gateway) {
  Msg m(RTM_NEWROUTE, NLM_F_CREATE | NLM_F_REPLACE);
  rtmsg rt{};
  rt.rtm_family = AF_INET;
  rt.rtm_table = RT_TABLE_MAIN;
  rt.rtm_protocol = RTPROT_BOOT;
  rt.rtm_scope = RT_SCOPE_UNIVERSE;
  rt.rtm_type = RTN_UNICAST;
  m.put(rt);
  uint32_t be = htonl(gateway);
  m.attr(RTA_GATEWAY, &be, 4);
  return request(m.buf, m.hdr()->nlmsg_len, "add default route");
}

}  // namespace space::sys
