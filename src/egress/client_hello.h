// Reads the server name from a TLS ClientHello without terminating TLS (transparent mode). Hand-written
// and strict (docs/decisions/0004-egress-gateway.md); fuzzed by tests/fuzz/client_hello_fuzz.cc.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "common/result.h"

namespace space::egress::tls {

constexpr size_t kMaxClientHello = 64 * 1024;

struct ClientHello {
  std::optional<std::string> server_name;  // raw bytes of the one host_name entry, not yet normalised
  bool has_alpn = false;
};

enum class ParseState { kNeedMore, kDone };

struct ParseResult {
  ParseState state = ParseState::kNeedMore;
  ClientHello hello;  // valid when kDone
};

// bytes: what the client sent so far. kNeedMore while the ClientHello is incomplete (the caller reads more,
// up to kMaxClientHello); an error when the bytes are not a well-formed ClientHello: handshake fragments
// in one or more records of type 22, one ClientHello, no duplicate extensions, at most one host_name.
Result<ParseResult> parseClientHello(std::span<const uint8_t> bytes);

// Cheap first-byte test for the transparent listener: a TLS handshake record starts with 0x16 0x03.
bool looksLikeTls(std::span<const uint8_t> bytes);

}  // namespace space::egress::tls
