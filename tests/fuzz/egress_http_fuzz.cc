// libFuzzer target: arbitrary bytes as a request head, a target and a chunked body from a sandbox, through
// the gateway's strict HTTP parsers and the placeholder scanner.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "egress/http_parse.h"
#include "egress/secrets.h"

using namespace space::egress;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  if (auto end = http::findHeadEnd(in); end && *end != std::string_view::npos) {
    if (auto head = http::parseRequestHead(in.substr(0, *end))) {
      SecretBinding b{"K", "space_ph_0123456789abcdef", "value-123", {"a.test"}, "Authorization", ""};
      std::vector<SecretBinding> secrets{b};
      (void)applySecrets(*head, "a.test", secrets);
      (void)head->serialize();
    }
    (void)http::parseResponseHead(in.substr(0, *end), "GET");
  }
  (void)http::parseAbsoluteTarget(in);
  (void)http::parseAuthority(in, 80);
  http::ChunkedDecoder dec;
  std::string out;
  (void)dec.feed(in, &out);
  PlaceholderScanner scan({SecretBinding{"K", "space_ph_0123456789abcdef", "v", {"a.test"}, "X", ""}});
  (void)scan.feed(in);
  return 0;
}
