// space files ls|stat|mkdir|mv|rm: the sandbox file API (GET .../files/list and /stat, POST .../mkdir and
// /move, DELETE .../files), one call each.
#include <fmt/format.h>

#include <ctime>

#include "cli/commands.h"
#include "http/url.h"

namespace space::cli {
namespace {

using nlohmann::json;

std::string filesPath(const std::string& id, const std::string& route) {
  return fmt::format("/v1/sandboxes/{}/files{}", http::percentEncode(id), route);
}

std::string withPath(const std::string& id, const std::string& route, const std::string& path) {
  return filesPath(id, route) + "?path=" + http::percentEncode(path);
}

std::string mtimeText(int64_t unix_ms) {
  std::time_t t = static_cast<std::time_t>(unix_ms / 1000);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M", &tm);
  return buf;
}

std::string modeText(const json& e) { return fmt::format("{:04o}", e.value("mode", 0u)); }

}  // namespace

int cmdFilesLs(Context& ctx, const std::string& id, const std::string& path) {
  auto j = callJson(ctx, "GET", withPath(id, "/list", path));
  if (!j) return fail(&ctx, j.error());
  if (ctx.json) {
    fmt::print("{}\n", j->dump());
    return 0;
  }
  std::vector<std::vector<std::string>> rows;
  for (const auto& e : j->value("entries", json::array())) {
    std::string name = e.value("name", "");
    if (e.value("type", "") == "symlink") name += " -> " + e.value("link_target", "");
    if (e.value("type", "") == "dir") name += "/";
    rows.push_back({e.value("type", ""), modeText(e), std::to_string(e.value("size", uint64_t{0})),
                    mtimeText(e.value("mtime_unix_ms", int64_t{0})), name});
  }
  printTable({"TYPE", "MODE", "SIZE", "MODIFIED (UTC)", "NAME"}, rows);
  return 0;
}

int cmdFilesStat(Context& ctx, const std::string& id, const std::string& path) {
  auto j = callJson(ctx, "GET", withPath(id, "/stat", path));
  if (!j) return fail(&ctx, j.error());
  if (ctx.json) {
    fmt::print("{}\n", j->dump());
    return 0;
  }
  fmt::print("path: {}\ntype: {}\nsize: {}\nmode: {}\nowner: {}:{}\nmodified: {} UTC\n", path, j->value("type", ""),
             j->value("size", uint64_t{0}), modeText(*j), j->value("uid", 0u), j->value("gid", 0u),
             mtimeText(j->value("mtime_unix_ms", int64_t{0})));
  if (j->contains("link_target")) fmt::print("link: {}\n", j->value("link_target", ""));
  return 0;
}

int cmdFilesMkdir(Context& ctx, const std::string& id, const std::string& path, bool parents) {
  auto j = callJson(ctx, "POST", filesPath(id, "/mkdir"), json{{"path", path}, {"parents", parents}});
  if (!j) return fail(&ctx, j.error());
  if (ctx.json) fmt::print("{}\n", j->dump());
  return 0;
}

int cmdFilesMv(Context& ctx, const std::string& id, const std::string& from, const std::string& to) {
  auto j = callJson(ctx, "POST", filesPath(id, "/move"), json{{"from", from}, {"to", to}});
  if (!j) return fail(&ctx, j.error());
  if (ctx.json) fmt::print("{}\n", j->dump());
  return 0;
}

int cmdFilesRm(Context& ctx, const std::string& id, const std::string& path, bool recursive) {
  auto j = callJson(ctx, "DELETE", withPath(id, "", path) + (recursive ? "&recursive=1" : ""));
  if (!j) return fail(&ctx, j.error());
  return 0;
}

}  // namespace space::cli
