// The jail-tier path end to end on this host: a namespace of the test's own, a veth pair, the SPACE
// nftables table and an in-process gateway. TCP and DNS sent from inside the namespace must arrive at the
// gateway with their original destination (SO_ORIGINAL_DST); nothing leaves the host (the redirect is
// local). Needs root; skipped with the reason otherwise.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <thread>

#include "common/defer.h"
#include "common/unique_fd.h"
#include "egress/asio.h"
#include "egress/audit.h"
#include "egress/control.h"
#include "egress/proxy.h"
#include "net/address_pool.h"
#include "net/nftables.h"
#include "net/veth.h"

using namespace space;
using namespace space::egress;
namespace asio = boost::asio;

namespace {

class NoResolver : public Resolver {
 public:
  std::atomic<int> calls{0};
  void resolve(const std::string& name, std::function<void(Result<Resolution>)> done) override {
    ++calls;
    done(makeError(ErrorKind::kNotFound, "no upstream in this test"));
  }
};

// Runs fn inside the namespace on a thread of its own.
template <class F>
void inNetns(int ns, F fn) {
  std::thread t([&] {
    if (setns(ns, CLONE_NEWNET) != 0) {
      ADD_FAILURE() << "setns: " << strerror(errno);
      return;
    }
    fn();
  });
  t.join();
}

}  // namespace

TEST(NetEgressRedirect, SandboxTrafficReachesTheGatewayWithItsOriginalDestination) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root for network namespaces, veth and nftables";
  UniqueFd ns;
  std::thread mk([&] {
    if (unshare(CLONE_NEWNET) == 0)
      ns.reset(open(fmt::format("/proc/self/task/{}/ns/net", gettid()).c_str(), O_RDONLY));
  });
  mk.join();
  if (!ns) GTEST_SKIP() << "cannot create a network namespace here";
  auto exists = net::tableExists();
  if (!exists) GTEST_SKIP() << "nftables unavailable: " << exists.error().message;
  // The table is host-wide: a SPACE gateway running on this host (quickstart, a developer's spaced) owns
  // it, and this test must neither change nor remove it.
  if (*exists) GTEST_SKIP() << "a live SPACE egress gateway owns table inet space on this host; not touching it";

  auto subnet = *(*net::AddressPool::parse("10.254.1.0/24")).allocate();
  auto link = net::SandboxLink::create(ns.get(), fmt::format("spcr{}", getpid() % 100000), subnet);
  ASSERT_TRUE(link) << link.error().message;
  uint16_t base = uint16_t(20000 + getpid() % 20000);
  net::EgressPorts ports{base, uint16_t(base + 1), uint16_t(base + 2), 3128};
  ASSERT_TRUE(net::installTable(ports));
  Defer drop_table([] { (void)net::removeTable(); });  // even when an assertion fails

  NoResolver resolver;
  NameCache cache(resolver);
  auto audit = *Audit::open("");
  Registry registry;
  nlohmann::json sb = {
      {"id", "sb-ns"},
      {"sources", {subnet.cidr()}},
      {"policy", {{"mode", "allow-list"}, {"rules", {{{"action", "allow"}, {"domain", "allowed.test"}}}}}}};
  ASSERT_TRUE(handleControl(registry, *audit, {{"op", "register"}, {"sandbox", sb}})["ok"].get<bool>());
  asio::io_context io;
  GatewayOptions o;
  o.transparent_listen = fmt::format("0.0.0.0:{}", ports.transparent);
  o.proxy_listen = fmt::format("0.0.0.0:{}", ports.proxy);
  o.dns_listen = fmt::format("0.0.0.0:{}", ports.dns);
  o.handshake_timeout = std::chrono::milliseconds(2000);
  auto gateway = Gateway::create(io, registry, cache, *audit, o);
  ASSERT_TRUE(gateway) << gateway.error().message;
  std::thread loop([&] { io.run(); });

  std::string dns_reply;
  inNetns(ns.get(), [&] {
    asio::io_context cio;
    // TCP to a documentation address: redirected to the transparent port, judged with that destination.
    asio::ip::tcp::socket s(cio);
    boost::system::error_code ec;
    s.connect({asio::ip::make_address("192.0.2.1"), 443}, ec);
    ASSERT_FALSE(ec) << ec.message();
    asio::write(s, asio::buffer(std::string("garbage, not a ClientHello\r\n\r\n")), ec);
    char buf[64];
    s.read_some(asio::buffer(buf), ec);  // the gateway closes
    // DNS to any resolver address: answered by the gateway, NXDOMAIN for a name the policy does not allow.
    asio::ip::udp::socket u(cio);
    u.open(asio::ip::udp::v4());
    std::vector<uint8_t> q = {0,   7,   1,   0, 0,   1,   0,   0,   0, 0, 0, 0, 4, 'e',
                              'v', 'i', 'l', 4, 't', 'e', 's', 't', 0, 0, 1, 0, 1};
    u.send_to(asio::buffer(q), {asio::ip::make_address("8.8.8.8"), 53});
    std::vector<uint8_t> r(512);
    asio::ip::udp::endpoint from;
    u.non_blocking(true);
    for (int i = 0; i < 100; ++i) {
      size_t n = u.receive_from(asio::buffer(r), from, 0, ec);
      if (!ec) {
        dns_reply.assign(r.begin(), r.begin() + n);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  asio::post(io, [&] { (*gateway)->stop(); });
  for (int i = 0; i < 200 && !io.stopped(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  if (!io.stopped()) io.stop();
  loop.join();

  std::string lines;
  for (const auto& l : audit->lastLinesForTest()) lines += l + "\n";
  EXPECT_NE(lines.find("\"used\":\"192.0.2.1:443\""), std::string::npos) << lines;
  EXPECT_NE(lines.find("\"sandbox\":\"sb-ns\""), std::string::npos) << lines;
  EXPECT_NE(lines.find("unrecognised-protocol"), std::string::npos) << lines;
  ASSERT_GE(dns_reply.size(), 12u);
  EXPECT_EQ(dns_reply[3] & 0x0f, 3);    // NXDOMAIN
  EXPECT_EQ(resolver.calls.load(), 0);  // E16: nothing forwarded

  ASSERT_TRUE(net::removeTable());
  EXPECT_FALSE(*net::tableExists());
}
