// The interface a packet or a connection arrived on (SECURITY.md V8: the gateway checks it against the
// sandbox's registered link). IP_PKTINFO / IPV6_RECVPKTINFO ancillary data for datagrams; for an
// accepted TCP socket, IP_PKTOPTIONS, which returns the IP_PKTINFO of the packet that completed the
// handshake (the kernel keeps its ifindex in the child socket). None of these needs a privilege.
#pragma once

#include <sys/socket.h>

#include <cstddef>

#include "common/result.h"

namespace space::sys {

// Asks the kernel to record arrival interfaces on `fd`: IP_PKTINFO (also for IPv4 on a dual-stack
// socket), and IPV6_RECVPKTINFO on an IPv6 one. A listening TCP socket passes it on to what it accepts.
Status enableArrivalInfo(int fd);

// recvmsg with the arrival interface: the datagram's length; `from`/`from_len` the sender, `*ifindex` the
// interface index (0 when the kernel gave none). MSG_DONTWAIT: EAGAIN when nothing is queued.
Result<size_t> receiveWithArrival(int fd, void* buf, size_t len, sockaddr_storage* from, socklen_t* from_len,
                                  int* ifindex);

// The interface an accepted TCP connection arrived on (IPv4, listener with enableArrivalInfo); 0 when the
// kernel does not say (an IPv6 connection).
int acceptedArrivalInterface(int fd);

}  // namespace space::sys
