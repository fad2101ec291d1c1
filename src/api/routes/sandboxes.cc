// Sandbox lifecycle: create, list, inspect, delete, pause, resume, snapshots, rollback, fork.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>

#include "api/errors.h"
#include "api/json_input.h"
#include "api/ndjson.h"
#include "api/routes/routes.h"
#include "api/validate.h"
#include "common/defer.h"
#include "common/ids.h"
#include "common/unique_fd.h"
#include "core/retention.h"

namespace space::api {
namespace {

constexpr uint64_t kMiB = 1ull << 20;
constexpr int64_t kMinMemoryMiB = 16, kMinDiskMiB = 16, kMaxDiskMiB = 16ll << 20;  // 16 TiB
constexpr int64_t kMinPids = 8, kMaxPids = 4194304;                                // the kernel's pid_max
constexpr double kMaxCpus = 64;

Status checkEnv(const std::map<std::string, std::string>& env) {
  for (const auto& [k, v] : env) {
    bool valid = !k.empty() && k.size() <= 256 && !(k[0] >= '0' && k[0] <= '9');
    for (char c : k)
      valid = valid && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_');
    if (!valid)
      return makeError(ErrorKind::kInvalidArgument, "env name '{}' must match [A-Za-z_][A-Za-z0-9_]*", k.substr(0, 64));
    if (v.size() > 32768) return makeError(ErrorKind::kInvalidArgument, "env value of '{}' is longer than 32 KiB", k);
  }
  return ok();
}

Status checkLabels(const std::map<std::string, std::string>& labels) {
  for (const auto& [k, v] : labels) {
    bool valid = !k.empty() && k.size() <= 63;
    for (char c : k) {
      valid = valid && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
                        c == '_' || c == '.' || c == '/');
    }
    if (!valid)
      return makeError(ErrorKind::kInvalidArgument, "label key '{}' must be 1-63 of [A-Za-z0-9._/-]", k.substr(0, 64));
    if (v.size() > 255 || v.find('=') != std::string::npos) {
      return makeError(ErrorKind::kInvalidArgument, "label value of '{}' must be at most 255 bytes without '='", k);
    }
  }
  return ok();
}

}  // namespace

// A whole number of seconds the API bounds by a year (a daemon's own limits, max_ttl_s, cap it further);
// `meaning_of_zero` says what 0 asks for, in the error ("daemon default", "never").
static Result<std::optional<int64_t>> yearBoundedSeconds(const JsonInput& in, const std::string& key,
                                                         std::string_view meaning_of_zero, bool negative = false) {
  constexpr int64_t kYear = 365ll * 24 * 3600;
  ASSIGN_OR_RETURN(auto v, in.integer(key));
  if (v && (*v < (negative ? -kYear : 0) || *v > kYear)) {
    if (negative) return makeError(ErrorKind::kInvalidArgument, "{} must be from -{} to {}", key, kYear, kYear);
    return makeError(ErrorKind::kInvalidArgument, "{} must be from 0 ({}) to {}", key, meaning_of_zero, kYear);
  }
  return v;
}

Result<core::CreateSandbox> parseCreateSandbox(std::string_view body, uint64_t host_memory_bytes) {
  ASSIGN_OR_RETURN(auto in, JsonInput::parse(body, {"template", "isolation", "cpus", "memory_mib", "pids", "disk_mib",
                                                    "env", "labels", "ttl_s", "cold_boot", "network", "secrets",
                                                    "idle_pause_s", "history"}));
  core::CreateSandbox cmd;
  ASSIGN_OR_RETURN(auto tmpl, in.string("template", 64));
  if (tmpl) {
    TRY(checkName("template", *tmpl));
    cmd.template_name = *tmpl;
  }
  ASSIGN_OR_RETURN(auto isolation, in.string("isolation", 16));
  if (isolation) {
    if (*isolation != "auto" && *isolation != "jail" && *isolation != "vm") {
      return makeError(ErrorKind::kInvalidArgument, "isolation must be auto, jail or vm");
    }
    cmd.isolation = *isolation;
  }
  ASSIGN_OR_RETURN(auto cold_boot, in.boolean("cold_boot"));
  if (cold_boot) cmd.cold_boot = *cold_boot;
  ASSIGN_OR_RETURN(auto cpus, in.number("cpus"));
  if (cpus) {
    if (!(*cpus > 0) || *cpus > kMaxCpus)
      return makeError(ErrorKind::kInvalidArgument, "cpus must be more than 0 and at most {} (e.g. 0.5)", kMaxCpus);
    long millis = std::lround(*cpus * 1000);
    cmd.cpu_millis = static_cast<uint32_t>(millis < 1 ? 1 : millis);
  }
  ASSIGN_OR_RETURN(auto memory, in.integer("memory_mib"));
  if (memory) {
    int64_t host_mib = static_cast<int64_t>(host_memory_bytes / kMiB);
    if (*memory < kMinMemoryMiB || *memory > host_mib) {
      return makeError(ErrorKind::kInvalidArgument, "memory_mib must be from {} to {} (this host's RAM)", kMinMemoryMiB,
                       host_mib);
    }
    cmd.memory_bytes = static_cast<uint64_t>(*memory) * kMiB;
  }
  ASSIGN_OR_RETURN(auto pids, in.integer("pids"));
  if (pids) {
    if (*pids < kMinPids || *pids > kMaxPids)
      return makeError(ErrorKind::kInvalidArgument, "pids must be from {} to {}", kMinPids, kMaxPids);
    cmd.pids = static_cast<uint32_t>(*pids);
  }
  ASSIGN_OR_RETURN(auto disk, in.integer("disk_mib"));
  if (disk) {
    if (*disk < kMinDiskMiB || *disk > kMaxDiskMiB)
      return makeError(ErrorKind::kInvalidArgument, "disk_mib must be from {} to {}", kMinDiskMiB, kMaxDiskMiB);
    cmd.disk_bytes = static_cast<uint64_t>(*disk) * kMiB;
  }
  ASSIGN_OR_RETURN(cmd.env, in.stringMap("env", 256));
  TRY(checkEnv(cmd.env));
  ASSIGN_OR_RETURN(cmd.labels, in.stringMap("labels", 64));
  TRY(checkLabels(cmd.labels));
  if (in.has("network")) {
    ASSIGN_OR_RETURN(auto policy, parseNetworkPolicy(in.raw()["network"]));
    cmd.network = policy;
  }
  ASSIGN_OR_RETURN(auto secrets, in.stringArray("secrets", 32));
  if (secrets) {
    std::map<std::string, std::string> as_env;
    for (const auto& s : *secrets) as_env[s] = "";
    if (auto st = checkEnv(as_env); !st)
      return makeError(ErrorKind::kInvalidArgument, "secrets: {}", st.error().message);
    for (const auto& s : *secrets)
      if (cmd.env.count(s)) return makeError(ErrorKind::kInvalidArgument, "secrets: '{}' is also set in env", s);
    cmd.secrets = *secrets;
  }
  ASSIGN_OR_RETURN(auto ttl, yearBoundedSeconds(in, "ttl_s", "daemon default"));
  if (ttl) cmd.ttl_s = *ttl;
  ASSIGN_OR_RETURN(auto idle, yearBoundedSeconds(in, "idle_pause_s", "never"));
  if (idle) cmd.idle_pause_s = *idle;
  if (in.has("history")) {
    ASSIGN_OR_RETURN(auto policy, core::HistoryPolicy::parse(in.raw()["history"]));
    cmd.history = policy.toJson();
  }
  return cmd;
}

Result<core::ListSandboxes> parseListSandboxes(const http::Request& req) {
  core::ListSandboxes cmd;
  for (const auto& [key, value] : req.query) {
    if (key == "label") {
      size_t eq = value.find('=');
      if (eq == std::string::npos || eq == 0)
        return makeError(ErrorKind::kInvalidArgument, "label filter must be KEY=VALUE");
      cmd.labels[value.substr(0, eq)] = value.substr(eq + 1);
    } else if (key == "state") {
      static const char* kStates[] = {"starting", "running", "paused", "stopped", "failed", "deleting"};
      bool known = false;
      for (const char* s : kStates) known = known || value == s;
      if (!known)
        return makeError(ErrorKind::kInvalidArgument,
                         "state must be one of starting, running, paused, stopped, failed, deleting");
      cmd.state = value;
    } else {
      return makeError(ErrorKind::kInvalidArgument, "unknown query parameter '{}' (allowed: label, state)",
                       key.substr(0, 64));
    }
  }
  TRY(checkLabels(cmd.labels));
  return cmd;
}

void registerSandboxRoutes(Router& r) {
  // With ?progress=1, a create that takes long (the first VM of a template warms it) answers NDJSON as
  // soon as there is something to say: progress lines, then {"type":"done","sandbox":{...}} or an error
  // line. A create with nothing to say answers as without it.
  r.add("POST", "/v1/sandboxes", [](RouteContext& ctx) -> Status {
    ASSIGN_OR_RETURN(std::string body, ctx.jsonBody());
    ASSIGN_OR_RETURN(auto cmd, parseCreateSandbox(body, ctx.options.host_memory_bytes));
    auto progress_query = ctx.req.queryValue("progress");
    if (progress_query && *progress_query != "0" && *progress_query != "1")
      return makeError(ErrorKind::kInvalidArgument, "progress must be 0 or 1");
    bool streaming = false;
    if (progress_query == "1") {
      cmd.progress = [&](const std::string& line) {
        if (!streaming && !ctx.resp.beginStream(200, "application/x-ndjson", std::nullopt)) return;
        streaming = true;
        (void)ctx.resp.write(ndjsonLine({{"type", "progress"}, {"line", line}}));
      };
    }
    auto view = ctx.manager.create(cmd);
    nlohmann::json out;
    if (view) {
      out = view->toJson();
      if (cmd.network)
        if (auto warnings = networkWarnings(*cmd.network); !warnings.empty()) out["warnings"] = warnings;
    }
    if (!streaming) {
      if (!view) return tl::unexpected(view.error());
      return sendJson(ctx.resp, 201, out);
    }
    nlohmann::json last = {{"type", "done"}, {"sandbox", out}};
    if (!view) {
      last = errorJson(errorKindName(view.error().kind), view.error().message);
      last["type"] = "error";
    }
    TRY(ctx.resp.write(ndjsonLine(last)));
    return ctx.resp.end();
  });
  r.add("GET", "/v1/sandboxes", [](RouteContext& ctx) -> Status {
    ASSIGN_OR_RETURN(auto cmd, parseListSandboxes(ctx.req));
    ASSIGN_OR_RETURN(auto views, ctx.manager.list(cmd));
    nlohmann::json out = nlohmann::json::array();
    for (const auto& v : views) out.push_back(v.toJson());
    return sendJson(ctx.resp, 200, {{"sandboxes", out}});
  });
  r.add("GET", "/v1/sandboxes/{id}", [](RouteContext& ctx) -> Status {
    ASSIGN_OR_RETURN(auto view, ctx.manager.get(ctx.param("id")));
    return sendJson(ctx.resp, 200, view.toJson());
  });
  r.add("DELETE", "/v1/sandboxes/{id}", [](RouteContext& ctx) -> Status {
    TRY(ctx.manager.destroy(ctx.param("id")));
    return ctx.resp.send(204, "application/json", "");
  });
  r.add("POST", "/v1/sandboxes/{id}/pause", [](RouteContext& ctx) -> Status {
    TRY(ctx.manager.pause(ctx.param("id")));
    ASSIGN_OR_RETURN(auto view, ctx.manager.get(ctx.param("id")));
    return sendJson(ctx.resp, 200, view.toJson());
  });
  r.add("POST", "/v1/sandboxes/{id}/resume", [](RouteContext& ctx) -> Status {
    TRY(ctx.manager.resume(ctx.param("id")));
    ASSIGN_OR_RETURN(auto view, ctx.manager.get(ctx.param("id")));
    return sendJson(ctx.resp, 200, view.toJson());
  });
  // A new TTL: {"ttl_s": N} from now (0: none, where the node allows it) or {"add_s": N} more than is left.
  // A paused sandbox's TTL stands still; the new one counts from its resume.
  r.add("POST", "/v1/sandboxes/{id}/ttl", [](RouteContext& ctx) -> Status {
    ASSIGN_OR_RETURN(std::string body, ctx.jsonBody());
    ASSIGN_OR_RETURN(auto in, JsonInput::parse(body, {"ttl_s", "add_s"}));
    core::SetTtl cmd;
    ASSIGN_OR_RETURN(cmd.ttl_s, yearBoundedSeconds(in, "ttl_s", "none"));
    ASSIGN_OR_RETURN(cmd.add_s, yearBoundedSeconds(in, "add_s", "", /*negative=*/true));
    if (cmd.ttl_s.has_value() == cmd.add_s.has_value())
      return makeError(ErrorKind::kInvalidArgument, "give exactly one of ttl_s and add_s");
    ASSIGN_OR_RETURN(auto view, ctx.manager.setTtl(ctx.param("id"), cmd));
    return sendJson(ctx.resp, 200, view.toJson());
  });
  r.add("POST", "/v1/sandboxes/{id}/snapshots", [](RouteContext& ctx) -> Status {
    ASSIGN_OR_RETURN(std::string body, ctx.jsonBody());
    ASSIGN_OR_RETURN(std::string name, parseSnapshotBody(body));
    ASSIGN_OR_RETURN(auto snap, ctx.manager.snapshot(ctx.param("id"), name));
    return sendJson(ctx.resp, 201, snapshotJson(snap));
  });
  r.add("GET", "/v1/sandboxes/{id}/snapshots", [](RouteContext& ctx) -> Status {
    ASSIGN_OR_RETURN(auto snaps, ctx.manager.listSnapshots(ctx.param("id")));
    nlohmann::json out = nlohmann::json::array();
    uint64_t total = 0;
    for (const auto& s : snaps) {
      out.push_back(snapshotJson(s));
      total += s.size_bytes;
    }
    return sendJson(ctx.resp, 200, {{"snapshots", out}, {"total_size_bytes", total}});
  });
  r.add("GET", "/v1/snapshots/{snap}", [](RouteContext& ctx) -> Status {
    ASSIGN_OR_RETURN(auto snap, ctx.manager.getSnapshot(ctx.param("snap")));
    return sendJson(ctx.resp, 200, snapshotJson(snap));
  });
  // The snapshot as an encrypted archive (docs/snapshot-archive.md), streamed.
  r.add("GET", "/v1/snapshots/{snap}/archive", [](RouteContext& ctx) -> Status {
    ASSIGN_OR_RETURN(std::string path, ctx.manager.exportSnapshot(ctx.param("snap")));
    Defer remove([&] { ::unlink(path.c_str()); });
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) return sysError(errno, "open {}", path);
    struct stat st;
    if (::fstat(fd.get(), &st) < 0) return sysError(errno, "stat {}", path);
    TRY(ctx.resp.beginStream(200, "application/octet-stream", static_cast<uint64_t>(st.st_size)));
    std::string buf(1 << 20, '\0');
    for (;;) {
      ssize_t n = ::read(fd.get(), buf.data(), buf.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return sysError(errno, "read {}", path);
      if (n == 0) break;
      TRY(ctx.resp.write(std::string_view(buf.data(), static_cast<size_t>(n))));
    }
    return ctx.resp.end();
  });
  // An archive in the body becomes a new snapshot of the sandbox; nothing is kept unless all of it verifies.
  r.add("POST", "/v1/sandboxes/{id}/snapshots/import", [](RouteContext& ctx) -> Status {
    std::string path = ctx.manager.scratchPath("import");
    Defer remove([&] { ::unlink(path.c_str()); });
    {
      UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
      if (!fd) return sysError(errno, "create {}", path);
      std::string buf(1 << 20, '\0');
      for (;;) {
        ASSIGN_OR_RETURN(size_t n, ctx.body.read(buf.data(), buf.size()));
        if (n == 0) break;
        for (size_t off = 0; off < n;) {
          ssize_t w = ::write(fd.get(), buf.data() + off, n - off);
          if (w < 0 && errno == EINTR) continue;
          if (w < 0) return sysError(errno, "write {}", path);
          off += static_cast<size_t>(w);
        }
      }
    }
    ASSIGN_OR_RETURN(auto snap, ctx.manager.importSnapshot(ctx.param("id"), path));
    return sendJson(ctx.resp, 201, snapshotJson(snap));
  });
  r.add("DELETE", "/v1/snapshots/{snap}", [](RouteContext& ctx) -> Status {
    TRY(ctx.manager.deleteSnapshot(ctx.param("snap")));
    return ctx.resp.send(204, "application/json", "");
  });
  r.add("POST", "/v1/sandboxes/{id}/rollback", [](RouteContext& ctx) -> Status {
    ASSIGN_OR_RETURN(std::string body, ctx.jsonBody());
    ASSIGN_OR_RETURN(core::RollbackSandbox cmd, parseRollbackBody(body));
    ASSIGN_OR_RETURN(auto view, ctx.manager.rollback(ctx.param("id"), cmd.snapshot, cmd.after_restore));
    return sendJson(ctx.resp, 200, view.toJson());
  });
  r.add("POST", "/v1/sandboxes/{id}/fork", [](RouteContext& ctx) -> Status {
    ASSIGN_OR_RETURN(std::string body, ctx.jsonBody());
    ASSIGN_OR_RETURN(core::ForkSandbox cmd, parseForkBody(body));
    cmd.id = ctx.param("id");
    ASSIGN_OR_RETURN(auto result, ctx.manager.fork(cmd));
    nlohmann::json out = nlohmann::json::array();
    for (const auto& v : result.sandboxes) out.push_back(v.toJson());
    return sendJson(ctx.resp, 201, {{"snapshot", snapshotJson(result.snapshot)}, {"sandboxes", out}});
  });
}

nlohmann::json snapshotJson(const store::SnapshotRecord& s) {
  return {{"id", s.id},
          {"sandbox_id", s.sandbox_id},
          {"name", s.name},
          {"runtime", s.runtime},
          {"kind", s.kind},
          {"size_bytes", s.size_bytes},
          {"origin", s.origin},
          {"created_ms", s.created_ms},
          {"created", isoTimeMs(s.created_ms)},
          {"processes", s.kind == "full"}};
}

Result<std::string> parseSnapshotBody(std::string_view body) {
  if (body.empty()) return std::string();
  ASSIGN_OR_RETURN(auto in, JsonInput::parse(body, {"name"}));
  ASSIGN_OR_RETURN(auto name, in.string("name", 64));
  return name.value_or("");
}

// on_restore and restore_signal of a fork or rollback (docs/snapshots.md "Generations").
static Result<core::AfterRestore> parseAfterRestore(const JsonInput& in) {
  core::AfterRestore after;
  ASSIGN_OR_RETURN(auto mode, in.string("on_restore", 16));
  if (mode) {
    if (*mode != "signal" && *mode != "kill" && *mode != "none")
      return makeError(ErrorKind::kInvalidArgument, "on_restore must be \"signal\", \"kill\" or \"none\"");
    after.processes = *mode;
  }
  if (in.has("restore_signal")) {
    if (after.processes != "signal")
      return makeError(ErrorKind::kInvalidArgument, "restore_signal applies to on_restore \"signal\" only");
    const auto& v = in.raw()["restore_signal"];
    if (v.is_string()) {
      ASSIGN_OR_RETURN(after.signal, parseSignal(v.get<std::string>()));
    } else if (v.is_number_integer() && v.get<int64_t>() >= 1 && v.get<int64_t>() <= 64) {
      after.signal = static_cast<int>(v.get<int64_t>());
    } else {
      return makeError(ErrorKind::kInvalidArgument,
                       "restore_signal must be a name like \"URG\" or a number from 1 to 64");
    }
  }
  return after;
}

Result<core::RollbackSandbox> parseRollbackBody(std::string_view body) {
  ASSIGN_OR_RETURN(auto in, JsonInput::parse(body, {"snapshot", "on_restore", "restore_signal"}));
  ASSIGN_OR_RETURN(auto snap, in.string("snapshot", 64));
  if (!snap || snap->empty()) return makeError(ErrorKind::kInvalidArgument, "snapshot: required (an id or a name)");
  core::RollbackSandbox cmd;
  cmd.snapshot = *snap;
  ASSIGN_OR_RETURN(cmd.after_restore, parseAfterRestore(in));
  return cmd;
}

Result<core::ForkSandbox> parseForkBody(std::string_view body) {
  core::ForkSandbox cmd;
  if (body.empty()) return cmd;
  ASSIGN_OR_RETURN(auto in, JsonInput::parse(body, {"count", "snapshot", "on_restore", "restore_signal", "ttl_s"}));
  ASSIGN_OR_RETURN(cmd.after_restore, parseAfterRestore(in));
  ASSIGN_OR_RETURN(auto count, in.integer("count"));
  if (count) {
    if (*count < 1 || *count > 64) return makeError(ErrorKind::kInvalidArgument, "count must be between 1 and 64");
    cmd.count = static_cast<int>(*count);
  }
  ASSIGN_OR_RETURN(auto snap, in.string("snapshot", 64));
  if (snap) cmd.snapshot = *snap;
  ASSIGN_OR_RETURN(cmd.ttl_s, yearBoundedSeconds(in, "ttl_s", "the node's default"));
  return cmd;
}

}  // namespace space::api
