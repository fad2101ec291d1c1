// The per-sandbox certificate authority used to intercept TLS to hosts that have a bound secret. Its
// certificate goes into the sandbox's trust store; leaf certificates are minted per host on first use and
// cached. Each sandbox has its own CA, so one sandbox's trust cannot be used against another's traffic.
#pragma once

#include <openssl/ssl.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "common/result.h"

namespace space::egress::tls {

struct PemPair {
  std::string cert_pem;
  std::string key_pem;
};

class CertAuthority {
 public:
  // A fresh CA (EC P-256, 10-year validity, CN names the sandbox).
  static Result<std::shared_ptr<CertAuthority>> generate(const std::string& sandbox_id);
  // A CA handed over by spaced (PEM certificate and private key).
  static Result<std::shared_ptr<CertAuthority>> fromPem(const PemPair& pem);
  ~CertAuthority();

  std::string certPem() const;
  // The CA's private key: spaced keeps each sandbox's CA (so that a restarted space-egress presents the
  // certificate the sandbox already trusts) and hands it back with `register`.
  std::string keyPem() const;
  // A server SSL_CTX presenting a leaf for host (normalised name), signed by this CA; cached per host.
  // Only HTTP/1.1 is offered by ALPN: the gateway parses every request.
  Result<std::shared_ptr<SSL_CTX>> serverContext(const std::string& host);

 private:
  CertAuthority() = default;
  Result<std::shared_ptr<SSL_CTX>> mintLeaf(const std::string& host);

  X509* cert_ = nullptr;
  EVP_PKEY* key_ = nullptr;
  EVP_PKEY* leaf_key_ = nullptr;  // one key for every leaf of this sandbox; minting stays cheap
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<SSL_CTX>> leaves_;
};

// Client context for the upstream side: verification always on, with ca_file (empty: the system bundle).
Result<std::shared_ptr<SSL_CTX>> makeUpstreamContext(const std::string& ca_file);

std::string opensslError();

}  // namespace space::egress::tls
