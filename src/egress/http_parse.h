// Strict HTTP/1.1 message heads for the gateway (E8, E9, E15). Everything on the request side comes from
// a sandbox: anything ambiguous between two parsers (CL+TE, duplicate Host, obs-fold, bare CR/LF, controls
// in values, userinfo or backslashes in URLs) is rejected rather than interpreted. Responses come from a
// verified upstream and are parsed for framing only, with the same bounds.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/result.h"

namespace space::egress::http {

constexpr size_t kMaxHead = 32 * 1024;
constexpr size_t kMaxHeaders = 100;

struct Header {
  std::string name;   // as sent
  std::string value;  // optional whitespace trimmed
};

enum class BodyKind { kNone, kLength, kChunked, kUntilClose };

struct Framing {
  BodyKind kind = BodyKind::kNone;
  uint64_t length = 0;
};

struct RequestHead {
  std::string method;
  std::string target;
  int minor_version = 1;  // HTTP/1.x
  std::vector<Header> headers;
  Framing framing;

  const Header* find(std::string_view name) const;  // case-insensitive; first match
  void remove(std::string_view name);
  void set(std::string_view name, std::string value);
  std::string serialize() const;
};

struct ResponseHead {
  int minor_version = 1;
  int status = 0;
  std::string reason;
  std::vector<Header> headers;
  Framing framing;

  const Header* find(std::string_view name) const;
  void remove(std::string_view name);
  void set(std::string_view name, std::string value);
  std::string serialize() const;
};

// The end of the head ("\r\n\r\n") in buf, or npos. Errors when buf exceeds kMaxHead without one.
Result<size_t> findHeadEnd(std::string_view buf);

// head: bytes up to and including the blank line.
Result<RequestHead> parseRequestHead(std::string_view head);
// request_method: HEAD and CONNECT answers have no body whatever their headers say.
Result<ResponseHead> parseResponseHead(std::string_view head, std::string_view request_method);

struct Authority {
  std::string host;  // without brackets; not normalised
  uint16_t port = 0;
  bool bracketed = false;
};
// "host:port" (CONNECT) or, with default_port, "host[:port]" (Host header, absolute URL authority).
Result<Authority> parseAuthority(std::string_view text, uint16_t default_port);

struct AbsoluteTarget {
  Authority authority;
  std::string origin_form;  // "/path?query"
};
// "http://host[:port]/path?query". Rejects other schemes, userinfo ('@'), '\\', '#', '%' in the authority.
Result<AbsoluteTarget> parseAbsoluteTarget(std::string_view target);

// Incremental chunked-body reader: feeds raw bytes, reports decoded data and where the body ends, so that
// the raw bytes can be relayed unchanged while the decoded ones are scanned.
class ChunkedDecoder {
 public:
  // Consumes a prefix of in. Returns bytes consumed; decoded data is appended to *out. done() after the
  // last chunk and its trailers ended. Errors on malformed framing.
  Result<size_t> feed(std::string_view in, std::string* out);
  bool done() const { return state_ == State::kDone; }

 private:
  enum class State { kSize, kSizeLf, kData, kDataCr, kDataLf, kTrailer, kTrailerLf, kDone };
  State state_ = State::kSize;
  uint64_t remaining_ = 0;
  std::string line_;
  bool size_seen_ = false;
  bool in_ext_ = false;
};

}  // namespace space::egress::http
