#include "egress/redaction.h"

#include <algorithm>

namespace space::egress {

namespace {

using Unit = ValueRedactor::Unit;
using Pattern = ValueRedactor::Pattern;
using Form = ValueRedactor::Form;

constexpr char kB64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
constexpr char kB64Url[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
constexpr char kHexLower[] = "0123456789abcdef";
// What stands in for the value's bytes inside a base64 blob. Its bits never make a character 62 or 63 at
// any alignment, so the masked text is the same in base64 and base64url.
constexpr uint8_t kMaskByte = '*';
// Base64 patterns shorter than this many fully determined characters would mask unrelated data too often.
constexpr size_t kMinBase64Chars = 4;
// A pattern of only the fully determined characters (no partial first or last one) is a fallback for
// encodings whose edges are not standard; it needs more length to be specific.
constexpr size_t kMinCoreChars = 8;

int hexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

int base64Value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+' || c == '-') return 62;
  if (c == '/' || c == '_') return 63;
  return -1;
}

Unit oneOf(std::string_view chars) {
  Unit u;
  for (char c : chars) u.chars.set(uint8_t(c));
  return u;
}

// Literal and percent-encoded, in whole or in part.
Pattern plainPattern(const SecretBinding& b) {
  Pattern p;
  p.form = Form::kPlain;
  for (char c : b.value) {
    Unit u;
    u.percent_byte = true;
    u.byte = uint8_t(c);
    p.units.push_back(u);
  }
  p.replacement = b.placeholder;
  p.max_chars = 3 * b.value.size();
  return p;
}

Pattern hexPattern(const SecretBinding& b) {
  Pattern p;
  p.form = Form::kHex;
  for (char c : b.value)
    for (int nibble : {uint8_t(c) >> 4, uint8_t(c) & 15}) {
      const char both[] = {kHexLower[nibble], char(toupper(kHexLower[nibble]))};
      p.units.push_back(oneOf(std::string_view(both, 2)));
    }
  for (char c : b.placeholder) {
    p.replacement += kHexLower[uint8_t(c) >> 4];
    p.replacement += kHexLower[uint8_t(c) & 15];
  }
  p.max_chars = 2 * b.value.size();
  return p;
}

// The characters of a base64 text whose bits from value_bit on are the value's: each character is the set
// of those consistent with the bits it shares with the value (one character where all six are the
// value's; 4 or 16 at a partial edge, whose other bits belong to the neighbouring data).
std::vector<std::bitset<64>> base64Sets(std::string_view value, size_t value_bit) {
  size_t total = value_bit + 8 * value.size();
  std::vector<std::bitset<64>> sets((total + 5) / 6);
  auto valueBit = [&](size_t i) { return (uint8_t(value[i / 8]) >> (7 - i % 8)) & 1; };
  for (size_t j = 0; j < sets.size(); ++j)
    for (int s = 0; s < 64; ++s) {
      bool consistent = true;
      for (int k = 0; k < 6 && consistent; ++k) {
        size_t bit = 6 * j + k;
        if (bit < value_bit || bit >= total) continue;
        consistent = ((s >> (5 - k)) & 1) == valueBit(bit - value_bit);
      }
      if (consistent) sets[j].set(s);
    }
  return sets;
}

Unit base64Unit(const std::bitset<64>& set) {
  Unit u;
  for (int s = 0; s < 64; ++s)
    if (set[s]) {
      u.chars.set(uint8_t(kB64[s]));
      u.chars.set(uint8_t(kB64Url[s]));
    }
  return u;
}

// For each alignment of the value inside a blob (its first byte at offset 0, 1 or 2 of a 3-byte group, so
// its first bit at bit 0, 2 or 4 of a character), the pattern with the partial edge characters, and the
// pattern of only the whole characters.
void addBase64Patterns(const SecretBinding& b, std::vector<Pattern>& out) {
  for (size_t value_bit : {0, 2, 4}) {
    auto sets = base64Sets(b.value, value_bit);
    size_t first_whole = value_bit == 0 ? 0 : 1;
    size_t end_whole = (value_bit + 8 * b.value.size()) / 6;  // one past the last whole character
    if (end_whole < first_whole + kMinBase64Chars) continue;
    Pattern full;
    full.form = Form::kBase64;
    for (const auto& s : sets) full.units.push_back(base64Unit(s));
    full.value_bit = long(value_bit);
    full.value_bits = 8 * b.value.size();
    full.max_chars = full.units.size();
    out.push_back(full);
    bool has_edges = first_whole > 0 || end_whole < sets.size();
    if (!has_edges || end_whole - first_whole < kMinCoreChars) continue;
    Pattern core = full;
    core.units.assign(full.units.begin() + long(first_whole), full.units.begin() + long(end_whole));
    core.value_bit = long(value_bit) - 6 * long(first_whole);
    core.max_chars = core.units.size();
    out.push_back(std::move(core));
  }
}

enum class Match { kNo, kMore, kFull };

// Whether p matches text at i; *len is the length of the match. kMore: text ends before it is decided.
Match matchAt(const Pattern& p, std::string_view text, size_t i, size_t* len) {
  size_t pos = i;
  for (const Unit& u : p.units) {
    if (pos >= text.size()) return Match::kMore;
    char c = text[pos];
    if (!u.percent_byte) {
      if (!u.chars[uint8_t(c)]) return Match::kNo;
      ++pos;
      continue;
    }
    if (c == '%') {
      if (text.size() - pos < 3) return Match::kMore;
      int hi = hexValue(text[pos + 1]), lo = hexValue(text[pos + 2]);
      if (hi >= 0 && lo >= 0 && uint8_t(hi * 16 + lo) == u.byte) {
        pos += 3;
        continue;
      }
    }
    if (uint8_t(c) == u.byte || (u.byte == ' ' && c == '+')) {
      ++pos;
      continue;
    }
    return Match::kNo;
  }
  *len = pos - i;
  return Match::kFull;
}

}  // namespace

ValueRedactor::ValueRedactor(const std::vector<SecretBinding>& secrets) {
  for (const auto& b : secrets) {
    if (b.value.empty()) continue;
    patterns_.push_back(plainPattern(b));
    patterns_.push_back(hexPattern(b));
    addBase64Patterns(b, patterns_);
  }
  for (const auto& p : patterns_) {
    const Unit& u = p.units.front();
    if (!u.percent_byte) {
      first_chars_ |= u.chars;
      continue;
    }
    first_chars_.set(u.byte);
    first_chars_.set('%');
    if (u.byte == ' ') first_chars_.set('+');
  }
}

std::string ValueRedactor::replace(const Pattern& p, std::string_view matched) const {
  if (p.form == Form::kPlain) return p.replacement;
  if (p.form == Form::kHex) {
    bool upper = std::any_of(matched.begin(), matched.end(), [](char c) { return c >= 'A' && c <= 'F'; });
    std::string out = p.replacement;
    if (upper) std::transform(out.begin(), out.end(), out.begin(), ::toupper);
    return out;
  }
  // Base64: the matched characters' bits, with the value's replaced by the mask's, encoded again.
  bool url = matched.find_first_of("-_") != std::string_view::npos;
  const char* alphabet = url ? kB64Url : kB64;
  std::string out(matched);
  for (size_t j = 0; j < matched.size(); ++j) {
    int s = base64Value(matched[j]);
    for (int k = 0; k < 6; ++k) {
      long rel = long(6 * j + k) - p.value_bit;
      if (rel < 0 || rel >= long(p.value_bits)) continue;
      int bit = (kMaskByte >> (7 - rel % 8)) & 1;
      s = (s & ~(1 << (5 - k))) | (bit << (5 - k));
    }
    out[j] = alphabet[s];
  }
  return out;
}

std::string ValueRedactor::process(bool final) {
  std::string out;
  size_t i = 0;
  while (i < held_.size()) {
    if (!first_chars_[uint8_t(held_[i])]) {
      out += held_[i++];
      continue;
    }
    const Pattern* best = nullptr;
    size_t best_len = 0;
    bool undecided = false;
    for (const auto& p : patterns_) {
      size_t len = 0;
      Match m = matchAt(p, held_, i, &len);
      if (m == Match::kMore) undecided = true;
      if (m == Match::kFull && len > best_len) {
        best = &p;
        best_len = len;
      }
    }
    // A longer form may still begin here: wait for the bytes that decide it (or for the end).
    if (undecided && !final) break;
    if (best) {
      out += replace(*best, std::string_view(held_).substr(i, best_len));
      i += best_len;
      continue;
    }
    out += held_[i++];
  }
  held_.erase(0, i);
  return out;
}

std::string ValueRedactor::feed(std::string_view data) {
  if (patterns_.empty()) return std::string(data);
  held_.append(data);
  return process(false);
}

std::string ValueRedactor::finish() {
  if (patterns_.empty()) return std::move(held_);
  std::string out = process(true);
  held_.clear();
  return out;
}

std::string ValueRedactor::redactAll(std::string_view whole) {
  ValueRedactor fresh(*this);
  fresh.held_.clear();
  std::string out = fresh.feed(whole);
  return out + fresh.finish();
}

void redactResponseHead(http::ResponseHead& head, const std::vector<SecretBinding>& secrets) {
  ValueRedactor r(secrets);
  if (r.empty()) return;
  head.reason = r.redactAll(head.reason);
  for (auto& h : head.headers) {
    h.name = r.redactAll(h.name);
    h.value = r.redactAll(h.value);
  }
}

}  // namespace space::egress
