// Files inside a sandbox, through its agent: streamed download and upload (constant memory whatever the
// size), stat, list, mkdir, move, remove. Path confinement to the sandbox root is the agent's job.
#include "api/errors.h"
#include "api/json_input.h"
#include "api/routes/routes.h"
#include "api/tree_archive.h"
#include "api/validate.h"

namespace space::api {
namespace {

constexpr size_t kChunk = 64 * 1024;

nlohmann::json statJson(const agent::FileStat& s) {
  nlohmann::json j = {{"name", s.name},
                      {"type", s.type},
                      {"size", s.size},
                      {"mode", s.mode},
                      {"uid", s.uid},
                      {"gid", s.gid},
                      {"mtime_unix_ms", s.mtime_unix_ms}};
  if (s.type == "symlink") j["link_target"] = s.link_target;
  return j;
}

Result<std::string> pathParam(const http::Request& req) {
  auto path = req.queryValue("path");
  TRY(checkSandboxPath("path", path ? *path : std::string()));
  return *path;
}

Status download(RouteContext& ctx) {
  ASSIGN_OR_RETURN(std::string path, pathParam(ctx.req));
  ASSIGN_OR_RETURN(auto agent, ctx.manager.agent(ctx.param("id")));
  ASSIGN_OR_RETURN(std::unique_ptr<agent::FileReader> reader, about("file", agent->readFile(path)));
  uint64_t remaining = reader->size();
  TRY(ctx.resp.beginStream(200, "application/octet-stream", remaining));
  while (remaining > 0) {
    ASSIGN_OR_RETURN(std::string chunk, reader->read(static_cast<size_t>(std::min<uint64_t>(kChunk, remaining))));
    // A file that shrank while we sent it: the connection is closed short of Content-Length, which
    // the client sees as a failed transfer rather than a silently truncated file.
    if (chunk.empty()) return makeError(ErrorKind::kConflict, "{} changed size during download", path);
    remaining -= chunk.size();
    TRY(ctx.resp.write(chunk));
  }
  return ctx.resp.end();
}

Status upload(RouteContext& ctx) {
  ASSIGN_OR_RETURN(std::string path, pathParam(ctx.req));
  uint32_t mode = 0644;
  if (auto m = ctx.req.queryValue("mode")) {
    ASSIGN_OR_RETURN(mode, parseMode(*m));
  }
  ASSIGN_OR_RETURN(auto agent, ctx.manager.agent(ctx.param("id")));
  ASSIGN_OR_RETURN(std::unique_ptr<agent::FileWriter> writer, about("file", agent->writeFile(path, mode)));
  std::string buf(kChunk, '\0');
  for (;;) {
    ASSIGN_OR_RETURN(size_t n, ctx.body.read(buf.data(), buf.size()));
    if (n == 0) break;
    TRY(writer->write(std::string_view(buf.data(), n)));
  }
  ASSIGN_OR_RETURN(uint64_t bytes, writer->finish());
  return sendJson(ctx.resp, 201, {{"path", path}, {"bytes", bytes}});
}

// A directory as a tar stream. The stream starts with the first bytes, so a missing path still gets 404.
Status downloadTree(RouteContext& ctx) {
  ASSIGN_OR_RETURN(std::string path, pathParam(ctx.req));
  ASSIGN_OR_RETURN(auto agent, ctx.manager.agent(ctx.param("id")));
  return about("file", writeTreeArchive(*agent, path,
                                        [&](std::string_view data) -> Status {
                                          if (!ctx.resp.started())
                                            TRY(ctx.resp.beginStream(200, "application/x-tar", std::nullopt));
                                          return ctx.resp.write(data);
                                        }))
      .and_then([&] { return ctx.resp.started() ? ctx.resp.end() : ctx.resp.send(200, "application/x-tar", ""); });
}

Status uploadTree(RouteContext& ctx) {
  ASSIGN_OR_RETURN(std::string path, pathParam(ctx.req));
  ASSIGN_OR_RETURN(auto agent, ctx.manager.agent(ctx.param("id")));
  ASSIGN_OR_RETURN(
      auto counts,
      about("file", extractTreeArchive(*agent, path, [&](char* out, size_t max) { return ctx.body.read(out, max); })));
  return sendJson(ctx.resp, 201,
                  {{"path", path},
                   {"files", counts.files},
                   {"dirs", counts.dirs},
                   {"bytes", counts.bytes},
                   {"skipped", counts.skipped}});
}

}  // namespace

Result<MkdirCommand> parseMkdir(std::string_view body) {
  ASSIGN_OR_RETURN(auto in, JsonInput::parse(body, {"path", "parents", "mode"}));
  MkdirCommand cmd;
  ASSIGN_OR_RETURN(auto path, in.string("path", 4096));
  TRY(checkSandboxPath("path", path ? *path : std::string()));
  cmd.path = *path;
  ASSIGN_OR_RETURN(auto parents, in.boolean("parents"));
  cmd.parents = parents.value_or(false);
  ASSIGN_OR_RETURN(auto mode, in.string("mode", 8));
  if (mode) {
    ASSIGN_OR_RETURN(cmd.mode, parseMode(*mode));
  }
  return cmd;
}

Result<MoveCommand> parseMove(std::string_view body) {
  ASSIGN_OR_RETURN(auto in, JsonInput::parse(body, {"from", "to"}));
  MoveCommand cmd;
  ASSIGN_OR_RETURN(auto from, in.string("from", 4096));
  ASSIGN_OR_RETURN(auto to, in.string("to", 4096));
  TRY(checkSandboxPath("from", from ? *from : std::string()));
  TRY(checkSandboxPath("to", to ? *to : std::string()));
  cmd.from = *from;
  cmd.to = *to;
  return cmd;
}

void registerFileRoutes(Router& r) {
  // The agent may report a missing path at any step of a transfer (open, write, commit).
  r.add("GET", "/v1/sandboxes/{id}/files", [](RouteContext& ctx) { return about("file", download(ctx)); });
  r.add("PUT", "/v1/sandboxes/{id}/files", [](RouteContext& ctx) { return about("file", upload(ctx)); });
  r.add("GET", "/v1/sandboxes/{id}/files/archive", downloadTree);
  r.add("PUT", "/v1/sandboxes/{id}/files/archive", uploadTree);
  r.add("DELETE", "/v1/sandboxes/{id}/files", [](RouteContext& ctx) -> Status {
    ASSIGN_OR_RETURN(std::string path, pathParam(ctx.req));
    bool recursive = false;
    if (auto rec = ctx.req.queryValue("recursive")) {
      ASSIGN_OR_RETURN(recursive, parseFlag("recursive", *rec));
    }
    ASSIGN_OR_RETURN(auto agent, ctx.manager.agent(ctx.param("id")));
    TRY(about("file", agent->remove(path, recursive)));
    return ctx.resp.send(204, "application/json", "");
  });
  r.add("GET", "/v1/sandboxes/{id}/files/stat", [](RouteContext& ctx) -> Status {
    ASSIGN_OR_RETURN(std::string path, pathParam(ctx.req));
    ASSIGN_OR_RETURN(auto agent, ctx.manager.agent(ctx.param("id")));
    ASSIGN_OR_RETURN(auto st, about("file", agent->stat(path)));
    return sendJson(ctx.resp, 200, statJson(st));
  });
  r.add("GET", "/v1/sandboxes/{id}/files/list", [](RouteContext& ctx) -> Status {
    ASSIGN_OR_RETURN(std::string path, pathParam(ctx.req));
    ASSIGN_OR_RETURN(auto agent, ctx.manager.agent(ctx.param("id")));
    ASSIGN_OR_RETURN(auto entries, about("file", agent->list(path)));
    nlohmann::json out = nlohmann::json::array();
    for (const auto& e : entries) out.push_back(statJson(e));
    return sendJson(ctx.resp, 200, {{"path", path}, {"entries", out}});
  });
  r.add("POST", "/v1/sandboxes/{id}/files/mkdir", [](RouteContext& ctx) -> Status {
    ASSIGN_OR_RETURN(std::string body, ctx.jsonBody());
    ASSIGN_OR_RETURN(auto cmd, parseMkdir(body));
    ASSIGN_OR_RETURN(auto agent, ctx.manager.agent(ctx.param("id")));
    TRY(about("file", agent->mkdir(cmd.path, cmd.parents, cmd.mode)));
    return sendJson(ctx.resp, 201, {{"path", cmd.path}});
  });
  r.add("POST", "/v1/sandboxes/{id}/files/move", [](RouteContext& ctx) -> Status {
    ASSIGN_OR_RETURN(std::string body, ctx.jsonBody());
    ASSIGN_OR_RETURN(auto cmd, parseMove(body));
    ASSIGN_OR_RETURN(auto agent, ctx.manager.agent(ctx.param("id")));
    TRY(about("file", agent->move(cmd.from, cmd.to)));
    return sendJson(ctx.resp, 200, {{"from", cmd.from}, {"to", cmd.to}});
  });
}

}  // namespace space::api
