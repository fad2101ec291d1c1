#include "egress/secrets.h"

#include <strings.h>

#include <algorithm>

#include "egress/names.h"

namespace space::egress {

namespace {

constexpr char kB64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::string base64(std::string_view in) {
  std::string out;
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    uint32_t v = uint8_t(in[i]) << 16 | uint8_t(in[i + 1]) << 8 | uint8_t(in[i + 2]);
    for (int s = 18; s >= 0; s -= 6) out += kB64[(v >> s) & 63];
  }
  return out;  // only whole groups: callers want the alignment-independent core
}

// The base64 text that every encoding of p contains, whatever bytes precede it: for each of the three
// alignments, drop the leading bytes that share a group with unknown data and the partial group at the end.
std::vector<std::string> base64Cores(std::string_view p) {
  std::vector<std::string> out;
  for (size_t skip = 0; skip < 3; ++skip) {
    if (p.size() <= skip + 3) continue;
    std::string core = base64(p.substr(skip));
    if (core.size() >= 8) out.push_back(core);
  }
  return out;
}

int hexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool containsIcase(std::string_view hay, std::string_view needle) {
  if (needle.empty() || hay.size() < needle.size()) return false;
  for (size_t i = 0; i + needle.size() <= hay.size(); ++i)
    if (strncasecmp(hay.data() + i, needle.data(), needle.size()) == 0) return true;
  return false;
}

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && strncasecmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace

bool SecretBinding::boundTo(std::string_view host) const {
  return std::any_of(hosts.begin(), hosts.end(), [&](const std::string& p) { return nameMatches(p, host); });
}

Status validateBinding(const SecretBinding& b) {
  if (b.name.empty()) return makeError(ErrorKind::kInvalidArgument, "secret without a name");
  if (b.placeholder.size() < 16 || b.placeholder.size() > 256)
    return makeError(ErrorKind::kInvalidArgument, "secret {}: placeholder must be 16..256 bytes", b.name);
  for (char c : b.placeholder)
    if (!isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_')
      return makeError(ErrorKind::kInvalidArgument, "secret {}: placeholder must be [A-Za-z0-9_-]", b.name);
  if (b.value.empty() || b.value.size() > 16384)
    return makeError(ErrorKind::kInvalidArgument, "secret {}: value must be 1..16384 bytes", b.name);
  for (char c : b.value)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
      return makeError(ErrorKind::kInvalidArgument, "secret {}: value cannot hold control characters", b.name);
  if (b.hosts.empty()) return makeError(ErrorKind::kInvalidArgument, "secret {}: no hosts", b.name);
  if (b.header.empty()) return makeError(ErrorKind::kInvalidArgument, "secret {}: no header", b.name);
  if (!b.format.empty() && b.format.find("{}") == std::string::npos)
    return makeError(ErrorKind::kInvalidArgument, "secret {}: format must contain {{}}", b.name);
  return ok();
}

PlaceholderScanner::PlaceholderScanner(const std::vector<SecretBinding>& secrets) {
  for (size_t i = 0; i < secrets.size(); ++i) {
    patterns_.push_back({secrets[i].placeholder, i, true});
    for (auto& core : base64Cores(secrets[i].placeholder)) patterns_.push_back({core, i, false});
    for (auto& core : base64Cores(secrets[i].placeholder)) {
      // base64url: the same core with - and _ (JWT-style bodies).
      std::replace(core.begin(), core.end(), '+', '-');
      std::replace(core.begin(), core.end(), '/', '_');
      patterns_.push_back({core, i, false});
    }
  }
  for (const auto& p : patterns_) keep_ = std::max(keep_, p.text.size());
}

std::optional<size_t> PlaceholderScanner::search(const std::string& window, bool decoded) {
  for (const auto& p : patterns_) {
    bool hit = p.case_insensitive ? containsIcase(window, p.text) : window.find(p.text) != std::string::npos;
    if (hit) return p.secret;
  }
  return std::nullopt;
}

std::optional<size_t> PlaceholderScanner::feed(std::string_view data) {
  if (patterns_.empty()) return std::nullopt;
  std::string raw = raw_tail_ + std::string(data);
  // Percent-decoding on the fly ("%70laceholder" is still the placeholder; so is "%2570..." decoded twice).
  std::string in = pending_escape_ + std::string(data);
  pending_escape_.clear();
  std::string decoded = decoded_tail_;
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] == '%') {
      if (in.size() - i < 3) {
        pending_escape_ = in.substr(i);
        break;
      }
      int hi = hexValue(in[i + 1]), lo = hexValue(in[i + 2]);
      if (hi >= 0 && lo >= 0) {
        decoded += char(hi * 16 + lo);
        i += 2;
        continue;
      }
    }
    decoded += in[i] == '+' ? ' ' : in[i];
  }
  std::optional<size_t> hit = search(raw, false);
  if (!hit) hit = search(decoded, true);
  if (!hit && decoded.find('%') != std::string::npos) {
    std::string twice;
    for (size_t i = 0; i < decoded.size(); ++i) {
      if (decoded[i] == '%' && i + 2 < decoded.size() && hexValue(decoded[i + 1]) >= 0 &&
          hexValue(decoded[i + 2]) >= 0) {
        twice += char(hexValue(decoded[i + 1]) * 16 + hexValue(decoded[i + 2]));
        i += 2;
      } else {
        twice += decoded[i];
      }
    }
    hit = search(twice, true);
  }
  // Keep enough context for a match (up to three escaped bytes per placeholder byte) to straddle feeds.
  size_t keep = keep_ * 3;
  raw_tail_ = raw.size() > keep ? raw.substr(raw.size() - keep) : raw;
  decoded_tail_ = decoded.size() > keep ? decoded.substr(decoded.size() - keep) : decoded;
  return hit;
}

std::optional<size_t> findPlaceholder(std::string_view text, const std::vector<SecretBinding>& secrets) {
  PlaceholderScanner s(secrets);
  return s.feed(text);
}

Result<Injection> applySecrets(http::RequestHead& head, std::string_view host,
                               const std::vector<SecretBinding>& secrets) {
  Injection out;
  if (auto i = findPlaceholder(head.target, secrets))
    return makeError(ErrorKind::kInvalidArgument, "placeholder of secret {} in the request target", secrets[*i].name);
  for (const auto& h : head.headers) {
    if (auto i = findPlaceholder(h.name, secrets))
      return makeError(ErrorKind::kInvalidArgument, "placeholder of secret {} in a header name", secrets[*i].name);
    // Each secret separately: a header may legitimately carry one secret's placeholder and must not carry
    // any other's.
    for (size_t s = 0; s < secrets.size(); ++s) {
      const SecretBinding& b = secrets[s];
      if (!findPlaceholder(h.value, std::vector<SecretBinding>{b})) continue;
      if (!b.boundTo(host))
        return makeError(ErrorKind::kInvalidArgument, "placeholder of secret {} sent to unbound host {}", b.name, host);
      if (!iequals(h.name, b.header))
        return makeError(ErrorKind::kInvalidArgument, "placeholder of secret {} in header {} (declared: {})", b.name,
                         h.name, b.header);
      if (h.value.find(b.placeholder) == std::string::npos)
        return makeError(ErrorKind::kInvalidArgument, "encoded placeholder of secret {} in header {}", b.name, h.name);
    }
  }
  for (const auto& b : secrets) {
    if (!b.boundTo(host)) continue;
    if (!b.format.empty()) {
      std::string v = b.format;
      v.replace(v.find("{}"), 2, b.value);
      head.set(b.header, std::move(v));
      out.injected.push_back(b.name);
      continue;
    }
    for (auto& h : head.headers) {
      if (!iequals(h.name, b.header)) continue;
      size_t pos = 0;
      bool any = false;
      while ((pos = h.value.find(b.placeholder, pos)) != std::string::npos) {
        h.value.replace(pos, b.placeholder.size(), b.value);
        pos += b.value.size();
        any = true;
      }
      if (any) out.injected.push_back(b.name);
    }
  }
  return out;
}

ValueRedactor::ValueRedactor(const std::vector<SecretBinding>& secrets) {
  for (const auto& b : secrets) {
    pairs_.emplace_back(b.value, b.placeholder);
    max_len_ = std::max(max_len_, b.value.size());
  }
  // Longest first, so that a value containing another value is replaced whole.
  std::sort(pairs_.begin(), pairs_.end(), [](auto& a, auto& b) { return a.first.size() > b.first.size(); });
}

std::string ValueRedactor::feed(std::string_view data) {
  if (pairs_.empty()) return std::string(data);
  held_.append(data);
  std::string out;
  size_t i = 0;
  // Emit bytes up to the point where a value could still begin and be cut off by the end of held_.
  while (i < held_.size()) {
    bool replaced = false;
    for (const auto& [value, placeholder] : pairs_) {
      if (held_.compare(i, value.size(), value) == 0 && held_.size() - i >= value.size()) {
        out += placeholder;
        i += value.size();
        replaced = true;
        break;
      }
    }
    if (replaced) continue;
    if (held_.size() - i < max_len_) {
      // Could the rest be the start of a value? Then wait for more bytes.
      std::string_view rest(held_.data() + i, held_.size() - i);
      bool prefix = std::any_of(pairs_.begin(), pairs_.end(),
                                [&](auto& p) { return p.first.size() > rest.size() && p.first.starts_with(rest); });
      if (prefix) break;
    }
    out += held_[i++];
  }
  held_.erase(0, i);
  return out;
}

std::string ValueRedactor::finish() {
  std::string out;
  out.swap(held_);
  return out;  // a proper prefix of a value is not the value
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
