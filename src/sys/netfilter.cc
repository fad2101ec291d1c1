#include "sys/netfilter.h"

#include <netinet/in.h>

// From <linux/netfilter_ipv4.h> and <linux/netfilter_ipv6/ip6_tables.h>, which clash with glibc's
// <netinet/in.h>; both are 80 in the kernel ABI.
#ifndef SO_ORIGINAL_DST
#define SO_ORIGINAL_DST 80
#endif
#ifndef IP6T_SO_ORIGINAL_DST
#define IP6T_SO_ORIGINAL_DST 80
#endif

namespace space::sys {

Result<sockaddr_storage> originalDestination(int fd, bool v6) {
  sockaddr_storage ss{};
  socklen_t len = v6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
  // conntrack fills a sockaddr_in (SOL_IP) or sockaddr_in6 (SOL_IPV6) with the pre-NAT destination.
  int rc = v6 ? getsockopt(fd, SOL_IPV6, IP6T_SO_ORIGINAL_DST, &ss, &len)
              : getsockopt(fd, SOL_IP, SO_ORIGINAL_DST, &ss, &len);
  if (rc != 0) return sysError(errno, "getsockopt SO_ORIGINAL_DST on fd {}", fd);
  return ss;
}

}  // namespace space::sys
