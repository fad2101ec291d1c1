#include "egress/dns_message.h"

namespace space::egress::dns {

namespace {

struct Reader {
  std::span<const uint8_t> in;
  size_t pos = 0;
  bool has(size_t n) const { return in.size() - pos >= n; }
  uint16_t u16() {
    uint16_t v = uint16_t(in[pos] << 8 | in[pos + 1]);
    pos += 2;
    return v;
  }
};

Result<std::string> readName(Reader& r) {
  std::string name;
  size_t wire_len = 0;
  while (true) {
    if (!r.has(1)) return makeError(ErrorKind::kInvalidArgument, "truncated name");
    uint8_t len = r.in[r.pos++];
    ++wire_len;
    if (len == 0) break;
    if (len & 0xc0) return makeError(ErrorKind::kInvalidArgument, "compressed or extended label in a question");
    if (!r.has(len)) return makeError(ErrorKind::kInvalidArgument, "truncated label");
    wire_len += len;
    if (wire_len > 255) return makeError(ErrorKind::kInvalidArgument, "name longer than 255 bytes");
    if (!name.empty()) name += '.';
    for (size_t i = 0; i < len; ++i) {
      uint8_t c = r.in[r.pos + i];
      // A dot inside a label would make two names look alike once joined; controls have no place in a name.
      if (c <= 0x20 || c == '.' || c >= 0x7f) return makeError(ErrorKind::kInvalidArgument, "bad byte in a label");
      name += char(c);
    }
    r.pos += len;
  }
  if (name.empty()) return makeError(ErrorKind::kInvalidArgument, "query for the root");
  return name;
}

void put16(std::vector<uint8_t>& out, uint16_t v) {
  out.push_back(uint8_t(v >> 8));
  out.push_back(uint8_t(v));
}

}  // namespace

std::optional<uint16_t> peekId(std::span<const uint8_t> msg) {
  if (msg.size() < 12) return std::nullopt;
  return uint16_t(msg[0] << 8 | msg[1]);
}

Result<Query> parseQuery(std::span<const uint8_t> msg) {
  if (msg.size() < 12) return makeError(ErrorKind::kInvalidArgument, "short DNS header");
  if (msg.size() > 4096) return makeError(ErrorKind::kInvalidArgument, "DNS message too long");
  Reader r{msg};
  Query q;
  q.id = r.u16();
  uint16_t flags = r.u16();
  if (flags & 0x8000) return makeError(ErrorKind::kInvalidArgument, "not a query");
  if ((flags >> 11) & 0xf) return makeError(ErrorKind::kUnsupported, "opcode other than QUERY");
  q.recursion_desired = flags & 0x0100;
  uint16_t qd = r.u16(), an = r.u16(), ns = r.u16(), ar = r.u16();
  if (qd != 1 || an != 0 || ns != 0 || ar > 1)
    return makeError(ErrorKind::kInvalidArgument, "a query carries one question and at most one OPT record");
  size_t qstart = r.pos;
  ASSIGN_OR_RETURN(q.name, readName(r));
  if (!r.has(4)) return makeError(ErrorKind::kInvalidArgument, "truncated question");
  q.qtype = r.u16();
  q.qclass = r.u16();
  q.question.assign(msg.begin() + qstart, msg.begin() + r.pos);
  if (ar == 1) {
    // OPT pseudo-record (EDNS): root name, type 41, then class, ttl, rdlength and rdata.
    if (!r.has(11) || r.in[r.pos] != 0) return makeError(ErrorKind::kInvalidArgument, "bad additional record");
    r.pos += 1;
    if (r.u16() != kOpt) return makeError(ErrorKind::kInvalidArgument, "additional record is not OPT");
    r.pos += 6;  // class (UDP size) and extended rcode/flags
    uint16_t rdlen = r.u16();
    if (!r.has(rdlen)) return makeError(ErrorKind::kInvalidArgument, "truncated OPT data");
    r.pos += rdlen;
  }
  if (r.pos != msg.size()) return makeError(ErrorKind::kInvalidArgument, "trailing bytes after the query");
  return q;
}

std::vector<uint8_t> buildResponse(const Query& q, Rcode rcode, const std::vector<IpAddress>& answers, uint32_t ttl) {
  std::vector<uint8_t> out;
  out.reserve(12 + q.question.size() + answers.size() * 28);
  put16(out, q.id);
  uint16_t flags = 0x8000 | 0x0080 | rcode;  // QR, RA
  if (q.recursion_desired) flags |= 0x0100;
  put16(out, flags);
  put16(out, 1);
  put16(out, uint16_t(answers.size()));
  put16(out, 0);
  put16(out, 0);
  out.insert(out.end(), q.question.begin(), q.question.end());
  for (const auto& a : answers) {
    put16(out, 0xc00c);  // pointer to the question name at offset 12
    put16(out, a.v6 ? kAAAA : kA);
    put16(out, kClassIn);
    put16(out, uint16_t(ttl >> 16));
    put16(out, uint16_t(ttl));
    put16(out, a.v6 ? 16 : 4);
    out.insert(out.end(), a.bytes.begin(), a.bytes.begin() + (a.v6 ? 16 : 4));
  }
  return out;
}

std::vector<uint8_t> buildFormErr(uint16_t id) {
  std::vector<uint8_t> out;
  put16(out, id);
  put16(out, 0x8000 | 0x0080 | kFormErr);
  for (int i = 0; i < 4; ++i) put16(out, 0);
  return out;
}

}  // namespace space::egress::dns
