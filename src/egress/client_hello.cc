#include "egress/client_hello.h"

#include <set>
#include <vector>

namespace space::egress::tls {

namespace {

struct Cursor {
  std::span<const uint8_t> b;
  size_t pos = 0;
  bool has(size_t n) const { return b.size() - pos >= n; }
  uint32_t get(int n) {
    uint32_t v = 0;
    for (int i = 0; i < n; ++i) v = v << 8 | b[pos++];
    return v;
  }
};

Status bad(const char* what) { return makeError(ErrorKind::kInvalidArgument, "ClientHello: {}", what); }

Result<ClientHello> parseBody(std::span<const uint8_t> body) {
  ClientHello out;
  Cursor c{body};
  if (!c.has(2 + 32 + 1)) return tl::unexpected(bad("short body").error());
  uint32_t version = c.get(2);
  if ((version >> 8) != 3) return tl::unexpected(bad("not TLS").error());
  c.pos += 32;  // random
  uint32_t sid = c.get(1);
  if (sid > 32 || !c.has(sid + 2)) return tl::unexpected(bad("session id").error());
  c.pos += sid;
  uint32_t suites = c.get(2);
  if (suites < 2 || suites % 2 || !c.has(suites + 1)) return tl::unexpected(bad("cipher suites").error());
  c.pos += suites;
  uint32_t comp = c.get(1);
  if (comp < 1 || !c.has(comp)) return tl::unexpected(bad("compression methods").error());
  c.pos += comp;
  if (!c.has(1)) return out;  // no extensions at all: no SNI
  if (!c.has(2)) return tl::unexpected(bad("extensions length").error());
  uint32_t ext_total = c.get(2);
  if (c.b.size() - c.pos != ext_total) return tl::unexpected(bad("extensions length mismatch").error());
  std::set<uint32_t> seen;
  while (c.pos < c.b.size()) {
    if (!c.has(4)) return tl::unexpected(bad("extension header").error());
    uint32_t type = c.get(2), len = c.get(2);
    if (!c.has(len)) return tl::unexpected(bad("extension length").error());
    if (!seen.insert(type).second) return tl::unexpected(bad("duplicate extension").error());
    Cursor e{c.b.subspan(c.pos, len)};
    c.pos += len;
    if (type == 16) out.has_alpn = true;
    if (type != 0) continue;
    // server_name: a list of (type, name); only host_name (0), and only one of it.
    if (!e.has(2) || e.get(2) != len - 2) return tl::unexpected(bad("server_name list length").error());
    while (e.pos < e.b.size()) {
      if (!e.has(3)) return tl::unexpected(bad("server_name entry").error());
      uint32_t name_type = e.get(1), name_len = e.get(2);
      if (!e.has(name_len) || name_len == 0) return tl::unexpected(bad("server_name length").error());
      if (name_type == 0) {
        if (out.server_name) return tl::unexpected(bad("two host names").error());
        std::string name(reinterpret_cast<const char*>(e.b.data() + e.pos), name_len);
        for (unsigned char ch : name)
          if (ch <= 0x20 || ch >= 0x7f) return tl::unexpected(bad("bad byte in server name").error());
        out.server_name = std::move(name);
      }
      e.pos += name_len;
    }
  }
  return out;
}

}  // namespace

bool looksLikeTls(std::span<const uint8_t> bytes) { return bytes.size() >= 2 && bytes[0] == 0x16 && bytes[1] == 0x03; }

Result<ParseResult> parseClientHello(std::span<const uint8_t> bytes) {
  // Reassemble handshake bytes from consecutive handshake records until the ClientHello is complete.
  std::vector<uint8_t> hs;
  size_t pos = 0;
  while (true) {
    if (hs.size() >= 4) {
      if (hs[0] != 1) return tl::unexpected(bad("first handshake message is not a ClientHello").error());
      size_t need = size_t(hs[1]) << 16 | size_t(hs[2]) << 8 | hs[3];
      if (need + 4 > kMaxClientHello) return tl::unexpected(bad("too long").error());
      if (hs.size() >= need + 4) {
        if (hs.size() != need + 4) return tl::unexpected(bad("data after the ClientHello").error());
        ASSIGN_OR_RETURN(auto hello, parseBody(std::span<const uint8_t>(hs).subspan(4, need)));
        return ParseResult{ParseState::kDone, std::move(hello)};
      }
    }
    if (bytes.size() - pos < 5) return ParseResult{};
    if (bytes[pos] != 0x16) return tl::unexpected(bad("not a handshake record").error());
    if (bytes[pos + 1] != 3) return tl::unexpected(bad("record version").error());
    size_t len = size_t(bytes[pos + 3]) << 8 | bytes[pos + 4];
    if (len == 0 || len > 16384) return tl::unexpected(bad("record length").error());
    if (pos + 5 + len > kMaxClientHello) return tl::unexpected(bad("too long").error());
    if (bytes.size() - pos - 5 < len) return ParseResult{};
    hs.insert(hs.end(), bytes.begin() + pos + 5, bytes.begin() + pos + 5 + len);
    pos += 5 + len;
  }
}

}  // namespace space::egress::tls
