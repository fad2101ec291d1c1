// Turning a secret's real value back into something harmless in everything that goes back to the sandbox
// (E17). An upstream that reflects request headers may hand the value back as is or transformed; the forms
// redacted here are the ones echo services and frameworks produce:
//   - as is, or percent-encoded in whole or in part (every byte, only reserved bytes, either hex case,
//     '+' for a space)                                      -> the placeholder
//   - hex, lower or upper case                              -> the hex of the placeholder, same case
//   - base64 or base64url, the value at any of the three alignments inside a larger encoded blob (a whole
//     header line or JSON document base64'd)                -> the same blob with the value's bytes masked
//     as '*': the blob keeps its length and alignment, so what surrounds the value still decodes as before.
// Anything else (encryption, compression, hashing, other encodings) is not recognised: a bound host is
// trusted not to transform-and-reflect its credentials (docs/egress.md).
#pragma once

#include <bitset>
#include <string>
#include <string_view>
#include <vector>

#include "egress/http_parse.h"
#include "egress/secrets.h"

namespace space::egress {

// Replaces every recognised form of each real value in a stream, across feed() calls. Holds back at most
// as many bytes as the longest form can span until it knows they do not start one.
class ValueRedactor {
 public:
  explicit ValueRedactor(const std::vector<SecretBinding>& secrets);
  std::string feed(std::string_view data);
  std::string finish();                           // the end of the stream: decides what was held back
  std::string redactAll(std::string_view whole);  // for header values: feed + finish on a fresh state

  bool empty() const { return patterns_.empty(); }

  enum class Form { kPlain, kHex, kBase64 };
  // One step of a pattern: a byte that may also appear percent-encoded, or one character out of a set.
  struct Unit {
    bool percent_byte = false;
    uint8_t byte = 0;
    std::bitset<256> chars;
  };
  struct Pattern {
    Form form = Form::kPlain;
    std::vector<Unit> units;
    std::string replacement;  // kPlain and kHex (lower case; upper-cased when the match was)
    // kBase64: where the value's bits start in the matched characters (negative: before the first one,
    // for a pattern of only the whole characters) and how many there are.
    long value_bit = 0;
    size_t value_bits = 0;
    size_t max_chars = 0;  // the longest text the pattern can match
  };

 private:
  std::string process(bool final);
  std::string replace(const Pattern& p, std::string_view matched) const;

  std::vector<Pattern> patterns_;
  std::bitset<256> first_chars_;  // a byte no pattern can start with is passed on at once
  std::string held_;
};

void redactResponseHead(http::ResponseHead& head, const std::vector<SecretBinding>& secrets);

}  // namespace space::egress
