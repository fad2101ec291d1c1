#include "egress/http_parse.h"

#include <strings.h>

#include <algorithm>

namespace space::egress::http {

namespace {

bool isTchar(char c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return true;
  return std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && strncasecmp(a.data(), b.data(), a.size()) == 0;
}

Status bad(std::string_view what) { return makeError(ErrorKind::kInvalidArgument, "malformed HTTP: {}", what); }

std::string_view trim(std::string_view v) {
  while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
  while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
  return v;
}

// Splits the head into lines on CRLF. A bare CR or LF anywhere is an error (E15).
Result<std::vector<std::string_view>> splitLines(std::string_view head) {
  if (!head.ends_with("\r\n\r\n")) return tl::unexpected(bad("head does not end with a blank line").error());
  head.remove_suffix(4);
  std::vector<std::string_view> lines;
  size_t start = 0;
  while (true) {
    size_t crlf = head.find("\r\n", start);
    std::string_view line = head.substr(start, crlf == std::string_view::npos ? std::string_view::npos : crlf - start);
    if (line.find('\r') != std::string_view::npos || line.find('\n') != std::string_view::npos)
      return tl::unexpected(bad("bare CR or LF").error());
    lines.push_back(line);
    if (crlf == std::string_view::npos) break;
    start = crlf + 2;
  }
  return lines;
}

Result<std::vector<Header>> parseHeaders(const std::vector<std::string_view>& lines) {
  std::vector<Header> out;
  if (lines.size() - 1 > kMaxHeaders) return tl::unexpected(bad("too many headers").error());
  for (size_t i = 1; i < lines.size(); ++i) {
    std::string_view l = lines[i];
    if (l.empty()) return tl::unexpected(bad("empty header line").error());
    if (l[0] == ' ' || l[0] == '\t') return tl::unexpected(bad("obs-fold continuation line").error());
    size_t colon = l.find(':');
    if (colon == std::string_view::npos || colon == 0) return tl::unexpected(bad("header without a name").error());
    std::string_view name = l.substr(0, colon);
    for (char c : name)
      if (!isTchar(c)) return tl::unexpected(bad("bad character in a header name").error());
    std::string_view value = trim(l.substr(colon + 1));
    for (char c : value) {
      auto u = static_cast<unsigned char>(c);
      if ((u < 0x20 && c != '\t') || u == 0x7f)
        return tl::unexpected(bad("control character in a header value").error());
    }
    out.push_back({std::string(name), std::string(value)});
  }
  return out;
}

const Header* findIn(const std::vector<Header>& hs, std::string_view name) {
  for (const auto& h : hs)
    if (iequals(h.name, name)) return &h;
  return nullptr;
}
size_t countIn(const std::vector<Header>& hs, std::string_view name) {
  return std::count_if(hs.begin(), hs.end(), [&](const Header& h) { return iequals(h.name, name); });
}
void removeIn(std::vector<Header>& hs, std::string_view name) {
  std::erase_if(hs, [&](const Header& h) { return iequals(h.name, name); });
}
void setIn(std::vector<Header>& hs, std::string_view name, std::string value) {
  removeIn(hs, name);
  hs.push_back({std::string(name), std::move(value)});
}
void serializeHeaders(const std::vector<Header>& hs, std::string& out) {
  for (const auto& h : hs) out += h.name + ": " + h.value + "\r\n";
  out += "\r\n";
}

Result<uint64_t> parseLength(std::string_view v) {
  if (v.empty() || v.size() > 18) return tl::unexpected(bad("bad Content-Length").error());
  uint64_t n = 0;
  for (char c : v) {
    if (c < '0' || c > '9') return tl::unexpected(bad("bad Content-Length").error());
    n = n * 10 + (c - '0');
  }
  return n;
}

// Framing per RFC 9112 section 6, minus every case where two readers could disagree.
Result<Framing> requestFraming(const std::vector<Header>& hs) {
  size_t cl = countIn(hs, "Content-Length"), te = countIn(hs, "Transfer-Encoding");
  if (cl && te) return tl::unexpected(bad("both Content-Length and Transfer-Encoding").error());
  if (cl > 1) return tl::unexpected(bad("more than one Content-Length").error());
  if (te > 1) return tl::unexpected(bad("more than one Transfer-Encoding").error());
  if (te) {
    if (!iequals(findIn(hs, "Transfer-Encoding")->value, "chunked"))
      return tl::unexpected(bad("Transfer-Encoding other than chunked").error());
    return Framing{BodyKind::kChunked, 0};
  }
  if (cl) {
    ASSIGN_OR_RETURN(uint64_t n, parseLength(findIn(hs, "Content-Length")->value));
    return Framing{n ? BodyKind::kLength : BodyKind::kNone, n};
  }
  return Framing{};
}

}  // namespace

const Header* RequestHead::find(std::string_view name) const { return findIn(headers, name); }
void RequestHead::remove(std::string_view name) { removeIn(headers, name); }
void RequestHead::set(std::string_view name, std::string value) { setIn(headers, name, std::move(value)); }
std::string RequestHead::serialize() const {
  std::string out = fmt::format("{} {} HTTP/1.{}\r\n", method, target, minor_version);
  serializeHeaders(headers, out);
  return out;
}

const Header* ResponseHead::find(std::string_view name) const { return findIn(headers, name); }
void ResponseHead::remove(std::string_view name) { removeIn(headers, name); }
void ResponseHead::set(std::string_view name, std::string value) { setIn(headers, name, std::move(value)); }
std::string ResponseHead::serialize() const {
  std::string out = fmt::format("HTTP/1.{} {} {}\r\n", minor_version, status, reason);
  serializeHeaders(headers, out);
  return out;
}

Result<size_t> findHeadEnd(std::string_view buf) {
  size_t end = buf.find("\r\n\r\n");
  if (end == std::string_view::npos) {
    if (buf.size() > kMaxHead) return tl::unexpected(bad("head too large").error());
    return std::string_view::npos;
  }
  if (end + 4 > kMaxHead) return tl::unexpected(bad("head too large").error());
  return end + 4;
}

Result<RequestHead> parseRequestHead(std::string_view head) {
  if (head.size() > kMaxHead) return tl::unexpected(bad("head too large").error());
  ASSIGN_OR_RETURN(auto lines, splitLines(head));
  RequestHead r;
  std::string_view line = lines[0];
  size_t sp1 = line.find(' ');
  size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos)
    return tl::unexpected(bad("request line").error());
  r.method = std::string(line.substr(0, sp1));
  r.target = std::string(line.substr(sp1 + 1, sp2 - sp1 - 1));
  std::string_view version = line.substr(sp2 + 1);
  if (r.method.empty() || !std::all_of(r.method.begin(), r.method.end(), isTchar))
    return tl::unexpected(bad("method").error());
  if (r.target.empty()) return tl::unexpected(bad("empty target").error());
  for (char c : r.target) {
    auto u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u >= 0x7f) return tl::unexpected(bad("control, space or non-ASCII byte in the target").error());
  }
  if (version == "HTTP/1.1")
    r.minor_version = 1;
  else if (version == "HTTP/1.0")
    r.minor_version = 0;
  else
    return tl::unexpected(bad("version").error());
  ASSIGN_OR_RETURN(r.headers, parseHeaders(lines));
  size_t hosts = countIn(r.headers, "Host");
  if (hosts > 1) return tl::unexpected(bad("duplicate Host").error());
  if (hosts == 0 && r.minor_version == 1) return tl::unexpected(bad("HTTP/1.1 request without Host").error());
  ASSIGN_OR_RETURN(r.framing, requestFraming(r.headers));
  return r;
}

Result<ResponseHead> parseResponseHead(std::string_view head, std::string_view request_method) {
  if (head.size() > kMaxHead) return tl::unexpected(bad("head too large").error());
  ASSIGN_OR_RETURN(auto lines, splitLines(head));
  ResponseHead r;
  std::string_view line = lines[0];
  if (line.size() < 12 || !line.starts_with("HTTP/1.") || (line[7] != '0' && line[7] != '1') || line[8] != ' ')
    return tl::unexpected(bad("status line").error());
  r.minor_version = line[7] - '0';
  std::string_view code = line.substr(9, 3);
  if (!std::all_of(code.begin(), code.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return tl::unexpected(bad("status code").error());
  r.status = (code[0] - '0') * 100 + (code[1] - '0') * 10 + (code[2] - '0');
  if (line.size() > 12) {
    if (line[12] != ' ') return tl::unexpected(bad("status line").error());
    r.reason = std::string(line.substr(13));
  }
  ASSIGN_OR_RETURN(r.headers, parseHeaders(lines));
  if (request_method == "HEAD" || r.status / 100 == 1 || r.status == 204 || r.status == 304 ||
      (request_method == "CONNECT" && r.status / 100 == 2)) {
    r.framing = Framing{};
    return r;
  }
  size_t cl = countIn(r.headers, "Content-Length"), te = countIn(r.headers, "Transfer-Encoding");
  if (te) {
    if (te > 1 || cl || !iequals(findIn(r.headers, "Transfer-Encoding")->value, "chunked"))
      return tl::unexpected(bad("response framing").error());
    r.framing = Framing{BodyKind::kChunked, 0};
  } else if (cl) {
    if (cl > 1) return tl::unexpected(bad("response framing").error());
    ASSIGN_OR_RETURN(uint64_t n, parseLength(findIn(r.headers, "Content-Length")->value));
    r.framing = Framing{n ? BodyKind::kLength : BodyKind::kNone, n};
  } else {
    r.framing = Framing{BodyKind::kUntilClose, 0};
  }
  return r;
}

Result<Authority> parseAuthority(std::string_view text, uint16_t default_port) {
  Authority a;
  std::string_view host = text, port;
  if (text.empty()) return tl::unexpected(bad("empty authority").error());
  if (text.front() == '[') {
    size_t close = text.find(']');
    if (close == std::string_view::npos) return tl::unexpected(bad("unterminated IPv6 literal").error());
    host = text.substr(1, close - 1);
    a.bracketed = true;
    std::string_view rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (rest[0] != ':') return tl::unexpected(bad("junk after IPv6 literal").error());
      port = rest.substr(1);
      if (port.empty()) return tl::unexpected(bad("empty port").error());
    }
  } else {
    size_t colon = text.rfind(':');
    if (colon != std::string_view::npos) {
      host = text.substr(0, colon);
      port = text.substr(colon + 1);
      if (port.empty()) return tl::unexpected(bad("empty port").error());
    }
    for (char c : host) {
      bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-';
      if (!ok) return tl::unexpected(bad("character not allowed in a host").error());
    }
  }
  if (host.empty()) return tl::unexpected(bad("empty host").error());
  if (a.bracketed)
    for (char c : host)
      if (!isxdigit(static_cast<unsigned char>(c)) && c != ':' && c != '.')
        return tl::unexpected(bad("character not allowed in an IPv6 literal").error());
  a.host = std::string(host);
  if (port.empty()) {
    if (!default_port) return tl::unexpected(bad("port required").error());
    a.port = default_port;
    return a;
  }
  if (port.size() > 5) return tl::unexpected(bad("port").error());
  uint32_t p = 0;
  for (char c : port) {
    if (c < '0' || c > '9') return tl::unexpected(bad("port").error());
    p = p * 10 + (c - '0');
  }
  if (p == 0 || p > 65535) return tl::unexpected(bad("port out of range").error());
  a.port = uint16_t(p);
  return a;
}

Result<AbsoluteTarget> parseAbsoluteTarget(std::string_view target) {
  // Parsers disagree about backslashes and fragments (WHATWG vs RFC 3986), so neither is accepted (E8).
  if (target.find('\\') != std::string_view::npos) return tl::unexpected(bad("backslash in URL").error());
  if (target.find('#') != std::string_view::npos) return tl::unexpected(bad("fragment in request target").error());
  constexpr std::string_view kScheme = "http://";
  if (target.size() < kScheme.size() || !iequals(target.substr(0, kScheme.size()), kScheme))
    return tl::unexpected(bad("absolute-form target must be http://").error());
  std::string_view rest = target.substr(kScheme.size());
  size_t end = rest.find_first_of("/?");
  std::string_view authority = rest.substr(0, end);
  if (authority.find('@') != std::string_view::npos) return tl::unexpected(bad("userinfo in URL").error());
  if (authority.find('%') != std::string_view::npos) return tl::unexpected(bad("escape in URL authority").error());
  AbsoluteTarget t;
  ASSIGN_OR_RETURN(t.authority, parseAuthority(authority, 80));
  t.origin_form = end == std::string_view::npos ? "/" : std::string(rest.substr(end));
  if (t.origin_form[0] == '?') t.origin_form = "/" + t.origin_form;
  return t;
}

Result<size_t> ChunkedDecoder::feed(std::string_view in, std::string* out) {
  size_t i = 0;
  while (i < in.size() && state_ != State::kDone) {
    char c = in[i];
    switch (state_) {
      case State::kSize:
        if (c == '\r') {
          if (!size_seen_) return tl::unexpected(bad("chunk size").error());
          state_ = State::kSizeLf;
        } else if (c == ';') {
          in_ext_ = true;
        } else if (in_ext_) {
          if (static_cast<unsigned char>(c) < 0x20 && c != '\t') return tl::unexpected(bad("chunk extension").error());
          if (line_.size() > 1024) return tl::unexpected(bad("chunk extension too long").error());
          line_ += ' ';  // ends the size digits; the extension itself is ignored
        } else {
          int d = isxdigit(static_cast<unsigned char>(c)) ? (isdigit(c) ? c - '0' : (tolower(c) - 'a' + 10)) : -1;
          if (d < 0) return tl::unexpected(bad("chunk size").error());
          if (line_.size() >= 15) return tl::unexpected(bad("chunk size too large").error());
          line_ += c;
          size_seen_ = true;
        }
        ++i;
        break;
      case State::kSizeLf: {
        if (c != '\n') return tl::unexpected(bad("chunk size line").error());
        ++i;
        uint64_t n = 0;
        for (char h : line_) {
          if (h == ' ') break;
          n = n * 16 + (isdigit(h) ? h - '0' : (tolower(h) - 'a' + 10));
        }
        line_.clear();
        size_seen_ = false;
        in_ext_ = false;
        remaining_ = n;
        state_ = n ? State::kData : State::kTrailer;
        break;
      }
      case State::kData: {
        size_t take = std::min<uint64_t>(remaining_, in.size() - i);
        out->append(in.substr(i, take));
        i += take;
        remaining_ -= take;
        if (!remaining_) state_ = State::kDataCr;
        break;
      }
      case State::kDataCr:
        if (c != '\r') return tl::unexpected(bad("chunk data not followed by CRLF").error());
        state_ = State::kDataLf;
        ++i;
        break;
      case State::kDataLf:
        if (c != '\n') return tl::unexpected(bad("chunk data not followed by CRLF").error());
        state_ = State::kSize;
        ++i;
        break;
      case State::kTrailer:
        // Trailer lines until an empty one. Trailers are relayed but never interpreted.
        if (c == '\r') {
          state_ = State::kTrailerLf;
        } else {
          if (static_cast<unsigned char>(c) < 0x20 && c != '\t') return tl::unexpected(bad("trailer").error());
          if (++remaining_ > 8192) return tl::unexpected(bad("trailers too long").error());
          line_ += c;
          out->push_back(c);  // trailers are scanned like the body
        }
        ++i;
        break;
      case State::kTrailerLf:
        if (c != '\n') return tl::unexpected(bad("trailer line").error());
        ++i;
        if (line_.empty())
          state_ = State::kDone;
        else {
          out->push_back('\n');
          line_.clear();
          state_ = State::kTrailer;
        }
        break;
      case State::kDone:
        break;
    }
  }
  return i;
}

}  // namespace space::egress::http
