// libFuzzer target: arbitrary bytes as the first flight of a transparent connection. The ClientHello
// parser and the name and address parsers it feeds must answer and never crash or hang.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "egress/address.h"
#include "egress/client_hello.h"
#include "egress/names.h"

using namespace space::egress;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto r = tls::parseClientHello(std::span<const uint8_t>(data, size));
  if (r && r->state == tls::ParseState::kDone && r->hello.server_name) {
    (void)parseHostLiteral(*r->hello.server_name);
    (void)normalizeName(*r->hello.server_name);
  }
  std::string_view text(reinterpret_cast<const char*>(data), size);
  (void)parseHostLiteral(text);
  (void)parseCidr(text);
  return 0;
}
