// space net (a sandbox's egress policy and audit log) and space secret (the node's secrets).
#include <fcntl.h>
#include <unistd.h>

#include <fstream>
#include <iostream>
#include <sstream>

#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/output.h"
#include "http/url.h"

namespace space::cli {
namespace {

std::string networkPath(const std::string& id) { return "/v1/sandboxes/" + http::percentEncode(id) + "/network"; }

void printNetwork(const Context& ctx, const nlohmann::json& j) {
  if (ctx.json) {
    fmt::print("{}\n", j.dump());
    return;
  }
  fmt::print("mode: {}\n", j.value("mode", ""));
  if (j.contains("subnet")) fmt::print("subnet: {} (gateway {})\n", j.value("subnet", ""), j.value("gateway", ""));
  for (const auto& r : j.value("rules", nlohmann::json::array())) {
    std::string what = r.contains("domain") ? r.value("domain", "") : r.value("cidr", "");
    std::string ports;
    for (const auto& p : r.value("ports", nlohmann::json::array())) ports += (ports.empty() ? " ports " : ",") + p.dump();
    fmt::print("{} {}{}\n", r.value("action", ""), what, ports);
  }
  for (const auto& s : j.value("secrets", nlohmann::json::array())) fmt::print("secret {}\n", s.get<std::string>());
}

}  // namespace

Result<nlohmann::json> networkPolicy(const std::string& mode, const std::vector<std::string>& allow,
                                     const std::vector<std::string>& deny, const nlohmann::json& base) {
  nlohmann::json policy = {{"mode", base.value("mode", "deny-all")}, {"rules", base.value("rules", nlohmann::json::array())}};
  if (!mode.empty()) policy["mode"] = mode;
  // A name or a CIDR, with an optional ":PORT" for names ("api.example.com:443").
  auto rule = [](const std::string& action, const std::string& target) -> Result<nlohmann::json> {
    if (target.empty()) return makeError(ErrorKind::kInvalidArgument, "--{} needs a domain or CIDR", action);
    nlohmann::json r = {{"action", action}};
    std::string host = target;
    if (auto colon = target.rfind(':'); colon != std::string::npos && target.find('/') == std::string::npos) {
      std::string port = target.substr(colon + 1);
      char* end = nullptr;
      long p = std::strtol(port.c_str(), &end, 10);
      if (port.empty() || *end || p < 1 || p > 65535)
        return makeError(ErrorKind::kInvalidArgument, "--{} {}: the port must be 1-65535", action, target);
      r["ports"] = {p};
      host = target.substr(0, colon);
    }
    if (host.find('/') != std::string::npos)
      r["cidr"] = host;
    else
      r["domain"] = host;
    return r;
  };
  for (const auto& a : allow) {
    ASSIGN_OR_RETURN(auto r, rule("allow", a));
    policy["rules"].push_back(r);
  }
  for (const auto& d : deny) {
    ASSIGN_OR_RETURN(auto r, rule("deny", d));
    policy["rules"].push_back(r);
  }
  // Allowing names implies the allow-list mode unless a mode was named.
  if (mode.empty() && !allow.empty() && policy["mode"] == "deny-all") policy["mode"] = "allow-list";
  return policy;
}

int cmdNet(Context& ctx, const std::string& id, const std::string& mode, const std::vector<std::string>& allow,
           const std::vector<std::string>& deny) {
  auto current = callJson(ctx, "GET", networkPath(id));
  if (!current) return fail(&ctx, current.error());
  if (mode.empty() && allow.empty() && deny.empty()) {
    printNetwork(ctx, *current);
    return 0;
  }
  auto policy = networkPolicy(mode, allow, deny, *current);
  if (!policy) return fail(&ctx, policy.error());
  auto j = callJson(ctx, "PUT", networkPath(id), *policy);
  if (!j) return fail(&ctx, j.error());
  printNetwork(ctx, *j);
  return 0;
}

int cmdNetLog(Context& ctx, const std::string& id, bool follow) {
  std::string pending;
  auto resp = ctx.client.stream("GET", networkPath(id) + "/log" + (follow ? "?follow=1" : ""), std::nullopt,
                                [&](std::string_view d) -> Status {
                                  pending.append(d);
                                  size_t nl;
                                  while ((nl = pending.find('\n')) != std::string::npos) {
                                    std::string line = pending.substr(0, nl);
                                    pending.erase(0, nl + 1);
                                    if (!line.empty()) fmt::print("{}\n", line);
                                  }
                                  fflush(stdout);
                                  return ok();
                                });
  if (!resp) return fail(&ctx, resp.error());
  if (auto st = checkResponse(*resp); !st) return fail(&ctx, st.error());
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
    if (!in) return fail(&ctx, Error{ErrorKind::kNotFound, 0, fmt::format("cannot read --value-file {}", o.value_file)});
    std::stringstream ss;
    ss << in.rdbuf();
    value = ss.str();
  }
  // A trailing newline from `echo KEY > file` is never part of a credential.
  while (!value.empty() && (value.back() == '\n' || value.back() == '\r')) value.pop_back();
  nlohmann::json body = {{"name", o.name}, {"value", value}, {"hosts", o.hosts}};
  if (!o.header.empty()) body["header"] = o.header;
  if (!o.format.empty()) body["format"] = o.format;
  auto j = callJson(ctx, "POST", "/v1/secrets", body);
  if (!j) return fail(&ctx, j.error());
  if (ctx.json) fmt::print("{}\n", j->dump());
  else fmt::print("{}\n", j->value("name", ""));
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
    for (const auto& h : s.value("hosts", nlohmann::json::array())) hosts += (hosts.empty() ? "" : ",") + h.get<std::string>();
    rows.push_back({s.value("name", ""), hosts, s.value("header", ""), s.value("format", "")});
  }
  printTable({"NAME", "HOSTS", "HEADER", "FORMAT"}, rows);
  return 0;
}

int cmdSecretRm(Context& ctx, const std::vector<std::string>& names) {
  int rc = 0;
  for (const auto& n : names) {
    auto j = callJson(ctx, "DELETE", "/v1/secrets/" + http::percentEncode(n));
    if (!j) rc = fail(&ctx, j.error());
    else printResult(ctx, {{"name", n}, {"removed", true}}, "");
  }
  return rc;
}

}  // namespace space::cli
