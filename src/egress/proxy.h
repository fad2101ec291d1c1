// The gateway's listeners: transparent TCP (connections redirected by nftables), explicit HTTP/HTTPS proxy
// and the sandbox DNS resolver, all on one Boost.Asio io_context. Sandboxes are recognised by the source
// address of what they send; an unknown source is refused.
#pragma once

#include <openssl/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/result.h"
#include "egress/address.h"
#include "egress/asio.h"
#include "egress/audit.h"
#include "egress/limits.h"
#include "egress/registry.h"
#include "egress/resolver.h"

namespace space::egress {

struct GatewayOptions {
  std::string transparent_listen;  // "ADDR:PORT"; empty: off. Port 0 picks one.
  std::string proxy_listen;        // explicit proxy (HTTP_PROXY / HTTPS_PROXY)
  std::string dns_listen;          // UDP
  ConnectionCaps connections;
  Rate connection_rate{100, 200};                      // new connections per second, per sandbox (E19)
  Rate dns_rate{100, 200};                             // DNS queries per second, per sandbox (E19)
  std::chrono::milliseconds handshake_timeout{10000};  // no byte from the sandbox, until the gateway relays
  // Absolute (E20): from accept until the gateway relays, and from the first byte of each later request
  // head on a relayed HTTP connection until the head is complete. Bytes arriving do not extend it.
  std::chrono::milliseconds head_deadline{10000};
  std::chrono::milliseconds idle_timeout{300000};  // no byte in either direction
  std::string upstream_ca_file;                    // empty: the system bundle
  // The upstream TLS context, when the caller made it already (from upstream_ca_file, before the gateway
  // confined itself: the bundle need not be readable by the gateway's uid nor visible in its root).
  std::shared_ptr<SSL_CTX> upstream_ctx;
  HostFacts facts;  // sandbox subnets are added from the registry
  // Loudly named on purpose; see config.h. Subnets the test harness declared external.
  std::vector<Cidr> test_external_subnets;
  // Where a transparent connection was going. Default: SO_ORIGINAL_DST. Tests without nftables set this.
  std::function<Result<boost::asio::ip::tcp::endpoint>(boost::asio::ip::tcp::socket&)> original_destination;
};

class Gateway {
 public:
  static Result<std::unique_ptr<Gateway>> create(boost::asio::io_context& io, Registry& registry, NameCache& cache,
                                                 Audit& audit, GatewayOptions options);
  ~Gateway();

  uint16_t transparentPort() const;
  uint16_t proxyPort() const;
  uint16_t dnsPort() const;
  size_t activeConnections() const;
  // Connections and limits now, for the control socket's "stats".
  nlohmann::json stats() const;
  // Hands the refusals counted since the last tick to the audit (at exit; a timer does it while running).
  void flushAudit();
  void stop();

  struct Impl;

 private:
  explicit Gateway(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// "127.0.0.1:8080", "[::1]:53" -> endpoint.
Result<boost::asio::ip::tcp::endpoint> parseListenAddress(const std::string& text);

}  // namespace space::egress
