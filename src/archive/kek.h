// Key-encryption keys (KEKs) the customer brings (BYOK). A KEK never encrypts data: it wraps the
// per-tenant data keys (DEKs, key_store.h), so rotating it rewraps 32-byte keys and never touches data.
//
// Three sources:
//   file     a 0600/0400 file owned by the caller: 32 raw bytes, or 64 lowercase hex digits (+ newline)
//   env      an environment variable holding 64 lowercase hex digits
//   command  an external program (the hook for a KMS); protocol in docs/snapshot-archive.md:
//            `<argv...> wrap|unwrap`, the key on stdin, the result on stdout, exit status 0 on success,
//            the binding context in the environment variable SPACE_KEK_CONTEXT (hex).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace space::archive {

class Kek {
 public:
  virtual ~Kek() = default;
  // Names the key in archives and the key store; never secret. Local keys: "local:" + 16 hex digits of
  // a SHA-256 fingerprint; command keys: the id the operator configured.
  virtual const std::string& id() const = 0;
  // context binds the wrapped key to its use (tenant and DEK id): a wrapped key moved elsewhere does not
  // unwrap.
  virtual Result<std::string> wrap(std::string_view dek, std::string_view context) const = 0;
  virtual Result<std::string> unwrap(std::string_view wrapped, std::string_view context) const = 0;
};

Result<std::unique_ptr<Kek>> kekFromFile(const std::string& path);
Result<std::unique_ptr<Kek>> kekFromEnv(const std::string& variable);
// key_id: [A-Za-z0-9._:/-]{1,128}; argv[0] is run directly (no shell), looked up in PATH.
Result<std::unique_ptr<Kek>> kekFromCommand(std::vector<std::string> argv, std::string key_id);
// A KEK from its 32 key bytes (tests, and keys already fetched by other means).
Result<std::unique_ptr<Kek>> kekFromBytes(std::string key);

// "file:<path>", "env:<VAR>" or "command:<key-id>=<program> [args...]" (args split on spaces) — the
// form a configuration file or a CLI flag carries.
Result<std::unique_ptr<Kek>> kekFromSpec(const std::string& spec);

}  // namespace space::archive
