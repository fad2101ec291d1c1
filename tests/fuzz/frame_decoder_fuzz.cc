// libFuzzer target: arbitrary bytes through the frame decoder (in arbitrary chunking) and every decoded
// payload through the control-message parser and the credit decoder. Neither may crash, hang or
// allocate beyond the frame limit.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "agent/protocol/frame.h"
#include "agent/protocol/message.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace space::protocol;
  if (size == 0) return 0;
  // The first byte picks the chunk size so that split headers and payloads are exercised.
  size_t chunk = 1 + data[0] % 64;
  std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  Decoder decoder(64 * 1024);
  while (!rest.empty()) {
    size_t n = rest.size() < chunk ? rest.size() : chunk;
    decoder.feed(rest.substr(0, n));
    rest.remove_prefix(n);
    for (;;) {
      auto frame = decoder.next();
      if (!frame) return 0;  // malformed: a real peer drops the connection here
      if (!*frame) break;
      const Frame& f = **frame;
      if (f.type == FrameType::kCredit) (void)decodeCredit(f.payload);
      if (auto msg = parseControl(f.payload)) {
        (void)optString(*msg, "op");
        (void)optInt(*msg, "version", -1);
        (void)errorFromEvent(*msg);
        (void)msg->dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      }
    }
  }
  // The whole input as one control payload too.
  (void)parseControl(std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
