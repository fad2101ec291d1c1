#include "egress/tls_ca.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509v3.h>

namespace space::egress::tls {

std::string opensslError() {
  std::string out;
  while (unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    if (!out.empty()) out += "; ";
    out += buf;
  }
  return out.empty() ? "unknown OpenSSL error" : out;
}

namespace {

tl::unexpected<Error> sslError(std::string_view what) {
  return makeError(ErrorKind::kInternal, "{}: {}", what, opensslError());
}

EVP_PKEY* newEcKey() { return EVP_EC_gen("P-256"); }

bool addExt(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
  if (!ext) return false;
  bool ok = X509_add_ext(cert, ext, -1) == 1;
  X509_EXTENSION_free(ext);
  return ok;
}

bool randomSerial(X509* cert) {
  unsigned char bytes[16];
  if (RAND_bytes(bytes, sizeof bytes) != 1) return false;
  bytes[0] &= 0x7f;
  BIGNUM* bn = BN_bin2bn(bytes, sizeof bytes, nullptr);
  bool ok = bn && BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(cert));
  BN_free(bn);
  return ok;
}

int selectHttp11(SSL*, const unsigned char** out, unsigned char* outlen, const unsigned char* in, unsigned int inlen,
                 void*) {
  static const unsigned char kHttp11[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
  unsigned char* sel = nullptr;
  if (SSL_select_next_proto(&sel, outlen, kHttp11, sizeof kHttp11, in, inlen) != OPENSSL_NPN_NEGOTIATED)
    return SSL_TLSEXT_ERR_ALERT_FATAL;  // a client that cannot speak HTTP/1.1 cannot be intercepted
  *out = sel;
  return SSL_TLSEXT_ERR_OK;
}

}  // namespace

CertAuthority::~CertAuthority() {
  X509_free(cert_);
  EVP_PKEY_free(key_);
  EVP_PKEY_free(leaf_key_);
}

Result<std::shared_ptr<CertAuthority>> CertAuthority::generate(const std::string& sandbox_id) {
  std::shared_ptr<CertAuthority> ca(new CertAuthority);
  ca->key_ = newEcKey();
  ca->leaf_key_ = newEcKey();
  ca->cert_ = X509_new();
  if (!ca->key_ || !ca->leaf_key_ || !ca->cert_) return sslError("generate CA key");
  X509* c = ca->cert_;
  X509_set_version(c, 2);
  if (!randomSerial(c)) return sslError("CA serial");
  X509_gmtime_adj(X509_getm_notBefore(c), -3600);
  X509_gmtime_adj(X509_getm_notAfter(c), 10L * 365 * 24 * 3600);
  X509_set_pubkey(c, ca->key_);
  X509_NAME* name = X509_get_subject_name(c);
  std::string cn = "SPACE egress CA for sandbox " + sandbox_id.substr(0, 32);
  X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC, reinterpret_cast<const unsigned char*>("SPACE"), -1, -1, 0);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0);
  X509_set_issuer_name(c, name);
  if (!addExt(c, c, NID_basic_constraints, "critical,CA:TRUE,pathlen:0") ||
      !addExt(c, c, NID_key_usage, "critical,keyCertSign,cRLSign") || !addExt(c, c, NID_subject_key_identifier, "hash"))
    return sslError("CA extensions");
  if (!X509_sign(c, ca->key_, EVP_sha256())) return sslError("sign CA");
  return ca;
}

Result<std::shared_ptr<CertAuthority>> CertAuthority::fromPem(const PemPair& pem) {
  std::shared_ptr<CertAuthority> ca(new CertAuthority);
  BIO* cb = BIO_new_mem_buf(pem.cert_pem.data(), int(pem.cert_pem.size()));
  ca->cert_ = PEM_read_bio_X509(cb, nullptr, nullptr, nullptr);
  BIO_free(cb);
  BIO* kb = BIO_new_mem_buf(pem.key_pem.data(), int(pem.key_pem.size()));
  ca->key_ = PEM_read_bio_PrivateKey(kb, nullptr, nullptr, nullptr);
  BIO_free(kb);
  if (!ca->cert_ || !ca->key_) return makeError(ErrorKind::kInvalidArgument, "CA PEM: {}", opensslError());
  if (X509_check_private_key(ca->cert_, ca->key_) != 1)
    return makeError(ErrorKind::kInvalidArgument, "CA key does not match its certificate");
  if (X509_check_ca(ca->cert_) == 0) return makeError(ErrorKind::kInvalidArgument, "certificate is not a CA");
  ca->leaf_key_ = newEcKey();
  if (!ca->leaf_key_) return sslError("leaf key");
  return ca;
}

std::string CertAuthority::certPem() const {
  BIO* b = BIO_new(BIO_s_mem());
  PEM_write_bio_X509(b, cert_);
  char* data = nullptr;
  long n = BIO_get_mem_data(b, &data);
  std::string out(data, size_t(n));
  BIO_free(b);
  return out;
}

std::string CertAuthority::keyPem() const {
  BIO* b = BIO_new(BIO_s_mem());
  PEM_write_bio_PrivateKey(b, key_, nullptr, nullptr, 0, nullptr, nullptr);
  char* data = nullptr;
  long n = BIO_get_mem_data(b, &data);
  std::string out(data, size_t(n));
  BIO_free(b);
  return out;
}

Result<std::shared_ptr<SSL_CTX>> CertAuthority::serverContext(const std::string& host) {
  std::lock_guard lock(mu_);
  if (auto it = leaves_.find(host); it != leaves_.end()) return it->second;
  if (leaves_.size() > 4096) leaves_.clear();
  ASSIGN_OR_RETURN(auto ctx, mintLeaf(host));
  leaves_[host] = ctx;
  return ctx;
}

Result<std::shared_ptr<SSL_CTX>> CertAuthority::mintLeaf(const std::string& host) {
  X509* leaf = X509_new();
  std::unique_ptr<X509, decltype(&X509_free)> guard(leaf, X509_free);
  X509_set_version(leaf, 2);
  if (!randomSerial(leaf)) return sslError("leaf serial");
  X509_gmtime_adj(X509_getm_notBefore(leaf), -3600);
  X509_gmtime_adj(X509_getm_notAfter(leaf), 30L * 24 * 3600);
  X509_set_pubkey(leaf, leaf_key_);
  X509_NAME* name = X509_get_subject_name(leaf);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(host.c_str()), -1, -1, 0);
  X509_set_issuer_name(leaf, X509_get_subject_name(cert_));
  std::string san = "DNS:" + host;
  if (!addExt(leaf, cert_, NID_subject_alt_name, san.c_str()) ||
      !addExt(leaf, cert_, NID_basic_constraints, "critical,CA:FALSE") ||
      !addExt(leaf, cert_, NID_key_usage, "critical,digitalSignature") ||
      !addExt(leaf, cert_, NID_ext_key_usage, "serverAuth") ||
      !addExt(leaf, cert_, NID_authority_key_identifier, "keyid:always"))
    return sslError("leaf extensions");
  if (!X509_sign(leaf, key_, EVP_sha256())) return sslError("sign leaf");

  std::shared_ptr<SSL_CTX> ctx(SSL_CTX_new(TLS_server_method()), SSL_CTX_free);
  if (!ctx) return sslError("SSL_CTX_new");
  SSL_CTX_set_min_proto_version(ctx.get(), TLS1_2_VERSION);
  if (SSL_CTX_use_certificate(ctx.get(), leaf) != 1 || SSL_CTX_use_PrivateKey(ctx.get(), leaf_key_) != 1 ||
      SSL_CTX_add1_chain_cert(ctx.get(), cert_) != 1)
    return sslError("leaf context");
  SSL_CTX_set_alpn_select_cb(ctx.get(), selectHttp11, nullptr);
  return ctx;
}

Result<std::shared_ptr<SSL_CTX>> makeUpstreamContext(const std::string& ca_file) {
  std::shared_ptr<SSL_CTX> ctx(SSL_CTX_new(TLS_client_method()), SSL_CTX_free);
  if (!ctx) return sslError("SSL_CTX_new");
  SSL_CTX_set_min_proto_version(ctx.get(), TLS1_2_VERSION);
  SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER, nullptr);
  int rc = ca_file.empty() ? SSL_CTX_set_default_verify_paths(ctx.get())
                           : SSL_CTX_load_verify_locations(ctx.get(), ca_file.c_str(), nullptr);
  if (rc != 1) return makeError(ErrorKind::kInvalidArgument, "load CA bundle '{}': {}", ca_file, opensslError());
  static const unsigned char kHttp11[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
  SSL_CTX_set_alpn_protos(ctx.get(), kHttp11, sizeof kHttp11);
  return ctx;
}

}  // namespace space::egress::tls
