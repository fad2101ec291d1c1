// space snapshot | history | rollback | fork (docs/snapshots.md).
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/context.h"
#include "cli/durations.h"
#include "common/unique_fd.h"
#include "http/url.h"

namespace space::cli {
namespace {

std::string humanBytes(uint64_t b) {
  if (b >= (1ull << 30)) return fmt::format("{:.1f} GiB", static_cast<double>(b) / (1ull << 30));
  if (b >= (1ull << 20)) return fmt::format("{:.1f} MiB", static_cast<double>(b) / (1ull << 20));
  return fmt::format("{} KiB", (b + 1023) / 1024);
}

std::string sandboxPath(const std::string& id) { return "/v1/sandboxes/" + http::percentEncode(id); }

// The daemon parses the signal (a name or a number), so the CLI sends a number as a number.
void addRestoreOptions(nlohmann::json& body, const RestoreOptions& restore) {
  if (!restore.on_restore.empty()) body["on_restore"] = restore.on_restore;
  if (restore.signal.empty()) return;
  bool numeric = restore.signal.find_first_not_of("0123456789") == std::string::npos && restore.signal.size() <= 2;
  if (numeric)
    body["restore_signal"] = std::stoi(restore.signal);
  else
    body["restore_signal"] = restore.signal;
}

}  // namespace

// Prints only the snapshot's id, so `SNAP=$(space snapshot ID)` works.
int cmdSnapshot(Context& ctx, const std::string& id, const std::string& name) {
  nlohmann::json body = nlohmann::json::object();
  if (!name.empty()) body["name"] = name;
  auto j = callJson(ctx, "POST", sandboxPath(id) + "/snapshots", body);
  if (!j) return fail(&ctx, j.error());
  fmt::print("{}\n", ctx.json ? j->dump() : j->value("id", ""));
  return 0;
}

int cmdHistory(Context& ctx, const std::string& id) {
  auto j = callJson(ctx, "GET", sandboxPath(id) + "/snapshots");
  if (!j) return fail(&ctx, j.error());
  if (ctx.json) {
    fmt::print("{}\n", j->dump());
    return 0;
  }
  std::vector<std::vector<std::string>> rows;
  for (const auto& s : j->value("snapshots", nlohmann::json::array()))
    rows.push_back({s.value("id", ""), s.value("name", ""), s.value("created", ""), s.value("kind", ""),
                    s.value("origin", ""), humanBytes(s.value("size_bytes", uint64_t{0}))});
  printTable({"SNAPSHOT", "NAME", "CREATED", "KIND", "ORIGIN", "SIZE"}, rows);
  fmt::print("{} snapshots, {} on disk\n", rows.size(), humanBytes(j->value("total_size_bytes", uint64_t{0})));
  return 0;
}

int cmdSnapshotRm(Context& ctx, const std::vector<std::string>& snaps) {
  int rc = 0;
  for (const auto& s : snaps) {
    auto j = callJson(ctx, "DELETE", "/v1/snapshots/" + http::percentEncode(s));
    if (!j) rc = fail(&ctx, j.error().context(s));
  }
  return rc;
}

int cmdRollback(Context& ctx, const std::string& id, const std::string& snap, const RestoreOptions& restore) {
  nlohmann::json body = nlohmann::json::object();
  body["snapshot"] = snap;
  addRestoreOptions(body, restore);
  auto j = callJson(ctx, "POST", sandboxPath(id) + "/rollback", body);
  if (!j) return fail(&ctx, j.error());
  fmt::print("{}\n", ctx.json ? j->dump() : id);
  return 0;
}

int cmdSnapshotExport(Context& ctx, const std::string& snap, const std::string& out) {
  return downloadToFile(ctx, "/v1/snapshots/" + http::percentEncode(snap) + "/archive", out);
}

// Prints only the new snapshot's id.
int cmdSnapshotImport(Context& ctx, const std::string& file, const std::string& id) {
  UniqueFd fd(::open(file.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return fail(&ctx, sysError(errno, "open {}", file).value());
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode))
    return fail(&ctx, Error{ErrorKind::kInvalidArgument, 0, fmt::format("{} is not a regular file", file)});
  auto resp = uploadFromFd(ctx, "POST", sandboxPath(id) + "/snapshots/import", fd.get(),
                           static_cast<uint64_t>(st.st_size), file);
  if (!resp) return fail(&ctx, resp.error());
  // The daemon only saw an upload: the file's name is what the user knows it by.
  if (auto s = checkResponse(*resp); !s) return fail(&ctx, s.error().context("import " + file));
  auto j = nlohmann::json::parse(resp->body, nullptr, false);
  fmt::print("{}\n", ctx.json ? j.dump() : j.value("id", ""));
  return 0;
}

// Prints the children's ids, one a line.
int cmdFork(Context& ctx, const std::string& id, int count, const std::string& snap, const RestoreOptions& restore,
            const std::string& ttl) {
  nlohmann::json body = {{"count", count}};
  if (!snap.empty()) body["snapshot"] = snap;
  if (!ttl.empty()) {
    auto seconds = wholeSeconds("--ttl", ttl, std::chrono::seconds(365ll * 24 * 3600));
    if (!seconds) return fail(&ctx, seconds.error());
    body["ttl_s"] = *seconds;
  }
  addRestoreOptions(body, restore);
  auto j = callJson(ctx, "POST", sandboxPath(id) + "/fork", body);
  if (!j) return fail(&ctx, j.error());
  if (ctx.json) {
    fmt::print("{}\n", j->dump());
    return 0;
  }
  for (const auto& s : j->value("sandboxes", nlohmann::json::array())) fmt::print("{}\n", s.value("id", ""));
  return 0;
}

}  // namespace space::cli
