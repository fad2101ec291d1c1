#include "sys/pktinfo.h"

#include <netinet/in.h>

#include <cstring>

namespace space::sys {
namespace {

// Both pktinfo layouts fit; a few spare bytes for anything else the kernel adds.
constexpr size_t kControlBytes = CMSG_SPACE(sizeof(in_pktinfo)) + CMSG_SPACE(sizeof(in6_pktinfo)) + 64;

int ifindexFrom(msghdr& msg) {
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_PKTINFO && c->cmsg_len >= CMSG_LEN(sizeof(in_pktinfo))) {
      in_pktinfo info;
      std::memcpy(&info, CMSG_DATA(c), sizeof info);  // CMSG_DATA need not be aligned for the struct
      return info.ipi_ifindex;
    }
    if (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_PKTINFO && c->cmsg_len >= CMSG_LEN(sizeof(in6_pktinfo))) {
      in6_pktinfo info;
      std::memcpy(&info, CMSG_DATA(c), sizeof info);
      return static_cast<int>(info.ipi6_ifindex);
    }
  }
  return 0;
}

}  // namespace

Status enableArrivalInfo(int fd) {
  int one = 1;
  if (setsockopt(fd, IPPROTO_IP, IP_PKTINFO, &one, sizeof one) < 0) return sysError(errno, "setsockopt(IP_PKTINFO)");
  sockaddr_storage self{};
  socklen_t len = sizeof self;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&self), &len) == 0 && self.ss_family == AF_INET6 &&
      setsockopt(fd, IPPROTO_IPV6, IPV6_RECVPKTINFO, &one, sizeof one) < 0)
    return sysError(errno, "setsockopt(IPV6_RECVPKTINFO)");
  return ok();
}

Result<size_t> receiveWithArrival(int fd, void* buf, size_t len, sockaddr_storage* from, socklen_t* from_len,
                                  int* ifindex) {
  alignas(cmsghdr) char control[kControlBytes];
  iovec iov{buf, len};
  msghdr msg{};
  msg.msg_name = from;
  msg.msg_namelen = sizeof *from;
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n = recvmsg(fd, &msg, MSG_DONTWAIT);
  if (n < 0) return sysError(errno, "recvmsg");
  *from_len = msg.msg_namelen;
  *ifindex = ifindexFrom(msg);
  return static_cast<size_t>(n);
}

int acceptedArrivalInterface(int fd) {
  alignas(cmsghdr) char control[kControlBytes];
  socklen_t len = sizeof control;
  // The kernel writes cmsghdr records into the buffer, as recvmsg would into msg_control.
  if (getsockopt(fd, IPPROTO_IP, IP_PKTOPTIONS, control, &len) < 0) return 0;
  msghdr msg{};
  msg.msg_control = control;
  msg.msg_controllen = len;
  return ifindexFrom(msg);
}

}  // namespace space::sys
