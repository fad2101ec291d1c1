// Host network plumbing. The namespace test makes its own network namespace, veth pair and nftables table,
// sends nothing anywhere, and checks that removing them leaves nothing behind. Needs root (CAP_NET_ADMIN).
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <thread>

#include "common/defer.h"
#include "common/unique_fd.h"
#include "net/address_pool.h"
#include "net/nftables.h"
#include "net/veth.h"
#include "sys/rtnetlink.h"

using namespace space;
using namespace space::net;

namespace {

// A fresh network namespace, held by an fd only: a thread unshares, the fd outlives the thread.
UniqueFd newNetns() {
  UniqueFd fd;
  std::thread t([&] {
    if (unshare(CLONE_NEWNET) != 0) return;
    fd.reset(open(fmt::format("/proc/self/task/{}/ns/net", gettid()).c_str(), O_RDONLY | O_CLOEXEC));
  });
  t.join();
  return fd;
}

bool hostLinkExists(const std::string& name) {
  auto rtnl = sys::Rtnl::open();
  return rtnl && rtnl->linkIndex(name).has_value();
}

// Runs fn on a thread of its own inside the namespace (ns < 0: the host's).
template <class F>
void inNetns(int ns, F fn) {
  std::thread t([&] {
    if (ns >= 0 && setns(ns, CLONE_NEWNET) != 0) {
      ADD_FAILURE() << "setns: " << strerror(errno);
      return;
    }
    fn();
  });
  t.join();
}

sockaddr_in v4(uint32_t host_order, uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(host_order);
  a.sin_port = htons(port);
  return a;
}

// A TCP connect from inside ns; false when it is refused or gets no answer within wait_ms (a dropped SYN).
bool tcpConnects(int ns, uint32_t addr, uint16_t port, int wait_ms = 400) {
  bool ok = false;
  inNetns(ns, [&] {
    UniqueFd s(socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    auto a = v4(addr, port);
    if (connect(s.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
      ok = true;
      return;
    }
    if (errno != EINPROGRESS) return;
    pollfd p{s.get(), POLLOUT, 0};
    if (poll(&p, 1, wait_ms) != 1) return;
    int err = 0;
    socklen_t len = sizeof err;
    getsockopt(s.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    ok = err == 0;
  });
  return ok;
}

// from: the source address to bind (0: the kernel's choice); it must be an address of the namespace.
void udpSend(int ns, uint32_t addr, uint16_t port, uint32_t from = 0) {
  inNetns(ns, [&] {
    UniqueFd s(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    if (from) {
      auto src = v4(from, 0);
      if (bind(s.get(), reinterpret_cast<sockaddr*>(&src), sizeof src) != 0)
        ADD_FAILURE() << "bind: " << strerror(errno);
    }
    auto a = v4(addr, port);
    sendto(s.get(), "q", 1, 0, reinterpret_cast<sockaddr*>(&a), sizeof a);
  });
}

// Drains what a listener got: accepted connections (TCP) or datagrams (UDP) within wait_ms.
int drain(int fd, bool tcp, int wait_ms = 200) {
  int n = 0;
  pollfd p{fd, POLLIN, 0};
  while (poll(&p, 1, wait_ms) == 1) {
    if (tcp) {
      UniqueFd c(accept4(fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
      if (!c) break;
    } else {
      char b[16];
      if (recv(fd, b, sizeof b, MSG_DONTWAIT) < 0) break;
    }
    ++n;
  }
  return n;
}

UniqueFd listenOn(int type, uint16_t port) {
  UniqueFd s(socket(AF_INET, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  int one = 1;
  setsockopt(s.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  auto a = v4(INADDR_ANY, port);
  if (bind(s.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return {};
  if (type == SOCK_STREAM && listen(s.get(), 16) != 0) return {};
  return s;
}

}  // namespace

TEST(NetAddressPool, HandsOutDistinctSubnets) {
  auto pool = AddressPool::parse("10.200.0.0/29");
  ASSERT_TRUE(pool);
  EXPECT_EQ(pool->capacity(), 2u);
  auto a = pool->allocate(), b = pool->allocate();
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->cidr(), "10.200.0.0/30");
  EXPECT_EQ(a->hostText(), "10.200.0.1");
  EXPECT_EQ(a->sandboxText(), "10.200.0.2");
  EXPECT_EQ(b->cidr(), "10.200.0.4/30");
  EXPECT_FALSE(pool->allocate());
  pool->release(*a);
  EXPECT_EQ(pool->allocate()->cidr(), "10.200.0.0/30");
  EXPECT_FALSE(AddressPool::parse("10.200.0.0/30"));
  EXPECT_FALSE(AddressPool::parse("nonsense"));
  auto other = AddressPool::parse("172.30.0.0/16");
  EXPECT_FALSE(other->reserve(SandboxSubnet{0x0a000000}));
}

TEST(NetNftables, RulesetRedirectsAndDrops) {
  std::string r = ruleset(EgressPorts{});
  EXPECT_NE(r.find("table inet space"), std::string::npos);
  EXPECT_NE(r.find("iifname \"spc*\" meta l4proto tcp redirect to :15001"), std::string::npos);
  EXPECT_NE(r.find("iifname \"spc*\" udp dport 53 redirect to :15053"), std::string::npos);
  EXPECT_NE(r.find("iifname \"spc*\" drop"), std::string::npos);
}

TEST(NetNftables, SpoofedSourcesAreDroppedBeforeTheRedirects) {
  std::string r = ruleset(EgressPorts{});
  EXPECT_NE(r.find("type filter hook prerouting priority raw"), std::string::npos) << r;
  EXPECT_NE(r.find("iifname \"spc*\" fib saddr . iif oif missing counter drop"), std::string::npos) << r;
  EXPECT_NE(r.find("iifname \"spc*\" meta nfproto ipv6 counter drop"), std::string::npos) << r;
  EXPECT_LT(r.find("chain antispoof"), r.find("chain prerouting")) << r;
}

TEST(NetNftables, GatewayPortsAreClosedToAllButSandboxLinks) {
  std::string r = ruleset(EgressPorts{});
  EXPECT_NE(r.find("meta l4proto tcp th dport { 15001, 15002 } drop"), std::string::npos) << r;
  EXPECT_NE(r.find("udp dport 15053 drop"), std::string::npos) << r;
  // After the sandbox rules, which accept the redirected traffic: the drops must not come first.
  EXPECT_LT(r.find("ct status dnat meta l4proto tcp"), r.find("th dport { 15001, 15002 } drop")) << r;
}

// The gateway listens on 0.0.0.0. With the table in place its ports answer a sandbox link (through the
// redirect) and nothing else: not a namespace behind another veth, not loopback. Without the table the
// same probes get through, so the checks can fail.
TEST(NetNamespace, GatewayPortsTakeOnlyRedirectedSandboxTraffic) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root for network namespaces, veth and nftables";
  UniqueFd sandbox_ns = newNetns(), outside_ns = newNetns();
  if (!sandbox_ns || !outside_ns) GTEST_SKIP() << "cannot create a network namespace here: " << strerror(errno);
  auto exists = tableExists();
  if (!exists) GTEST_SKIP() << "nftables unavailable: " << exists.error().message;
  if (*exists) GTEST_SKIP() << "a live SPACE egress gateway owns table inet space on this host; not touching it";

  uint16_t base = uint16_t(21000 + getpid() % 20000);
  EgressPorts ports{base, uint16_t(base + 1), uint16_t(base + 2), 3128};
  UniqueFd tp = listenOn(SOCK_STREAM, ports.transparent), px = listenOn(SOCK_STREAM, ports.proxy),
           dns = listenOn(SOCK_DGRAM, ports.dns);
  ASSERT_TRUE(tp && px && dns) << "ports " << base << "-" << base + 2 << " busy: " << strerror(errno);

  // The sandbox: a SPACE link. Outside: a veth whose host end is not "spc*" (10.254.3.0/30, .1 on the host).
  auto subnet = *(*AddressPool::parse("10.254.2.0/24")).allocate();
  auto link = SandboxLink::create(sandbox_ns.get(), fmt::format("spcg{}", getpid() % 100000), subnet);
  ASSERT_TRUE(link) << link.error().message;
  const std::string other = fmt::format("sgo{}", getpid() % 100000);
  auto host = sys::Rtnl::open();
  ASSERT_TRUE(host);
  ASSERT_TRUE(host->addVeth(other, "eth0", outside_ns.get()));
  Defer drop_other([&] { (void)host->deleteLink(other); });
  const uint32_t other_host = 0x0afe0301, other_inside = 0x0afe0302, loopback = 0x7f000001;
  ASSERT_TRUE(host->addAddressV4(other, other_host, 30));
  ASSERT_TRUE(host->setUp(other));
  auto inside = sys::Rtnl::open(outside_ns.get());
  ASSERT_TRUE(inside);
  ASSERT_TRUE(inside->addAddressV4("eth0", other_inside, 30));
  ASSERT_TRUE(inside->setUp("eth0"));

  auto probe = [&](bool table) {
    SCOPED_TRACE(table ? "with the table" : "without the table");
    drain(tp.get(), true, 0);
    for (uint16_t port : {ports.transparent, ports.proxy}) {
      EXPECT_EQ(tcpConnects(outside_ns.get(), other_host, port), !table) << "from another link to " << port;
      EXPECT_EQ(tcpConnects(-1, loopback, port), !table) << "from loopback to " << port;
      EXPECT_EQ(tcpConnects(-1, subnet.hostAddress(), port), !table) << "from the host to a link's .1:" << port;
    }
    drain(tp.get(), true, 0);
    drain(px.get(), true, 0);
    udpSend(outside_ns.get(), other_host, ports.dns);
    udpSend(-1, loopback, ports.dns);
    EXPECT_EQ(drain(dns.get(), false), table ? 0 : 2) << "datagrams to the DNS port";
  };
  // A fresh veth takes a moment to carry traffic: wait for it (no table yet), so that the probes below
  // measure the rules and not the link coming up.
  for (int i = 0; i < 25 && !tcpConnects(outside_ns.get(), other_host, ports.transparent); ++i) {
  }
  probe(false);

  ASSERT_TRUE(installTable(ports));
  Defer drop_table([] { (void)removeTable(); });
  probe(true);
  // The sandbox still reaches the gateway: any TCP destination is redirected to the transparent port.
  EXPECT_TRUE(tcpConnects(sandbox_ns.get(), 0xc0000201, 80));  // 192.0.2.1:80
  EXPECT_EQ(drain(tp.get(), true), 1);
  EXPECT_TRUE(tcpConnects(sandbox_ns.get(), subnet.hostAddress(), 3128));  // the explicit proxy
  EXPECT_EQ(drain(px.get(), true), 1);
  udpSend(sandbox_ns.get(), 0xc0000201, 53);
  EXPECT_EQ(drain(dns.get(), false), 1);
  ASSERT_TRUE(removeTable());
}

// SECURITY.md V8 at the host: a sandbox that owns its kernel (as a VM guest does; here a namespace we
// control) sends DNS with its neighbour's address as the source. Its own packets reach the gateway's DNS
// port; the spoofed ones are dropped before the redirect, so the gateway never sees them as the neighbour.
TEST(NetNamespace, ASandboxCannotSendAsItsNeighbour) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root for network namespaces, veth and nftables";
  UniqueFd a_ns = newNetns(), b_ns = newNetns();
  if (!a_ns || !b_ns) GTEST_SKIP() << "cannot create a network namespace here: " << strerror(errno);
  auto exists = tableExists();
  if (!exists) GTEST_SKIP() << "nftables unavailable: " << exists.error().message;
  if (*exists) GTEST_SKIP() << "a live SPACE egress gateway owns table inet space on this host; not touching it";

  uint16_t base = uint16_t(23000 + getpid() % 20000);
  EgressPorts ports{base, uint16_t(base + 1), uint16_t(base + 2), 3128};
  UniqueFd dns = listenOn(SOCK_DGRAM, ports.dns);
  ASSERT_TRUE(dns) << "port " << ports.dns << " busy: " << strerror(errno);
  auto pool = *AddressPool::parse("10.254.4.0/24");
  auto a_net = *pool.allocate(), b_net = *pool.allocate();
  auto a = SandboxLink::create(a_ns.get(), fmt::format("spca{}", getpid() % 100000), a_net);
  auto b = SandboxLink::create(b_ns.get(), fmt::format("spcb{}", getpid() % 100000), b_net);
  ASSERT_TRUE(a && b) << (a ? b.error().message : a.error().message);
  // A takes B's address as its own as well (a guest's root can).
  auto inside = sys::Rtnl::open(a_ns.get());
  ASSERT_TRUE(inside);
  ASSERT_TRUE(inside->addAddressV4("eth0", b_net.sandboxAddress(), 32));
  ASSERT_TRUE(installTable(ports));
  Defer drop_table([] { (void)removeTable(); });
  // A fresh link takes a moment to carry traffic: wait until A's own datagrams arrive.
  int own = 0;
  for (int i = 0; i < 25 && own == 0; ++i) {
    udpSend(a_ns.get(), a_net.hostAddress(), 53, a_net.sandboxAddress());
    own = drain(dns.get(), false);
  }
  ASSERT_GE(own, 1) << "the sandbox's own DNS never reached the gateway's port";
  for (int i = 0; i < 5; ++i) udpSend(a_ns.get(), a_net.hostAddress(), 53, b_net.sandboxAddress());
  EXPECT_EQ(drain(dns.get(), false, 400), 0) << "datagrams with the neighbour's source reached the gateway";
  // B, the real owner of that address, still gets through on its own link.
  int b_own = 0;
  for (int i = 0; i < 25 && b_own == 0; ++i) {
    udpSend(b_ns.get(), b_net.hostAddress(), 53, b_net.sandboxAddress());
    b_own = drain(dns.get(), false);
  }
  EXPECT_GE(b_own, 1);
  auto listed = listTable();
  ASSERT_TRUE(listed);
  EXPECT_NE(listed->find("fib saddr . iif oif missing counter packets 5"), std::string::npos) << *listed;
  ASSERT_TRUE(removeTable());
}

TEST(NetNamespace, VethAndTableComeAndGoCleanly) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root for network namespaces, veth and nftables";
  UniqueFd ns = newNetns();
  if (!ns) GTEST_SKIP() << "cannot create a network namespace here: " << strerror(errno);
  auto before = listTable();
  if (!before && before.error().message.find("Operation not permitted") != std::string::npos)
    GTEST_SKIP() << "nftables not permitted: " << before.error().message;
  // The table is host-wide: a SPACE gateway running on this host owns it; this test must not touch it.
  if (auto exists = tableExists(); exists && *exists)
    GTEST_SKIP() << "a live SPACE egress gateway owns table inet space on this host; not touching it";

  const std::string name = fmt::format("spct{}", getpid() % 100000);
  auto pool = AddressPool::parse("10.254.0.0/24");
  auto subnet = *pool->allocate();
  {
    auto link = SandboxLink::create(ns.get(), name, subnet);
    ASSERT_TRUE(link) << link.error().message;
    EXPECT_TRUE(hostLinkExists(name));
    // Inside the namespace: eth0 exists with the sandbox address.
    auto inside = sys::Rtnl::open(ns.get());
    ASSERT_TRUE(inside);
    EXPECT_TRUE(inside->linkIndex("eth0"));
    EXPECT_FALSE(hostLinkExists("eth0") && false);

    ASSERT_TRUE(installTable(EgressPorts{}));
    Defer drop_table([] { (void)removeTable(); });  // even when an assertion fails
    ASSERT_TRUE(*tableExists());
    auto listed = listTable();
    ASSERT_TRUE(listed);
    EXPECT_NE(listed->find("redirect to :15001"), std::string::npos) << *listed;
    ASSERT_TRUE(installTable(EgressPorts{16001, 16002, 16053, 3128}));  // re-install replaces atomically
    EXPECT_NE(listTable()->find("redirect to :16001"), std::string::npos);
    EXPECT_EQ(listTable()->find("redirect to :15001"), std::string::npos);
  }
  EXPECT_FALSE(hostLinkExists(name));  // the pair went with the SandboxLink
  ASSERT_TRUE(removeTable());
  EXPECT_FALSE(*tableExists());
  EXPECT_TRUE(removeTable());  // idempotent
}

TEST(NetNamespace, VmTapLivesAsLongAsItsDescriptor) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root for network namespaces and taps";
  if (access("/dev/net/tun", R_OK | W_OK) != 0) GTEST_SKIP() << "no /dev/net/tun here";
  // Everything happens in a thread of its own network namespace: nothing touches the host's links.
  std::string failure;
  bool skipped = false;
  std::thread t([&] {
    if (unshare(CLONE_NEWNET) != 0) {
      skipped = true;
      return;
    }
    auto check = [&](bool cond, const std::string& what) {
      if (!cond && failure.empty()) failure = what;
    };
    auto pool = AddressPool::parse("10.254.1.0/24");
    auto subnet = *pool->allocate();
    auto bad = createSandboxTap("tapx", subnet);
    check(!bad, "a tap without the spc prefix was made");
    {
      auto tap = createSandboxTap("spctap0", subnet);
      if (!tap) {
        failure = tap.error().message;
        return;
      }
      check(hostLinkExists("spctap0"), "tap missing while its descriptor is open");
      // The host end carries .1: adding it again is refused as existing.
      auto rtnl = sys::Rtnl::open();
      auto again = rtnl->addAddressV4("spctap0", subnet.hostAddress(), SandboxSubnet::kPrefix);
      check(!again && again.error().sys_errno == EEXIST, "the tap does not carry the host address");
      // A second tap of the same name is refused instead of attaching to the first.
      check(!createSandboxTap("spctap0", subnet), "a second tap attached to an existing name");
    }
    check(!hostLinkExists("spctap0"), "tap outlived its last descriptor");
  });
  t.join();
  if (skipped) GTEST_SKIP() << "cannot create a network namespace here";
  EXPECT_TRUE(failure.empty()) << failure;
}
