// libFuzzer target: arbitrary bytes as a DNS query from a sandbox. The parser must answer (a query or an
// error) and never crash, hang or read out of bounds; whatever it accepts must round-trip into an answer.
#include <cstddef>
#include <cstdint>

#include "egress/dns_message.h"
#include "egress/names.h"

using namespace space::egress;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const uint8_t> in(data, size);
  (void)dns::peekId(in);
  auto q = dns::parseQuery(in);
  if (!q) return 0;
  (void)normalizeName(q->name);
  auto out = dns::buildResponse(*q, dns::kNoError, {*parseIp("192.0.2.1"), *parseIp("2001:db8::1")}, 30);
  if (out.size() < 12) __builtin_trap();
  return 0;
}
