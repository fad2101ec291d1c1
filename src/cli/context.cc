#include "cli/context.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>

#include "cli/output.h"

namespace space::cli {

Result<Context> contextFromEnv(bool json) {
  const char* host = std::getenv("SPACE_HOST");
  const char* key = std::getenv("SPACE_API_KEY");
  ASSIGN_OR_RETURN(auto endpoint, http::parseEndpoint(host && *host ? host : "unix:///run/space/spaced.sock"));
  return Context{http::Client(endpoint, key ? key : ""), json};
}

namespace {

// Whether a daemon message is about what the node offers (a tier, its accelerator, the egress gateway)
// rather than about one sandbox.
bool aboutNodeFacility(const std::string& message) {
  std::string lower = message;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  for (std::string_view word : {"tier", "isolation", "kvm", "accelerator", "egress"}) {
    if (lower.find(word) != std::string::npos) return true;
  }
  return false;
}

}  // namespace

namespace {

// Where to look when something is not there, by what the daemon says was missing.
std::string notFoundHint(const std::string& resource) {
  if (resource == "sandbox") return "'space ls' lists sandboxes";
  if (resource == "template") return "'space template ls' lists templates; 'space template build NAME' makes one";
  if (resource == "snapshot") return "'space history ID' lists a sandbox's snapshots";
  if (resource == "file") return "'space files ls ID DIR' shows what is there; 'space cp -p' makes missing directories";
  if (resource == "process") return "'space ps ID' lists the sandbox's background processes";
  if (resource == "key") return "'space key ls' lists API keys";
  if (resource == "secret") return "'space secret ls' lists secrets";
  return "";  // a local file, or something the daemon did not name: the message says enough
}

}  // namespace

std::string failureHint(const Error& error) {
  switch (error.kind) {
    case ErrorKind::kUnavailable:
      if (aboutNodeFacility(error.message))
        return "'space node' shows the node's tiers, accelerator and egress as they are now, and why any is "
               "missing; retry once it is back";
      return "the daemon is busy or the sandbox's agent went away; retry, or check 'space inspect ID'";
    case ErrorKind::kUnauthenticated:
      return "set SPACE_API_KEY to a key made with 'space key create NAME' on the daemon's host";
    case ErrorKind::kNotFound:
      return notFoundHint(error.resource);
    case ErrorKind::kConflict:
      return "the sandbox is not in a state that allows this; see 'space inspect ID'";
    case ErrorKind::kResourceExhausted:
      return "a quota or the disk is full; remove sandboxes with 'space rm ID' or ask for less";
    case ErrorKind::kUnsupported:
      // A missing setting is named by the message itself (e.g. snapshot_kek); only node facilities point on.
      if (error.message.find("snapshot_kek") != std::string::npos) return "";
      return "the node does not offer this; 'space node' shows its tiers, accelerator and egress";
    default:
      return "";
  }
}

int fail(const Context* ctx, const Error& error) {
  if (ctx && ctx->json) return printError(error, failureHint(error));
  if (error.kind == ErrorKind::kUnavailable && (error.message.find("cannot connect") != std::string::npos ||
                                                error.message.find("cannot resolve") != std::string::npos)) {
    std::string where = ctx ? ctx->client.endpoint().text : "unix:///run/space/spaced.sock";
    fmt::print(stderr, "space: daemon not reachable at {} ({})\n", where, error.message);
    fmt::print(stderr, "hint: is spaced running? start it with scripts/quickstart, or point SPACE_HOST at it\n");
    return 1;
  }
  fmt::print(stderr, "space: {}\n", error.message);
  if (std::string hint = failureHint(error); !hint.empty()) fmt::print(stderr, "hint: {}\n", hint);
  return 1;
}

Status checkResponse(const http::ClientResponse& resp) {
  if (resp.status >= 200 && resp.status < 300) return ok();
  Error e{http::errorKindFromStatus(resp.status), 0, http::errorMessageFromBody(resp.body)};
  auto j = nlohmann::json::parse(resp.body, nullptr, false);
  if (j.is_object() && j.contains("error") && j["error"].is_object()) e.resource = j["error"].value("resource", "");
  e.reason = errorReasonFromBody(resp.body);
  return tl::unexpected(std::move(e));
}

Result<nlohmann::json> callJson(Context& ctx, const std::string& method, const std::string& target,
                                const std::optional<nlohmann::json>& body) {
  std::optional<std::string> text;
  if (body) text = body->dump();
  ASSIGN_OR_RETURN(auto resp, ctx.client.request(method, target, text));
  TRY(checkResponse(resp));
  if (resp.body.empty()) return nlohmann::json();
  auto j = nlohmann::json::parse(resp.body, nullptr, false);
  if (j.is_discarded()) return makeError(ErrorKind::kInternal, "the daemon answered with invalid JSON");
  return j;
}

Result<uint64_t> parseSizeMiB(std::string_view text) {
  std::string s(text);
  if (s.empty()) return makeError(ErrorKind::kInvalidArgument, "empty size");
  double mult = 1;  // MiB
  char unit = static_cast<char>(std::toupper(static_cast<unsigned char>(s.back())));
  if (s.size() >= 2 && (s.ends_with("i") || s.ends_with("B") || s.ends_with("b"))) {
    s.pop_back();
    unit = static_cast<char>(std::toupper(static_cast<unsigned char>(s.back())));
  }
  if (unit == 'K') mult = 1.0 / 1024;
  if (unit == 'M') mult = 1;
  if (unit == 'G') mult = 1024;
  if (unit == 'T') mult = 1024 * 1024;
  if (std::isalpha(static_cast<unsigned char>(unit))) {
    if (unit != 'K' && unit != 'M' && unit != 'G' && unit != 'T') {
      return makeError(ErrorKind::kInvalidArgument, "size '{}': use a number with M or G, e.g. 512M or 2G", text);
    }
    s.pop_back();
  }
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || !(v > 0) || !std::isfinite(v)) {
    return makeError(ErrorKind::kInvalidArgument, "size '{}': use a number with M or G, e.g. 512M or 2G", text);
  }
  return static_cast<uint64_t>(std::llround(v * mult));
}

Result<std::pair<std::string, std::string>> parseKeyValue(std::string_view what, std::string_view text) {
  size_t eq = text.find('=');
  if (eq == std::string_view::npos || eq == 0)
    return makeError(ErrorKind::kInvalidArgument, "{} '{}' must be KEY=VALUE", what, text);
  return std::make_pair(std::string(text.substr(0, eq)), std::string(text.substr(eq + 1)));
}

int exitCodeOf(const nlohmann::json& e) {
  if (e.value("timed_out", false)) return 124;
  int sig = e.value("signal", 0);
  if (sig > 0) return 128 + sig;
  int code = e.value("exit_code", 1);
  return code < 0 ? 1 : code;
}

std::string formatTable(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width(header.size());
  for (size_t i = 0; i < header.size(); ++i) width[i] = header[i].size();
  for (const auto& r : rows) {
    for (size_t i = 0; i < r.size() && i < width.size(); ++i) width[i] = std::max(width[i], r[i].size());
  }
  std::string out;
  auto line = [&](const std::vector<std::string>& cells) {
    for (size_t i = 0; i < cells.size(); ++i) {
      out += i + 1 == cells.size() ? cells[i] : fmt::format("{:<{}}  ", cells[i], width[i]);
    }
    out += '\n';
  };
  line(header);
  for (const auto& r : rows) line(r);
  return out;
}

void printTable(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows) {
  fmt::print("{}", formatTable(header, rows));
}

}  // namespace space::cli
