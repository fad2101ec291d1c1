// DNS wire format, only as much as the sandbox resolver needs: one question in, A/AAAA answers out.
// Hand-written and strict (docs/decisions/0004-egress-gateway.md): the input is the sandbox's, and the
// parser is fuzzed by tests/fuzz/dns_fuzz.cc.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/result.h"
#include "egress/address.h"

namespace space::egress::dns {

enum Rcode : uint8_t { kNoError = 0, kFormErr = 1, kServFail = 2, kNxDomain = 3, kNotImp = 4, kRefused = 5 };
enum Type : uint16_t { kA = 1, kAAAA = 28, kOpt = 41 };
constexpr uint16_t kClassIn = 1;

struct Query {
  uint16_t id = 0;
  bool recursion_desired = false;
  std::string name;  // as sent, labels joined by '.', not yet normalised
  uint16_t qtype = 0;
  uint16_t qclass = 0;
  std::vector<uint8_t> question;  // the question section's bytes, echoed in the answer
};

// One standard query (QR=0, OPCODE=0, QDCOUNT=1, no answers, no authority, at most one OPT record),
// uncompressed question name of printable non-dot label bytes, nothing after the last record.
Result<Query> parseQuery(std::span<const uint8_t> msg);

// The transaction id if at least a header arrived, for a FORMERR answer.
std::optional<uint16_t> peekId(std::span<const uint8_t> msg);

std::vector<uint8_t> buildResponse(const Query& q, Rcode rcode, const std::vector<IpAddress>& answers, uint32_t ttl);
std::vector<uint8_t> buildFormErr(uint16_t id);

}  // namespace space::egress::dns
