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

namespace {

// A segment an upstream resolves away ("." or ".."; "..;x" too, as Tomcat-style path parameters are
// stripped before resolving).
bool isDotSegment(std::string_view seg) {
  seg = seg.substr(0, seg.find(';'));
  return seg == "." || seg == "..";
}

// Whether path could name something else once the upstream decodes and resolves it: dot segments, a
// backslash, or an escaped '.', '/' or '\' (which decode into the former).
bool pathMayResolveElsewhere(std::string_view path) {
  if (path.find('\\') != std::string_view::npos) return true;
  for (size_t i = 0; i + 2 < path.size(); ++i) {
    if (path[i] != '%') continue;
    int hi = hexValue(path[i + 1]), lo = hexValue(path[i + 2]);
    if (hi < 0 || lo < 0) continue;
    char c = char(hi * 16 + lo);
    if (c == '.' || c == '/' || c == '\\') return true;
  }
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    if (isDotSegment(path.substr(start, end - start))) return true;
    start = end + 1;
  }
  return false;
}

bool validMethod(std::string_view m) {
  return !m.empty() && m.size() <= 20 && std::all_of(m.begin(), m.end(), [](char c) { return c >= 'A' && c <= 'Z'; });
}

std::string joined(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ",") + s;
  return out;
}

}  // namespace

bool SecretBinding::allowsRequest(std::string_view method, std::string_view target) const {
  if (!methods.empty() && std::find(methods.begin(), methods.end(), method) == methods.end()) return false;
  if (path_prefixes.empty()) return true;
  std::string_view path = target.substr(0, target.find_first_of("?#"));
  if (path.empty() || path[0] != '/' || pathMayResolveElsewhere(path)) return false;
  return std::any_of(path_prefixes.begin(), path_prefixes.end(),
                     [&](const std::string& p) { return path.starts_with(p); });
}

std::string SecretBinding::describeRestriction() const {
  std::string out;
  if (!methods.empty()) out += "methods " + joined(methods);
  if (!path_prefixes.empty()) out += (out.empty() ? "" : "; ") + std::string("paths ") + joined(path_prefixes);
  return out.empty() ? "any request" : out;
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
  if (b.methods.size() > 16 || b.path_prefixes.size() > 32)
    return makeError(ErrorKind::kInvalidArgument, "secret {}: at most 16 methods and 32 path prefixes", b.name);
  for (const auto& m : b.methods)
    if (!validMethod(m))
      return makeError(ErrorKind::kInvalidArgument, "secret {}: method '{}' is not an upper-case HTTP method like GET",
                       b.name, m.substr(0, 32));
  for (const auto& p : b.path_prefixes) {
    bool plain = std::all_of(p.begin(), p.end(), [](char c) {
      return static_cast<unsigned char>(c) > 0x20 && c != 0x7f && c != '?' && c != '#' && c != '%';
    });
    if (p.empty() || p[0] != '/' || p.size() > 1024 || !plain || pathMayResolveElsewhere(p))
      return makeError(ErrorKind::kInvalidArgument,
                       "secret {}: path prefix '{}' must start with '/' and hold no spaces, '?', '#', '%', "
                       "backslashes or dot segments",
                       b.name, p.substr(0, 64));
  }
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
      if (!b.allowsRequest(head.method, head.target))
        return makeError(ErrorKind::kInvalidArgument, "placeholder of secret {} in a {} request outside its {}", b.name,
                         head.method, b.describeRestriction());
      if (h.value.find(b.placeholder) == std::string::npos)
        return makeError(ErrorKind::kInvalidArgument, "encoded placeholder of secret {} in header {}", b.name, h.name);
    }
  }
  for (const auto& b : secrets) {
    if (!b.boundTo(host) || !b.allowsRequest(head.method, head.target)) continue;
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

}  // namespace space::egress
