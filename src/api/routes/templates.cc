// Templates: list, build (streamed NDJSON progress) from a source the daemon reads or from an upload,
// warm, remove.
#include <fcntl.h>
#include <unistd.h>

#include <mutex>

#include "api/errors.h"
#include "api/json_input.h"
#include "api/ndjson.h"
#include "api/routes/routes.h"
#include "api/template_upload.h"
#include "api/validate.h"
#include "common/defer.h"
#include "common/unique_fd.h"

namespace space::api {
namespace {

nlohmann::json templateJson(const store::TemplateRecord& t) {
  return {{"id", t.id},
          {"name", t.name},
          {"rootfs", t.rootfs},
          {"source", t.source},
          {"size_bytes", t.size_bytes},
          {"created_ms", t.created_ms}};
}

// Runs the build with its output as NDJSON progress lines; the last line is the template, with the
// warnings of the upload and of the build, or the error. The status line goes out before the build starts.
Status streamBuild(RouteContext& ctx, const core::BuildTemplate& cmd, std::vector<std::string> warnings) {
  TRY(ctx.resp.beginStream(200, "application/x-ndjson", std::nullopt));
  std::mutex mu;
  bool client_gone = false;
  // A build goes on when its client disconnects: the template is still wanted, and the manager
  // cannot abandon debootstrap half-way cleanly.
  auto progress = [&](const std::string& line) {
    std::lock_guard lock(mu);
    if (client_gone) return;
    if (!ctx.resp.write(ndjsonLine({{"type", "progress"}, {"line", line}}))) client_gone = true;
  };
  auto result = ctx.manager.buildTemplate(cmd, progress);
  std::lock_guard lock(mu);
  if (client_gone) return ok();
  nlohmann::json last;
  if (result) {
    last = {{"type", "done"}, {"template", templateJson(*result)}};
    for (auto& w : result->warnings) warnings.push_back(std::move(w));
    if (!warnings.empty()) last["warnings"] = warnings;
  } else {
    last = errorJson(errorKindName(result.error().kind), result.error().message);
    last["type"] = "error";
  }
  TRY(ctx.resp.write(ndjsonLine(last)));
  return ctx.resp.end();
}

}  // namespace

Result<core::BuildTemplate> parseBuildTemplate(std::string_view body) {
  ASSIGN_OR_RETURN(auto in, JsonInput::parse(body, {"name", "kind", "suite", "variant", "packages", "mirror", "path"}));
  core::BuildTemplate cmd;
  ASSIGN_OR_RETURN(auto name, in.string("name", 64));
  if (!name) return makeError(ErrorKind::kInvalidArgument, "name is required");
  TRY(checkName("template name", *name));
  cmd.name = *name;
  ASSIGN_OR_RETURN(auto kind, in.string("kind", 16));
  if (!kind || (*kind != "debootstrap" && *kind != "dir" && *kind != "tar")) {
    return makeError(ErrorKind::kInvalidArgument, "kind must be debootstrap, dir or tar");
  }
  cmd.kind = *kind;
  ASSIGN_OR_RETURN(auto suite, in.string("suite", 64));
  ASSIGN_OR_RETURN(auto variant, in.string("variant", 64));
  ASSIGN_OR_RETURN(auto packages, in.stringArray("packages", 1024));
  ASSIGN_OR_RETURN(auto mirror, in.string("mirror", 1024));
  ASSIGN_OR_RETURN(auto path, in.string("path", 4096));
  if (cmd.kind == "debootstrap") {
    if (path) return makeError(ErrorKind::kInvalidArgument, "path is for kind dir or tar, not debootstrap");
    if (suite) {
      TRY(checkName("suite", *suite));
      cmd.suite = *suite;
    }
    if (variant) {
      TRY(checkName("variant", *variant));
      cmd.variant = *variant;
    }
    if (packages) {
      for (const auto& p : *packages) {
        // Package names go onto a command line: allow only what Debian allows in a name.
        bool valid = !p.empty() && p.size() <= 128 && std::isalnum(static_cast<unsigned char>(p[0]));
        for (char c : p)
          valid = valid && (std::isalnum(static_cast<unsigned char>(c)) || c == '+' || c == '-' || c == '.');
        if (!valid) return makeError(ErrorKind::kInvalidArgument, "'{}' is not a Debian package name", p.substr(0, 64));
      }
      cmd.packages = *packages;
    }
    if (mirror) {
      if (!mirror->starts_with("http://") && !mirror->starts_with("https://")) {
        return makeError(ErrorKind::kInvalidArgument, "mirror must be an http:// or https:// URL");
      }
      cmd.mirror = *mirror;
    }
  } else {
    if (suite || variant || packages || mirror) {
      return makeError(ErrorKind::kInvalidArgument, "suite, variant, packages and mirror are for kind debootstrap");
    }
    if (!path || path->empty() || (*path)[0] != '/') {
      return makeError(ErrorKind::kInvalidArgument, "path must be an absolute path on the daemon's host");
    }
    cmd.path = *path;
  }
  return cmd;
}

void registerTemplateRoutes(Router& r) {
  r.add("GET", "/v1/templates", [](RouteContext& ctx) -> Status {
    ASSIGN_OR_RETURN(auto list, ctx.manager.listTemplates());
    nlohmann::json out = nlohmann::json::array();
    for (const auto& t : list) out.push_back(templateJson(t));
    return sendJson(ctx.resp, 200, {{"templates", out}});
  });
  r.add("POST", "/v1/templates", [](RouteContext& ctx) -> Status {
    ASSIGN_OR_RETURN(std::string body, ctx.jsonBody());
    ASSIGN_OR_RETURN(auto cmd, parseBuildTemplate(body));
    // A host path is read with the daemon's rights: only its host's operator may name one. Remote clients
    // upload the tree (PUT /v1/templates/{name}/archive).
    if (cmd.kind != "debootstrap" && !ctx.req.trusted) {
      ctx.error_status = 403;
      return makeError(ErrorKind::kUnauthenticated,
                       "a template from a path on the daemon's host can be built only over "
                       "the unix socket; upload the tree instead (PUT /v1/templates/{}/archive, `space template build "
                       "{} --tar FILE`)",
                       cmd.name, cmd.name);
    }
    return streamBuild(ctx, cmd, {});
  });
  // The tree as a tar stream in the body (plain, gzip, zstd, xz, bzip2): vetted and spooled
  // (template_upload.h) before the answer starts, so a refused archive gets its own status, then built
  // like a tarball with the same NDJSON progress as POST /v1/templates.
  r.add("PUT", "/v1/templates/{name}/archive", [](RouteContext& ctx) -> Status {
    uint64_t limit = ctx.options.template_upload_limit_bytes;
    if (auto length = ctx.body.contentLength(); length && *length > limit) {
      ctx.error_status = 413;
      return makeError(ErrorKind::kInvalidArgument,
                       "the upload ({} MiB) is larger than this daemon's limit of {} MiB "
                       "(template_upload_max_mib in its config)",
                       *length >> 20, limit >> 20);
    }
    std::string spool = ctx.manager.scratchPath("template-upload");
    Defer remove([&] { ::unlink(spool.c_str()); });
    UploadSummary summary;
    {
      UniqueFd fd(::open(spool.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
      if (!fd) return sysError(errno, "create {}", spool);
      auto spooled =
          spoolTemplateUpload([&](char* out, size_t max) { return ctx.body.read(out, max); }, fd.get(), limit);
      if (!spooled) {
        if (spooled.error().kind == ErrorKind::kResourceExhausted && spooled.error().sys_errno == 0)
          ctx.error_status = 413;
        return tl::unexpected(spooled.error().context("upload template " + ctx.param("name")));
      }
      summary = *spooled;
    }
    core::BuildTemplate cmd;
    cmd.name = ctx.param("name");
    cmd.kind = "upload";
    cmd.path = spool;
    return streamBuild(ctx, cmd, uploadWarnings(summary));
  });
  // Makes the template's VM memory snapshot now (boots one VM: seconds under emulation).
  r.add("POST", "/v1/templates/{name}/warm", [](RouteContext& ctx) -> Status {
    ASSIGN_OR_RETURN(nlohmann::json facts, ctx.manager.warmTemplate(ctx.param("name")));
    return sendJson(ctx.resp, 200, facts);
  });
  r.add("DELETE", "/v1/templates/{name}", [](RouteContext& ctx) -> Status {
    TRY(ctx.manager.removeTemplate(ctx.param("name")));
    return ctx.resp.send(204, "application/json", "");
  });
}

}  // namespace space::api
