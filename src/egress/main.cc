// space-egress: the egress gateway. Started and supervised by spaced, or run alone:
//   space-egress --config /etc/space/egress.json
// It keeps serving when spaced goes away; spaced re-registers its sandboxes when it comes back.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "egress/asio.h"
#include "egress/audit.h"
#include "egress/config.h"
#include "egress/control.h"
#include "egress/proxy.h"
#include "egress/resolver.h"

using namespace space;
using namespace space::egress;

namespace {

void usage() {
  fprintf(stderr,
          "usage: space-egress --config FILE [--control-socket PATH]\n"
          "  The config file is the only place where test_external_subnets may be set.\n");
}

}  // namespace

int main(int argc, char** argv) {
  std::string config_path, control_override;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--config" && i + 1 < argc)
      config_path = argv[++i];
    else if (a == "--control-socket" && i + 1 < argc)
      control_override = argv[++i];
    else {
      usage();
      return 2;
    }
  }
  Config cfg;
  if (!config_path.empty()) {
    auto c = loadConfig(config_path);
    if (!c) {
      fprintf(stderr, "space-egress: %s\n", c.error().message.c_str());
      return 2;
    }
    cfg = std::move(*c);
  }
  if (!control_override.empty()) cfg.control_socket = control_override;
  if (!cfg.test_external_subnets.empty()) {
    fprintf(stderr, "space-egress: WARNING: test_external_subnets is set; these subnets count as PUBLIC:");
    for (const auto& s : cfg.test_external_subnets) fprintf(stderr, " %s", s.str().c_str());
    fprintf(stderr, "\n");
  }
  signal(SIGPIPE, SIG_IGN);

  auto audit = Audit::open(cfg.audit_log, cfg.audit);
  if (!audit) {
    fprintf(stderr, "space-egress: %s\n", audit.error().message.c_str());
    return 1;
  }
  auto resolver = makeCaresResolver(cfg.upstream_resolvers, std::chrono::milliseconds(2000));
  if (!resolver) {
    fprintf(stderr, "space-egress: %s\n", resolver.error().message.c_str());
    return 1;
  }
  NameCache cache(**resolver);
  Registry registry;
  for (const auto& s : cfg.sandboxes) {
    nlohmann::json reply = handleControl(registry, **audit, {{"op", "register"}, {"sandbox", s}});
    if (!reply["ok"].get<bool>()) {
      fprintf(stderr, "space-egress: config sandbox: %s\n", reply["error"]["message"].get<std::string>().c_str());
      return 2;
    }
  }

  GatewayOptions opts;
  opts.transparent_listen = cfg.transparent_listen;
  opts.proxy_listen = cfg.proxy_listen;
  opts.dns_listen = cfg.dns_listen;
  opts.connections = cfg.connections;
  opts.connection_rate = cfg.connection_rate;
  opts.dns_rate = cfg.dns_rate;
  opts.handshake_timeout = cfg.handshake_timeout;
  opts.head_deadline = cfg.head_deadline;
  opts.idle_timeout = cfg.idle_timeout;
  opts.upstream_ca_file = cfg.upstream_ca_file;
  opts.test_external_subnets = cfg.test_external_subnets;
  opts.facts.host_addresses = cfg.host_addresses;
  opts.facts.sandbox_subnets = cfg.sandbox_pools;
  opts.facts.gateway_listeners = cfg.protected_listeners;
  if (cfg.detect_host_addresses) {
    auto addrs = hostAddresses();
    if (!addrs) {
      fprintf(stderr, "space-egress: %s\n", addrs.error().message.c_str());
      return 1;
    }
    opts.facts.host_addresses.insert(opts.facts.host_addresses.end(), addrs->begin(), addrs->end());
  }

  boost::asio::io_context io(1);
  auto gateway = Gateway::create(io, registry, cache, **audit, opts);
  if (!gateway) {
    fprintf(stderr, "space-egress: %s\n", gateway.error().message.c_str());
    return 1;
  }
  Gateway* gw = gateway->get();
  auto control = ControlServer::listen(io, cfg.control_socket, registry, **audit, [gw] { return gw->stats(); });
  if (!control) {
    fprintf(stderr, "space-egress: %s\n", control.error().message.c_str());
    return 1;
  }
  fprintf(stderr, "space-egress: transparent :%u, proxy :%u, dns :%u, control %s\n", (*gateway)->transparentPort(),
          (*gateway)->proxyPort(), (*gateway)->dnsPort(), cfg.control_socket.c_str());
  boost::asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&](const boost::system::error_code&, int) { io.stop(); });
  io.run();
  // Live sessions are not unwound one by one at exit: their sockets close with the process. Every audit
  // line is already written; the interval's "repeated" and "dropped" lines are written now.
  (*gateway)->flushAudit();
  (*audit)->tick(true);
  fflush(nullptr);
  _exit(0);
}
