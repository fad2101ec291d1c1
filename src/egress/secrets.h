// Secret bindings and what the gateway does with them (E13, E14, E17): put the real value into the one
// declared header of requests to the bound hosts, refuse a placeholder anywhere else, and turn the real
// value back into the placeholder in everything that goes back to the sandbox. Values live only in the
// memory of space-egress; audit lines carry secret names, never values.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "egress/http_parse.h"

namespace space::egress {

struct SecretBinding {
  std::string name;                // for the audit log
  std::string placeholder;         // what the sandbox holds instead of the value
  std::string value;               // the real value; never logged
  std::vector<std::string> hosts;  // normalised names, exact or "*.suffix"
  std::string header = "Authorization";
  std::string format;  // "" = replace the placeholder inside the header; "Bearer {}" = set it
  // Optional restriction to some requests of the bound hosts; empty = any. A request outside it is
  // treated like one to an unbound host: the secret is not put in, and its placeholder is refused.
  std::vector<std::string> methods;        // "GET", "POST": compared exactly, as HTTP does
  std::vector<std::string> path_prefixes;  // "/v1/": a plain prefix of the target's path

  bool boundTo(std::string_view host) const;
  // Whether a request with this method and origin-form target is inside the restriction. A path with dot
  // segments or encoded separators is outside whenever there are prefixes: the upstream would resolve it
  // to a path the prefix does not cover ("/v1/../admin").
  bool allowsRequest(std::string_view method, std::string_view target) const;
  std::string describeRestriction() const;  // "methods GET,POST; paths /v1/" for refusals
};

// Checks a binding's own consistency (placeholder length and alphabet, hosts, header, format, methods,
// path prefixes).
Status validateBinding(const SecretBinding& b);

// Finds any secret's placeholder in a stream of bytes, in the forms a sandbox could smuggle it: as is (any
// case), percent-encoded in part or whole, and base64-encoded at any alignment (Basic auth, JSON, bodies).
// Matches that straddle feed() calls are found.
class PlaceholderScanner {
 public:
  explicit PlaceholderScanner(const std::vector<SecretBinding>& secrets);
  // The index of the first secret whose placeholder was seen so far, or nullopt.
  std::optional<size_t> feed(std::string_view data);

 private:
  struct Pattern {
    std::string text;
    size_t secret;
    bool case_insensitive;
  };
  std::optional<size_t> search(const std::string& window, bool decoded);
  std::vector<Pattern> patterns_;
  size_t keep_ = 0;  // bytes of context kept between feeds
  std::string raw_tail_;
  std::string decoded_tail_;
  std::string pending_escape_;  // an incomplete "%X" at the end of the last feed
};

std::optional<size_t> findPlaceholder(std::string_view text, const std::vector<SecretBinding>& secrets);

struct Injection {
  std::vector<std::string> injected;  // secret names
};

// Applies the sandbox's secrets to a request head bound for host (normalised). Refuses (kInvalidArgument,
// with the secret's name and where it was seen) when a placeholder appears outside the declared header of
// a secret bound to host: another header, the target, a request to an unbound host or one outside the
// secret's methods and path prefixes.
Result<Injection> applySecrets(http::RequestHead& head, std::string_view host,
                               const std::vector<SecretBinding>& secrets);

}  // namespace space::egress
