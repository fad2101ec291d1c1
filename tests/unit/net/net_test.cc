// Host network plumbing. The namespace test makes its own network namespace, veth pair and nftables table,
// sends nothing anywhere, and checks that removing them leaves nothing behind. Needs root (CAP_NET_ADMIN).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
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
