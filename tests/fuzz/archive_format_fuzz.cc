// libFuzzer target: arbitrary bytes as a snapshot archive's clear parts (lead, trailer, header, key
// block) and as its manifest. The manifest is parsed only after it authenticated, but a parser that
// trusts authenticated input still must not crash on a key holder's crafted archive. Whatever the
// manifest parser accepts must encode and parse again.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "archive/format.h"

using namespace space::archive;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  if (size >= kLeadBytes + kTrailerBytes) {
    if (auto lead = parseLead(in.substr(0, kLeadBytes))) {
      (void)parseTrailer(in.substr(size - kTrailerBytes), size, *lead);
      if (kLeadBytes + uint64_t{lead->header_len} + lead->key_block_len <= size) {
        (void)parseHeader(in.substr(kLeadBytes, lead->header_len));
        (void)parseKeyBlock(in.substr(kLeadBytes + lead->header_len, lead->key_block_len));
      }
    }
  }
  Header fixed{std::string(32, 'a'), ArchiveKind::kSnapshot, "acme", std::string(32, 'b'), 64 * 1024};
  auto header = parseHeader(in);
  (void)parseKeyBlock(in);
  const Header& h = header ? *header : fixed;
  if (auto m = parseManifest(in, h)) {
    if (!parseManifest(encodeManifest(*m), h)) __builtin_trap();
  }
  return 0;
}
