#include "egress/address.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstring>

namespace space::egress {

IpAddress IpAddress::fromV4(uint32_t host_order) {
  IpAddress a;
  a.bytes[0] = uint8_t(host_order >> 24);
  a.bytes[1] = uint8_t(host_order >> 16);
  a.bytes[2] = uint8_t(host_order >> 8);
  a.bytes[3] = uint8_t(host_order);
  return a;
}

uint32_t IpAddress::v4Value() const {
  return uint32_t(bytes[0]) << 24 | uint32_t(bytes[1]) << 16 | uint32_t(bytes[2]) << 8 | bytes[3];
}

std::string IpAddress::str() const {
  char buf[INET6_ADDRSTRLEN] = {};
  inet_ntop(v6 ? AF_INET6 : AF_INET, bytes.data(), buf, sizeof buf);
  return buf;
}

Result<IpAddress> parseIp(std::string_view text) {
  if (text.empty() || text.size() >= INET6_ADDRSTRLEN) return makeError(ErrorKind::kInvalidArgument, "bad address");
  std::string s(text);
  IpAddress a;
  if (s.find(':') != std::string::npos) {
    a.v6 = true;
    if (inet_pton(AF_INET6, s.c_str(), a.bytes.data()) != 1)
      return makeError(ErrorKind::kInvalidArgument, "bad IPv6 address '{}'", s);
    return a;
  }
  // inet_pton(AF_INET) accepts exactly four decimal parts without leading zeros.
  if (inet_pton(AF_INET, s.c_str(), a.bytes.data()) != 1)
    return makeError(ErrorKind::kInvalidArgument, "bad IPv4 address '{}'", s);
  return a;
}

namespace {

// One inet_aton part: decimal, 0-prefixed octal or 0x-prefixed hex. Rejects empty parts and overflow.
std::optional<uint64_t> parseAtonPart(std::string_view p) {
  if (p.empty()) return std::nullopt;
  int base = 10;
  if (p.size() >= 2 && p[0] == '0' && (p[1] == 'x' || p[1] == 'X')) {
    base = 16;
    p.remove_prefix(2);
    if (p.empty()) return uint64_t{0};  // inet_aton reads "0x" as zero
  } else if (p.size() > 1 && p[0] == '0') {
    base = 8;
    p.remove_prefix(1);
  }
  uint64_t v = 0;
  for (char c : p) {
    int d;
    if (c >= '0' && c <= '9')
      d = c - '0';
    else if (base == 16 && c >= 'a' && c <= 'f')
      d = c - 'a' + 10;
    else if (base == 16 && c >= 'A' && c <= 'F')
      d = c - 'A' + 10;
    else
      return std::nullopt;
    if (d >= base) return std::nullopt;
    v = v * base + d;
    if (v > 0xffffffffull) return std::nullopt;
  }
  return v;
}

bool looksNumeric(std::string_view label) {
  if (label.empty()) return false;
  if (label.size() >= 2 && label[0] == '0' && (label[1] == 'x' || label[1] == 'X')) {
    for (char c : label.substr(2))
      if (!isxdigit(static_cast<unsigned char>(c))) return false;
    return true;
  }
  for (char c : label)
    if (c < '0' || c > '9') return false;
  return true;
}

}  // namespace

std::optional<IpAddress> parseLooseIpv4(std::string_view text) {
  std::vector<uint64_t> parts;
  size_t start = 0;
  while (true) {
    size_t dot = text.find('.', start);
    auto v = parseAtonPart(text.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start));
    if (!v) return std::nullopt;
    parts.push_back(*v);
    if (parts.size() > 4) return std::nullopt;
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  uint64_t value = 0;
  switch (parts.size()) {
    case 1:
      value = parts[0];
      break;
    case 2:
      if (parts[0] > 0xff || parts[1] > 0xffffff) return std::nullopt;
      value = parts[0] << 24 | parts[1];
      break;
    case 3:
      if (parts[0] > 0xff || parts[1] > 0xff || parts[2] > 0xffff) return std::nullopt;
      value = parts[0] << 24 | parts[1] << 16 | parts[2];
      break;
    case 4:
      for (auto p : parts)
        if (p > 0xff) return std::nullopt;
      value = parts[0] << 24 | parts[1] << 16 | parts[2] << 8 | parts[3];
      break;
  }
  return IpAddress::fromV4(uint32_t(value));
}

Result<std::optional<IpAddress>> parseHostLiteral(std::string_view host) {
  if (host.empty()) return makeError(ErrorKind::kInvalidArgument, "empty host");
  if (host.front() == '[') {
    if (host.back() != ']') return makeError(ErrorKind::kInvalidArgument, "unterminated IPv6 literal");
    host = host.substr(1, host.size() - 2);
    if (host.find(':') == std::string_view::npos)
      return makeError(ErrorKind::kInvalidArgument, "bracketed host is not IPv6");
  }
  if (host.find('%') != std::string_view::npos)
    return makeError(ErrorKind::kInvalidArgument, "zone ids and escapes are not allowed in a host");
  if (host.find(':') != std::string_view::npos) {
    ASSIGN_OR_RETURN(auto ip, parseIp(host));
    return std::optional<IpAddress>(ip);
  }
  if (auto v4 = parseLooseIpv4(host)) return std::optional<IpAddress>(*v4);
  // The WHATWG URL rule: a host whose last label is numeric is an IPv4 address or invalid, never a name.
  std::string_view last = host;
  if (!last.empty() && last.back() == '.') last.remove_suffix(1);
  if (auto dot = last.rfind('.'); dot != std::string_view::npos) last = last.substr(dot + 1);
  if (looksNumeric(last)) return makeError(ErrorKind::kInvalidArgument, "malformed IPv4 literal '{}'", host);
  return std::optional<IpAddress>{};
}

std::optional<IpAddress> fromSockaddr(const struct sockaddr* sa) {
  IpAddress a;
  if (sa->sa_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(sa);
    std::memcpy(a.bytes.data(), &in->sin_addr, 4);
    return a;
  }
  if (sa->sa_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
    a.v6 = true;
    std::memcpy(a.bytes.data(), &in6->sin6_addr, 16);
    return a;
  }
  return std::nullopt;
}

bool Cidr::contains(const IpAddress& ip) const {
  if (ip.v6 != base.v6) return false;
  int full = prefix / 8, rest = prefix % 8;
  if (std::memcmp(ip.bytes.data(), base.bytes.data(), full) != 0) return false;
  if (rest == 0) return true;
  uint8_t mask = uint8_t(0xff << (8 - rest));
  return (ip.bytes[full] & mask) == (base.bytes[full] & mask);
}

std::string Cidr::str() const { return fmt::format("{}/{}", base.str(), prefix); }

Result<Cidr> parseCidr(std::string_view text) {
  Cidr c;
  size_t slash = text.find('/');
  ASSIGN_OR_RETURN(c.base, parseIp(text.substr(0, slash)));
  int max = c.base.v6 ? 128 : 32;
  if (slash == std::string_view::npos) {
    c.prefix = max;
  } else {
    std::string_view p = text.substr(slash + 1);
    if (p.empty() || p.size() > 3) return makeError(ErrorKind::kInvalidArgument, "bad prefix in '{}'", text);
    int v = 0;
    for (char ch : p) {
      if (ch < '0' || ch > '9') return makeError(ErrorKind::kInvalidArgument, "bad prefix in '{}'", text);
      v = v * 10 + (ch - '0');
    }
    if (v > max) return makeError(ErrorKind::kInvalidArgument, "prefix too long in '{}'", text);
    c.prefix = v;
  }
  // Zero the host bits so that equal networks compare equal.
  for (int bit = c.prefix; bit < max; ++bit) c.base.bytes[bit / 8] &= uint8_t(~(0x80 >> (bit % 8)));
  return c;
}

std::optional<IpAddress> embeddedIpv4(const IpAddress& ip) {
  if (!ip.v6) return std::nullopt;
  const auto& b = ip.bytes;
  auto v4At = [&](int off) {
    IpAddress a;
    std::memcpy(a.bytes.data(), b.data() + off, 4);
    return a;
  };
  static const Cidr kMapped = *parseCidr("::ffff:0:0/96");
  static const Cidr kNat64 = *parseCidr("64:ff9b::/96");
  static const Cidr kNat64Local = *parseCidr("64:ff9b:1::/48");
  static const Cidr k6to4 = *parseCidr("2002::/16");
  static const Cidr kTeredo = *parseCidr("2001::/32");
  static const Cidr kCompat = *parseCidr("::/96");
  if (kMapped.contains(ip) || kNat64.contains(ip) || kNat64Local.contains(ip)) return v4At(12);
  if (k6to4.contains(ip)) return v4At(2);
  if (kTeredo.contains(ip)) {
    // RFC 4380: the client's address is the last 32 bits, inverted; the server's sits in bytes 4..7.
    // The client address is where a packet would go, so that one is judged.
    IpAddress a = v4At(12);
    for (int i = 0; i < 4; ++i) a.bytes[i] = uint8_t(~a.bytes[i]);
    return a;
  }
  if (kCompat.contains(ip)) {
    uint32_t v = v4At(12).v4Value();
    if (v > 1) return v4At(12);  // :: and ::1 are judged as IPv6
  }
  return std::nullopt;
}

const std::vector<Cidr>& defaultDenyRanges() {
  static const std::vector<Cidr> ranges = [] {
    std::vector<Cidr> out;
    for (const char* s :
         {"0.0.0.0/8",    "10.0.0.0/8",    "100.64.0.0/10",  "127.0.0.0/8",      "169.254.0.0/16",  "172.16.0.0/12",
          "192.0.0.0/24", "192.0.2.0/24",  "192.168.0.0/16", "198.18.0.0/15",    "198.51.100.0/24", "203.0.113.0/24",
          "224.0.0.0/4",  "240.0.0.0/4",   "::/128",         "::1/128",          "fc00::/7",        "fe80::/10",
          "ff00::/8",     "2001:db8::/32", "100::/64",       "fd00:ec2::254/128"})
      out.push_back(*parseCidr(s));
    return out;
  }();
  return ranges;
}

Classification classify(const IpAddress& ip, uint16_t port, const HostFacts& facts,
                        const std::vector<Cidr>& test_external_subnets) {
  Classification c;
  c.judged = ip;
  if (auto v4 = embeddedIpv4(ip)) c.judged = *v4;
  const IpAddress& j = c.judged;

  // Lateral targets first: no rule, not even the test setting, opens these.
  for (const auto& h : facts.host_addresses)
    if (h == j || h == ip) {
      c.cls = AddressClass::kLateral;
      c.range = "host address " + h.str();
      return c;
    }
  for (const auto& l : facts.gateway_listeners) {
    bool any = l.address == IpAddress{l.address.v6, {}};
    if (l.port == port && (any || l.address == j || l.address == ip)) {
      c.cls = AddressClass::kLateral;
      c.range = fmt::format("gateway listener port {}", l.port);
      return c;
    }
  }
  for (const auto& s : facts.sandbox_subnets)
    if (s.contains(j) || s.contains(ip)) {
      c.cls = AddressClass::kLateral;
      c.range = "sandbox subnet " + s.str();
      return c;
    }
  for (const auto& t : test_external_subnets)
    if (t.contains(j)) return c;  // declared external by the operator's config file
  for (const auto& r : defaultDenyRanges())
    if (r.contains(j)) {
      c.cls = AddressClass::kReserved;
      c.range = r.str();
      return c;
    }
  return c;
}

}  // namespace space::egress
