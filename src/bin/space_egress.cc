// space-egress: the egress gateway. Started and supervised by spaced, or run alone:
//   space-egress --config /etc/space/egress.json
// It keeps serving when spaced goes away; spaced re-registers its sandboxes when it comes back. With
// "confine" in its config it confines itself before serving anything (confine.h, SECURITY.md E18).
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "egress/asio.h"
#include "egress/audit.h"
#include "egress/config.h"
#include "egress/confine.h"
#include "egress/control.h"
#include "egress/proxy.h"
#include "egress/resolver.h"
#include "egress/tls_ca.h"

using namespace space;
using namespace space::egress;

namespace {

void usage() {
  fprintf(stderr,
          "usage: space-egress --config FILE [--control-socket PATH | --control-fd N]\n"
          "  The config file is the only place where test_external_subnets may be set.\n"
          "  --control-fd: an inherited, listening unix socket (spaced binds it); --control-socket binds one.\n");
}

Result<std::string> readWholeFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return sysError(errno ? errno : ENOENT, "open {}", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// What the confined gateway still sees of the host: its audit directory (written as its uid) and two
// device nodes. Everything else it needs (config, CA bundle, resolv.conf, the seccomp policy, the control
// socket) was read or opened before the drop.
Result<Confinement> confinementFor(const Config& cfg) {
  Confinement c;
  c.uid = cfg.confine.uid;
  c.gid = cfg.confine.gid;
  c.root_dir = cfg.confine.root_dir;
  ASSIGN_OR_RETURN(c.seccomp_policy, readWholeFile(cfg.confine.seccomp_policy));
  if (cfg.audit_log != "-" && !cfg.audit_log.empty()) {
    size_t slash = cfg.audit_log.rfind('/');
    if (slash == std::string::npos || slash == 0)
      return makeError(ErrorKind::kInvalidArgument,
                       "audit_log {} must be an absolute path below a directory of its own", cfg.audit_log);
    c.writable.push_back(cfg.audit_log.substr(0, slash));
  }
  return c;
}

int fail(const Error& e, int code = 1) {
  fprintf(stderr, "space-egress: %s\n", e.message.c_str());
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  std::string config_path, control_override;
  int control_fd = -1;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--config" && i + 1 < argc)
      config_path = argv[++i];
    else if (a == "--control-socket" && i + 1 < argc)
      control_override = argv[++i];
    else if (a == "--control-fd" && i + 1 < argc)
      control_fd = std::atoi(argv[++i]);
    else {
      usage();
      return 2;
    }
  }
  Config cfg;
  if (!config_path.empty()) {
    auto c = loadConfig(config_path);
    if (!c) return fail(c.error(), 2);
    cfg = std::move(*c);
  }
  if (!control_override.empty()) cfg.control_socket = control_override;
  if (!cfg.test_external_subnets.empty()) {
    fprintf(stderr, "space-egress: WARNING: test_external_subnets is set; these subnets count as PUBLIC:");
    for (const auto& s : cfg.test_external_subnets) fprintf(stderr, " %s", s.str().c_str());
    fprintf(stderr, "\n");
  }
  signal(SIGPIPE, SIG_IGN);

  // --- What needs root or the host's view: read or opened now, before the gateway confines itself.
  UniqueFd control_listener;
  if (control_fd >= 0) {
    control_listener = UniqueFd(control_fd);
    fcntl(control_fd, F_SETFD, FD_CLOEXEC);
  } else {
    auto l = bindControlSocket(cfg.control_socket);
    if (!l) return fail(l.error());
    control_listener = std::move(*l);
  }
  auto upstream_ctx = tls::makeUpstreamContext(cfg.upstream_ca_file);
  if (!upstream_ctx) return fail(upstream_ctx.error());
  auto resolver = makeCaresResolver(cfg.upstream_resolvers, std::chrono::milliseconds(2000));  // reads resolv.conf
  if (!resolver) return fail(resolver.error());

  if (cfg.confine.enabled) {
    auto confinement = confinementFor(cfg);
    if (!confinement) return fail(confinement.error());
    if (auto st = confineGateway(*confinement); !st) return fail(st.error());
  } else {
    fprintf(stderr,
            "space-egress: WARNING: not confined (the config has no \"confine\"): this process keeps the "
            "privileges it was started with\n");
  }

  // --- Confined from here on (when configured): everything below runs as the gateway's own uid, in its
  // mount namespace, under its seccomp filter.
  if (auto st = (*resolver)->start(); !st) return fail(st.error());
  auto audit = Audit::open(cfg.audit_log, cfg.audit);
  if (!audit) return fail(audit.error());
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
  opts.upstream_ctx = *upstream_ctx;
  opts.test_external_subnets = cfg.test_external_subnets;
  opts.facts.host_addresses = cfg.host_addresses;
  opts.facts.sandbox_subnets = cfg.sandbox_pools;
  opts.facts.gateway_listeners = cfg.protected_listeners;
  if (cfg.detect_host_addresses) {
    auto addrs = hostAddresses();
    if (!addrs) return fail(addrs.error());
    opts.facts.host_addresses.insert(opts.facts.host_addresses.end(), addrs->begin(), addrs->end());
  }

  boost::asio::io_context io(1);
  auto gateway = Gateway::create(io, registry, cache, **audit, opts);
  if (!gateway) return fail(gateway.error());
  Gateway* gw = gateway->get();
  auto control = ControlServer::serve(io, std::move(control_listener), registry, **audit, [gw] { return gw->stats(); });
  if (!control) return fail(control.error());
  fprintf(stderr, "space-egress: transparent :%u, proxy :%u, dns :%u, control %s%s\n", (*gateway)->transparentPort(),
          (*gateway)->proxyPort(), (*gateway)->dnsPort(), cfg.control_socket.c_str(),
          cfg.confine.enabled ? ", confined" : "");
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
