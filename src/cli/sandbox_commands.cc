// create, ls, inspect, rm, keys and templates: request/response commands.
#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/durations.h"
#include "cli/output.h"
#include "http/url.h"

namespace space::cli {

// The API's bound on ttl_s and idle_pause_s (a daemon's max_ttl_s may cap the TTL further).
constexpr std::chrono::seconds kLongestLife{365ll * 24 * 3600};

Result<nlohmann::json> createBody(const CreateOptions& o) {
  nlohmann::json body = nlohmann::json::object();
  if (!o.template_name.empty()) body["template"] = o.template_name;
  if (!o.isolation.empty()) body["isolation"] = o.isolation;
  if (!o.cpus.empty()) {
    char* end = nullptr;
    double cpus = std::strtod(o.cpus.c_str(), &end);
    if (end != o.cpus.c_str() + o.cpus.size() || !(cpus > 0))
      return makeError(ErrorKind::kInvalidArgument, "--cpus '{}' must be a number such as 0.5 or 2", o.cpus);
    body["cpus"] = cpus;
  }
  if (!o.memory.empty()) {
    auto mib = parseSizeMiB(o.memory);
    if (!mib) return tl::unexpected(mib.error().context("--memory"));
    body["memory_mib"] = *mib;
  }
  if (!o.disk.empty()) {
    auto mib = parseSizeMiB(o.disk);
    if (!mib) return tl::unexpected(mib.error().context("--disk"));
    body["disk_mib"] = *mib;
  }
  if (!o.pids.empty()) {
    char* end = nullptr;
    long pids = std::strtol(o.pids.c_str(), &end, 10);
    if (end != o.pids.c_str() + o.pids.size() || pids <= 0)
      return makeError(ErrorKind::kInvalidArgument, "--pids '{}' must be a whole number", o.pids);
    body["pids"] = pids;
  }
  if (!o.history_every.empty()) {
    ASSIGN_OR_RETURN(auto every, wholeSeconds("--history-every", o.history_every, kLongestLife));
    body["history"] = {{"every_s", every}};
  }
  if (o.history_after_exec) body["history"]["after_exec"] = true;
  if (!o.idle_pause.empty()) {
    ASSIGN_OR_RETURN(body["idle_pause_s"], wholeSeconds("--idle-pause", o.idle_pause, kLongestLife));
  }
  if (!o.ttl.empty()) {
    ASSIGN_OR_RETURN(body["ttl_s"], wholeSeconds("--ttl", o.ttl, kLongestLife));
  }
  for (const auto& e : o.env) {
    ASSIGN_OR_RETURN(auto kv, parseKeyValue("--env", e));
    body["env"][kv.first] = kv.second;
  }
  for (const auto& l : o.labels) {
    ASSIGN_OR_RETURN(auto kv, parseKeyValue("--label", l));
    body["labels"][kv.first] = kv.second;
  }
  if (!o.net_mode.empty() || !o.net_allow.empty() || !o.net_deny.empty() || !o.net_tls.empty()) {
    NetOptions net{.mode = o.net_mode, .tls = o.net_tls, .allow = o.net_allow, .deny = o.net_deny};
    ASSIGN_OR_RETURN(body["network"], networkPolicy(net, nlohmann::json::object()));
  }
  for (const auto& s : o.secrets) body["secrets"].push_back(s);
  return body;
}

Result<nlohmann::json> createSandbox(Context& ctx, const nlohmann::json& body) {
  // ?progress=1: when the create takes long (a template's first VM warms it) the daemon says so as an
  // NDJSON progress line, printed here on stderr, before the sandbox; otherwise it answers plain JSON.
  std::string answer;
  auto resp = ctx.client.stream("POST", "/v1/sandboxes?progress=1", body.dump(), [&](std::string_view d) -> Status {
    size_t start = answer.size();
    answer.append(d);
    for (size_t nl; (nl = answer.find('\n', start)) != std::string::npos; start = nl + 1) {
      auto line = nlohmann::json::parse(answer.substr(start, nl - start), nullptr, false);
      if (line.is_object() && line.value("type", "") == "progress") fmt::print(stderr, "{}\n", line.value("line", ""));
    }
    return ok();
  });
  if (!resp) return tl::unexpected(resp.error());
  TRY(checkResponse(*resp));
  if (!resp->headers["content-type"].starts_with("application/x-ndjson")) {
    auto j = nlohmann::json::parse(answer, nullptr, false);
    if (j.is_discarded()) return makeError(ErrorKind::kInternal, "the daemon answered with invalid JSON");
    return j;
  }
  std::optional<nlohmann::json> last;
  for (size_t start = 0, nl; (nl = answer.find('\n', start)) != std::string::npos; start = nl + 1) {
    auto line = nlohmann::json::parse(answer.substr(start, nl - start), nullptr, false);
    if (line.is_object() && line.value("type", "") != "progress") last = line;
  }
  if (!last) return makeError(ErrorKind::kUnavailable, "the create stream ended without a result");
  if (last->value("type", "") == "error") {
    auto err = last->value("error", nlohmann::json::object());
    return makeError(ErrorKind::kInternal, "{}", err.value("message", "create failed"));
  }
  return last->value("sandbox", nlohmann::json::object());
}

int cmdCreate(Context& ctx, const CreateOptions& o) {
  auto body = createBody(o);
  if (!body) return fail(&ctx, body.error());
  auto j = createSandbox(ctx, *body);
  if (!j) return fail(&ctx, j.error());
  printWarnings(*j);
  if (ctx.json) {
    fmt::print("{}\n", j->dump());
  } else {
    fmt::print("{}\n", j->value("id", ""));
  }
  return 0;
}

namespace {

std::string str(const nlohmann::json& j, const char* key) {
  if (!j.contains(key) || j[key].is_null()) return "-";
  return j[key].is_string() ? j[key].get<std::string>() : j[key].dump();
}

std::string labelsText(const nlohmann::json& j) {
  std::string out;
  if (j.contains("labels") && j["labels"].is_object()) {
    for (const auto& [k, v] : j["labels"].items())
      out += (out.empty() ? "" : ",") + k + "=" + (v.is_string() ? v.get<std::string>() : v.dump());
  }
  return out.empty() ? "-" : out;
}

}  // namespace

int cmdLs(Context& ctx, const std::vector<std::string>& labels, const std::string& state) {
  std::string target = "/v1/sandboxes";
  char sep = '?';
  for (const auto& l : labels) {
    target += fmt::format("{}label={}", sep, http::percentEncode(l));
    sep = '&';
  }
  if (!state.empty()) target += fmt::format("{}state={}", sep, http::percentEncode(state));
  auto j = callJson(ctx, "GET", target);
  if (!j) return fail(&ctx, j.error());
  const auto& list = (*j)["sandboxes"];
  if (ctx.json) {
    printJson(*j);  // {"sandboxes":[...]}: every list is the daemon's object, so it can grow fields
    return 0;
  }
  std::vector<std::vector<std::string>> rows;
  for (const auto& s : list) {
    rows.push_back(
        {str(s, "id"), str(s, "template"), str(s, "state"), str(s, "isolation"), str(s, "created_at"), labelsText(s)});
  }
  printTable({"ID", "TEMPLATE", "STATE", "ISOLATION", "CREATED", "LABELS"}, rows);
  return 0;
}

int cmdInspect(Context& ctx, const std::string& id) {
  auto j = callJson(ctx, "GET", "/v1/sandboxes/" + http::percentEncode(id));
  if (!j) return fail(&ctx, j.error());
  fmt::print("{}\n", ctx.json ? j->dump() : j->dump(2));
  return 0;
}

int cmdRm(Context& ctx, const std::vector<std::string>& ids) {
  int rc = 0;
  for (const auto& id : ids) {
    auto j = callJson(ctx, "DELETE", "/v1/sandboxes/" + http::percentEncode(id));
    if (!j) {
      rc = fail(&ctx, j.error().context(id));
      continue;
    }
    printResult(ctx, {{"id", id}, {"deleted", true}}, id);
  }
  return rc;
}

int cmdKeyCreate(Context& ctx, const std::string& name) {
  auto j = callJson(ctx, "POST", "/v1/keys", nlohmann::json{{"name", name}});
  if (!j) return fail(&ctx, j.error());
  if (ctx.json) {
    fmt::print("{}\n", j->dump());
  } else {
    fmt::print("{}\n", j->value("secret", ""));
    fmt::print(stderr, "key {} ({}): the secret above is shown only once; use it as SPACE_API_KEY\n",
               j->value("id", ""), name);
  }
  return 0;
}

int cmdKeyLs(Context& ctx) {
  auto j = callJson(ctx, "GET", "/v1/keys");
  if (!j) return fail(&ctx, j.error());
  if (ctx.json) {
    printJson(*j);  // {"keys":[...]}
    return 0;
  }
  std::vector<std::vector<std::string>> rows;
  for (const auto& k : (*j)["keys"]) {
    rows.push_back({str(k, "id"), str(k, "name"), str(k, "prefix"), k.value("revoked_ms", 0) ? "revoked" : "active"});
  }
  printTable({"ID", "NAME", "PREFIX", "STATUS"}, rows);
  return 0;
}

int cmdKeyRevoke(Context& ctx, const std::string& id) {
  auto j = callJson(ctx, "DELETE", "/v1/keys/" + http::percentEncode(id));
  if (!j) return fail(&ctx, j.error());
  return 0;
}

int cmdKeyPurge(Context& ctx, const std::string& older_than) {
  nlohmann::json body = nlohmann::json::object();
  if (!older_than.empty()) {
    auto s = wholeSeconds("--older-than", older_than, std::chrono::seconds(100ll * 365 * 24 * 3600));
    if (!s) return fail(&ctx, s.error());
    body["older_than_s"] = *s;
  }
  auto j = callJson(ctx, "POST", "/v1/keys/purge", body);
  if (!j) return fail(&ctx, j.error());
  printResult(ctx, *j, fmt::format("{} revoked key(s) purged", j->value("purged", 0)));
  return 0;
}

int cmdKeyRotate(Context& ctx) {
  auto j = callJson(ctx, "POST", "/v1/keys/rotate", nlohmann::json::object());
  if (!j) return fail(&ctx, j.error());
  if (ctx.json)
    fmt::print("{}\n", j->dump());
  else
    fmt::print("{} data key(s) rewrapped\n", j->value("rewrapped", 0));
  return 0;
}

int cmdTemplateLs(Context& ctx) {
  auto j = callJson(ctx, "GET", "/v1/templates");
  if (!j) return fail(&ctx, j.error());
  if (ctx.json) {
    printJson(*j);  // {"templates":[...]}
    return 0;
  }
  std::vector<std::vector<std::string>> rows;
  for (const auto& t : (*j)["templates"]) {
    uint64_t size = t.value("size_bytes", uint64_t{0});
    rows.push_back({str(t, "name"), str(t, "id").substr(0, 19), fmt::format("{} MiB", size >> 20),
                    t.contains("source") ? t["source"].value("kind", "-") : "-"});
  }
  printTable({"NAME", "ID", "SIZE", "SOURCE"}, rows);
  return 0;
}

int cmdTemplateRm(Context& ctx, const std::string& name) {
  auto j = callJson(ctx, "DELETE", "/v1/templates/" + http::percentEncode(name));
  if (!j) return fail(&ctx, j.error());
  return 0;
}

int cmdTemplateWarm(Context& ctx, const std::string& name) {
  auto j = callJson(ctx, "POST", "/v1/templates/" + http::percentEncode(name) + "/warm", nlohmann::json::object());
  if (!j) return fail(&ctx, j.error());
  if (ctx.json) {
    fmt::print("{}\n", j->dump());
  } else {
    fmt::print("{}: vm snapshot of {} MiB, {} vCPU, in {} ({} ms)\n", name, j->value("memory_mib", 0),
               j->value("vcpus", 0), j->value("dir", ""), j->value("elapsed_ms", 0));
  }
  return 0;
}

// "1h2m", "5m30s", "45s": what is left of a TTL, to the second.
static std::string spokenDuration(int64_t s) {
  std::string out;
  if (s >= 86400) out += fmt::format("{}d", s / 86400), s %= 86400;
  if (s >= 3600) out += fmt::format("{}h", s / 3600), s %= 3600;
  if (s >= 60) out += fmt::format("{}m", s / 60), s %= 60;
  if (s || out.empty()) out += fmt::format("{}s", s);
  return out;
}

static std::string ttlLine(const nlohmann::json& view) {
  std::string id = view.value("id", "");
  if (!view.contains("ttl_remaining_s")) return id + ": no TTL";
  auto left = spokenDuration(view["ttl_remaining_s"].get<int64_t>());
  if (view.value("state", "") == "paused")
    return fmt::format("{}: {} left, counting from its resume (paused)", id, left);
  return fmt::format("{}: {} left, deleted at {}", id, left,
                     view["expires_at"].is_string() ? view["expires_at"].get<std::string>() : "?");
}

int cmdTtl(Context& ctx, const std::string& id, const std::string& value) {
  Result<nlohmann::json> view;
  if (value.empty()) {
    view = callJson(ctx, "GET", "/v1/sandboxes/" + http::percentEncode(id));
  } else {
    nlohmann::json body;
    if (value == "none" || value == "0") {
      body["ttl_s"] = 0;
    } else if (value[0] == '+') {
      auto s = wholeSeconds("DURATION", std::string_view(value).substr(1), kLongestLife);
      if (!s) return fail(&ctx, s.error());
      body["add_s"] = *s;
    } else {
      auto s = wholeSeconds("DURATION", value, kLongestLife);
      if (!s) return fail(&ctx, s.error());
      body["ttl_s"] = *s;
    }
    view = callJson(ctx, "POST", "/v1/sandboxes/" + http::percentEncode(id) + "/ttl", body);
  }
  if (!view) return fail(&ctx, view.error().context(id));
  printResult(ctx, *view, ttlLine(*view));
  return 0;
}

// pause and resume: each id on a line when done.
int cmdPauseResume(Context& ctx, const std::vector<std::string>& ids, bool pause) {
  int rc = 0;
  for (const auto& id : ids) {
    auto j = callJson(ctx, "POST", "/v1/sandboxes/" + http::percentEncode(id) + (pause ? "/pause" : "/resume"),
                      nlohmann::json::object());
    if (!j) {
      rc = fail(&ctx, j.error().context(id));
      continue;
    }
    printResult(ctx, *j, id);  // the sandbox as it is now
  }
  return rc;
}

}  // namespace space::cli
