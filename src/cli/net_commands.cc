// space net (a sandbox's egress policy and audit log) and space secret (the node's secrets).
#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>

#include "cli/commands.h"
#include "cli/output.h"
#include "http/url.h"

namespace space::cli {
namespace {

using nlohmann::json;

std::string networkPath(const std::string& id) { return "/v1/sandboxes/" + http::percentEncode(id) + "/network"; }

std::string ruleTarget(const json& r) { return r.contains("domain") ? r.value("domain", "") : r.value("cidr", ""); }

std::string rulePorts(const json& r) {
  std::string ports;
  for (const auto& p : r.value("ports", json::array())) ports += (ports.empty() ? "" : ",") + p.dump();
  return ports;
}

// The way a rule is typed back: "10.252.77.0/24:8080", "[2001:db8::]/32:443", "api.example.com".
std::string ruleText(const json& r) {
  std::string target = ruleTarget(r), ports = rulePorts(r);
  if (ports.empty()) return target;
  if (r.contains("cidr") && target.find(':') != std::string::npos) {
    size_t slash = target.find('/');
    return fmt::format("[{}]{}:{}", target.substr(0, slash), slash == std::string::npos ? "" : target.substr(slash),
                       ports);
  }
  return target + ":" + ports;
}

void printNetwork(const Context& ctx, const json& j) {
  if (ctx.json) {
    fmt::print("{}\n", j.dump());
    return;
  }
  fmt::print("mode: {}\n", j.value("mode", ""));
  if (j.contains("tls")) fmt::print("tls: {}\n", j.value("tls", ""));
  if (j.contains("address"))
    fmt::print("address: {} (subnet {}, gateway {})\n", j.value("address", ""), j.value("subnet", ""),
               j.value("gateway", ""));
  else if (j.contains("subnet"))
    fmt::print("subnet: {} (gateway {})\n", j.value("subnet", ""), j.value("gateway", ""));
  for (const auto& r : j.value("rules", json::array())) {
    std::string ports = rulePorts(r);
    fmt::print("{} {}{}\n", r.value("action", ""), ruleTarget(r), ports.empty() ? "" : " ports " + ports);
  }
  for (const auto& s : j.value("secrets", json::array())) fmt::print("secret {}\n", s.get<std::string>());
}

bool isIpAddress(const std::string& text) {
  in6_addr buf{};
  return ::inet_pton(AF_INET, text.c_str(), &buf) == 1 || ::inet_pton(AF_INET6, text.c_str(), &buf) == 1;
}

Result<json> parsePortList(const std::string& flag, const std::string& text, const std::string& ports) {
  json out = json::array();
  size_t start = 0;
  for (;;) {
    size_t comma = ports.find(',', start);
    std::string one = ports.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    char* end = nullptr;
    long p = std::strtol(one.c_str(), &end, 10);
    if (one.empty() || *end || p < 1 || p > 65535)
      return makeError(ErrorKind::kInvalidArgument, "{} {}: a port is 1-65535 (a list is 80,443)", flag, text);
    out.push_back(p);
    if (comma == std::string::npos) return out;
    start = comma + 1;
  }
}

// Splits "TARGET[:PORTS]" where TARGET may be a name, an address, a CIDR or a bracketed IPv6 address
// with an optional prefix. An unbracketed IPv6 address takes no port: its last group would be ambiguous.
Result<std::pair<std::string, std::optional<std::string>>> splitTargetAndPorts(const std::string& flag,
                                                                               const std::string& text) {
  if (text.front() == '[') {
    size_t close = text.find(']');
    if (close == std::string::npos)
      return makeError(ErrorKind::kInvalidArgument, "{} {}: a bracketed IPv6 address needs its ']'", flag, text);
    std::string target = text.substr(1, close - 1), rest = text.substr(close + 1);
    if (rest.starts_with('/')) {
      size_t colon = rest.find(':');
      target += rest.substr(0, colon);
      rest = colon == std::string::npos ? "" : rest.substr(colon);
    }
    if (rest.empty()) return std::make_pair(target, std::optional<std::string>());
    if (rest.front() != ':')
      return makeError(ErrorKind::kInvalidArgument, "{} {}: after ']' comes /PREFIX or :PORT", flag, text);
    return std::make_pair(target, std::optional<std::string>(rest.substr(1)));
  }
  size_t colon = text.rfind(':');
  if (colon == std::string::npos) return std::make_pair(text, std::optional<std::string>());
  size_t slash = text.find('/');
  bool port_follows = slash != std::string::npos ? colon > slash : text.find(':') == colon;
  if (!port_follows) return std::make_pair(text, std::optional<std::string>());
  return std::make_pair(text.substr(0, colon), std::optional<std::string>(text.substr(colon + 1)));
}

}  // namespace

Result<json> ruleFromText(const std::string& action, const std::string& text) {
  std::string flag = "--" + action;
  if (text.empty()) return makeError(ErrorKind::kInvalidArgument, "{} needs a domain, an address or a CIDR", flag);
  ASSIGN_OR_RETURN(auto split, splitTargetAndPorts(flag, text));
  auto [target, ports] = split;
  if (target.empty()) return makeError(ErrorKind::kInvalidArgument, "{} {}: nothing before the port", flag, text);
  json r = {{"action", action}};
  if (target.find('/') != std::string::npos)
    r["cidr"] = target;
  else if (isIpAddress(target))
    r["cidr"] = target + (target.find(':') != std::string::npos ? "/128" : "/32");
  else
    r["domain"] = target;
  if (ports) {
    ASSIGN_OR_RETURN(r["ports"], parsePortList(flag, text, *ports));
  }
  return r;
}

namespace {

std::string canonicalTarget(const json& r) {
  std::string t = ruleTarget(r);
  std::transform(t.begin(), t.end(), t.begin(), [](unsigned char c) { return std::tolower(c); });
  if (t.ends_with('.')) t.pop_back();
  return t;
}

// A --remove without a port removes the target's rules whatever their ports.
bool removes(const json& wanted, const json& rule) {
  if (wanted.contains("domain") != rule.contains("domain") || canonicalTarget(wanted) != canonicalTarget(rule))
    return false;
  return !wanted.contains("ports") || rulePorts(wanted) == rulePorts(rule);
}

}  // namespace

Result<json> networkPolicy(const NetOptions& o, const json& base) {
  json policy = {{"mode", base.value("mode", "deny-all")}, {"rules", base.value("rules", json::array())}};
  if (o.reset) policy = {{"mode", "deny-all"}, {"rules", json::array()}};
  if (base.contains("tls")) policy["tls"] = base["tls"];
  if (!o.tls.empty()) policy["tls"] = o.tls;
  for (const auto& text : o.remove) {
    ASSIGN_OR_RETURN(auto wanted, ruleFromText("remove", text));
    json kept = json::array();
    for (const auto& r : policy["rules"])
      if (!removes(wanted, r)) kept.push_back(r);
    if (kept.size() == policy["rules"].size()) {
      std::string have;
      for (const auto& r : policy["rules"]) have += (have.empty() ? "" : ", ") + ruleText(r);
      return makeError(ErrorKind::kInvalidArgument, "--remove {}: no rule matches (the rules are: {})", text,
                       have.empty() ? "none" : have);
    }
    policy["rules"] = kept;
  }
  for (const auto& [action, list] : {std::pair{"allow", &o.allow}, std::pair{"deny", &o.deny}}) {
    for (const auto& text : *list) {
      ASSIGN_OR_RETURN(auto r, ruleFromText(action, text));
      policy["rules"].push_back(r);
    }
  }
  if (!o.mode.empty()) policy["mode"] = o.mode;
  // Allowing something implies the allow-list mode unless a mode was named.
  if (o.mode.empty() && !o.allow.empty() && policy["mode"] == "deny-all") policy["mode"] = "allow-list";
  return policy;
}

void printWarnings(const nlohmann::json& answer) {
  for (const auto& w : answer.value("warnings", nlohmann::json::array()))
    if (w.is_string()) fmt::print(stderr, "warning: {}\n", w.get<std::string>());
}

std::string modeChangeNote(const std::string& from, const json& policy) {
  std::string to = policy.value("mode", "");
  if (to == from) return "";
  size_t allows = 0, denies = 0;
  for (const auto& r : policy.value("rules", json::array())) (r.value("action", "") == "allow" ? allows : denies)++;
  size_t rules = allows + denies;
  if (to == "deny-all")
    return rules == 0 ? "mode deny-all: nothing leaves the sandbox"
                      : fmt::format(
                            "mode deny-all: nothing leaves the sandbox; its {} rules are kept and apply again "
                            "under allow-list or allow-all-public ('--reset' drops them)",
                            rules);
  if (to == "allow-list")
    return allows == 0 ? "mode allow-list: no allow rule yet, so nothing is reachable until one is added with --allow"
                       : fmt::format(
                             "mode allow-list: only what the {} allow rules name is reachable; deny rules "
                             "win over them",
                             allows);
  return fmt::format(
      "mode allow-all-public: every public destination is reachable; the {} deny rules still block "
      "theirs, CIDR allow rules still open the private ranges they name, domain allow rules add "
      "nothing",
      denies);
}

int cmdNet(Context& ctx, const std::string& id, const NetOptions& o) {
  auto current = callJson(ctx, "GET", networkPath(id));
  if (!current) return fail(&ctx, current.error());
  if (!o.changes()) {
    printNetwork(ctx, *current);
    return 0;
  }
  auto policy = networkPolicy(o, *current);
  if (!policy) return fail(&ctx, policy.error());
  auto j = callJson(ctx, "PUT", networkPath(id), *policy);
  if (!j) return fail(&ctx, j.error());
  printWarnings(*j);
  if (std::string note = modeChangeNote(current->value("mode", ""), *j); !note.empty())
    fmt::print(stderr, "{}\n", note);
  printNetwork(ctx, *j);
  return 0;
}

std::vector<std::string> auditRow(const json& line) {
  // "2024-05-01T12:00:00.123Z" -> "12:00:00": the day is rarely in doubt in a sandbox's log.
  std::string time = line.value("time", "");
  if (size_t t = time.find('T'); t != std::string::npos) time = time.substr(t + 1, 8);
  std::string dest = line.value("name", line.value("sni", ""));
  if (std::string used = line.value("used", ""); !used.empty()) dest += dest.empty() ? used : " (" + used + ")";
  if (line.contains("repeated")) dest += fmt::format(" x{}", line.value("repeated", 0));
  return {time, line.value("kind", ""), line.value("verdict", ""),
          dest, line.value("rule", ""), line.value("reason", "")};
}

int cmdNetLog(Context& ctx, const std::string& id, bool follow) {
  const std::vector<std::string> header = {"TIME", "KIND", "VERDICT", "DESTINATION", "RULE", "REASON"};
  std::vector<std::vector<std::string>> rows;
  auto print = [&](const std::string& line) {
    if (ctx.json) {
      fmt::print("{}\n", line);
      return;
    }
    auto j = json::parse(line, nullptr, false);
    if (!j.is_object()) return;
    // Followed lines cannot wait for the widest cell: each is printed as it comes, tab-separated.
    if (follow)
      fmt::print("{}\n", fmt::join(auditRow(j), "\t"));
    else
      rows.push_back(auditRow(j));
  };
  if (follow && !ctx.json) fmt::print("{}\n", fmt::join(header, "\t"));
  std::string pending;
  auto resp = ctx.client.stream("GET", networkPath(id) + "/log" + (follow ? "?follow=1" : ""), std::nullopt,
                                [&](std::string_view d) -> Status {
                                  pending.append(d);
                                  size_t nl;
                                  while ((nl = pending.find('\n')) != std::string::npos) {
                                    std::string line = pending.substr(0, nl);
                                    pending.erase(0, nl + 1);
                                    if (!line.empty()) print(line);
                                  }
                                  fflush(stdout);
                                  return ok();
                                });
  if (!resp) return fail(&ctx, resp.error());
  if (auto st = checkResponse(*resp); !st) return fail(&ctx, st.error());
  if (!follow && !ctx.json) printTable(header, rows);
  return 0;
}

int cmdSecretSet(Context& ctx, const SecretOptions& o) {
  std::string value;
  if (o.value_file == "-") {
    std::stringstream ss;
    ss << std::cin.rdbuf();
    value = ss.str();
  } else {
    std::ifstream in(o.value_file, std::ios::binary);
    if (!in)
      return fail(&ctx, Error{ErrorKind::kNotFound, 0, fmt::format("cannot read --value-file {}", o.value_file)});
    std::stringstream ss;
    ss << in.rdbuf();
    value = ss.str();
  }
  // A trailing newline from `echo KEY > file` is never part of a credential.
  while (!value.empty() && (value.back() == '\n' || value.back() == '\r')) value.pop_back();
  nlohmann::json body = {{"name", o.name}, {"value", value}, {"hosts", o.hosts}};
  if (!o.header.empty()) body["header"] = o.header;
  if (!o.format.empty()) body["format"] = o.format;
  if (!o.methods.empty()) body["methods"] = o.methods;
  if (!o.path_prefixes.empty()) body["path_prefixes"] = o.path_prefixes;
  auto j = callJson(ctx, "POST", "/v1/secrets", body);
  if (!j) return fail(&ctx, j.error());
  if (ctx.json)
    fmt::print("{}\n", j->dump());
  else
    fmt::print("{}\n", j->value("name", ""));
  return 0;
}

int cmdSecretLs(Context& ctx) {
  auto j = callJson(ctx, "GET", "/v1/secrets");
  if (!j) return fail(&ctx, j.error());
  if (ctx.json) {
    fmt::print("{}\n", j->dump());
    return 0;
  }
  std::vector<std::vector<std::string>> rows;
  for (const auto& s : j->value("secrets", nlohmann::json::array())) {
    std::string hosts;
    for (const auto& h : s.value("hosts", nlohmann::json::array()))
      hosts += (hosts.empty() ? "" : ",") + h.get<std::string>();
    std::string only;
    for (const auto& m : s.value("methods", nlohmann::json::array()))
      only += (only.empty() ? "" : ",") + m.get<std::string>();
    for (const auto& p : s.value("path_prefixes", nlohmann::json::array()))
      only += (only.empty() ? "" : ",") + p.get<std::string>() + "*";
    rows.push_back(
        {s.value("name", ""), hosts, s.value("header", ""), s.value("format", ""), only.empty() ? "-" : only});
  }
  printTable({"NAME", "HOSTS", "HEADER", "FORMAT", "ONLY"}, rows);
  return 0;
}

int cmdSecretRm(Context& ctx, const std::vector<std::string>& names) {
  int rc = 0;
  for (const auto& n : names) {
    auto j = callJson(ctx, "DELETE", "/v1/secrets/" + http::percentEncode(n));
    if (!j)
      rc = fail(&ctx, j.error());
    else
      printResult(ctx, {{"name", n}, {"removed", true}}, "");
  }
  return rc;
}

}  // namespace space::cli
