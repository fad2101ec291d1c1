#include "store/templates.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <regex>

#include "common/defer.h"
#include "common/unique_fd.h"
#include "store/api_key_secret.h"
#include "store/template_sources.h"
#include "store/tree_hash.h"

namespace space::store {
namespace fs = std::filesystem;
namespace {

constexpr std::string_view kTmpPrefix = "tmp-";
constexpr std::string_view kIdPrefix = "sha256:";
constexpr const char* kRootfsDir = "rootfs";

int64_t nowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

bool isHashDirName(std::string_view name) {
  return name.size() == 64 && name.find_first_not_of("0123456789abcdef") == std::string_view::npos;
}

// The directory name of a template id; empty when the id is not one this builder made (never a path).
std::string hashDirOf(std::string_view id) {
  if (!id.starts_with(kIdPrefix)) return {};
  std::string_view hex = id.substr(kIdPrefix.size());
  return isHashDirName(hex) ? std::string(hex) : std::string();
}

Status makeDir(const std::string& path, mode_t mode) {
  if (::mkdir(path.c_str(), mode) != 0) return sysError(errno, "mkdir {}", path);
  if (::chmod(path.c_str(), mode) != 0) return sysError(errno, "chmod {}", path);  // past the umask
  return ok();
}

// Flushes everything written under `dir` (the whole filesystem, which syncfs makes cheap to ask for) so a
// tree is on disk before the rename that publishes it and the database row that points at it.
Status syncFilesystemOf(const std::string& dir) {
  UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd) return sysError(errno, "open {}", dir);
  if (::syncfs(fd.get()) != 0) return sysError(errno, "syncfs {}", dir);
  return ok();
}

// Makes a rename inside `dir` durable.
Status syncDir(const std::string& dir) {
  UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd) return sysError(errno, "open {}", dir);
  if (::fsync(fd.get()) != 0) return sysError(errno, "fsync {}", dir);
  return ok();
}

void removeTreeQuietly(const std::string& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
}

}  // namespace

Status validateTemplateName(std::string_view name) {
  static const std::regex kName("[a-z0-9][a-z0-9._-]{0,62}");
  if (!std::regex_match(name.begin(), name.end(), kName)) {
    return makeError(ErrorKind::kInvalidArgument,
                     "invalid template name '{}': 1-63 characters of a-z 0-9 . _ -, starting with a letter or digit",
                     name);
  }
  return ok();
}

TemplateBuilder::TemplateBuilder(std::string state_dir, Store& store) : store_(store) {
  std::error_code ec;
  fs::path dir = fs::absolute(fs::path(state_dir) / "templates", ec);
  templates_dir_ = ec ? (fs::path(state_dir) / "templates").string() : dir.lexically_normal().string();
}

Status TemplateBuilder::populate(const TemplateBuildSpec& spec, const std::string& rootfs, const ProgressFn& progress) {
  if (spec.kind == "debootstrap") return populateFromDebootstrap(spec, rootfs, progress);
  if (spec.kind == "dir") {
    // Copying the template store into itself would never end.
    std::error_code ec;
    fs::path source = fs::weakly_canonical(spec.path, ec);
    fs::path store_dir = fs::weakly_canonical(templates_dir_, ec);
    auto [mismatch, unused] = std::mismatch(store_dir.begin(), store_dir.end(), source.begin(), source.end());
    if (mismatch == store_dir.end()) {
      return makeError(ErrorKind::kInvalidArgument, "template directory {} lies inside the template store", spec.path);
    }
    return populateFromDir(spec.path, rootfs, progress);
  }
  if (spec.kind == "tar" || spec.kind == "upload") return populateFromTar(spec.path, rootfs, progress);
  return makeError(ErrorKind::kInvalidArgument, "unknown template kind '{}' (debootstrap, dir, tar)", spec.kind);
}

Result<TemplateRecord> TemplateBuilder::build(const TemplateBuildSpec& spec, const ProgressFn& progress) {
  auto r = [&]() -> Result<TemplateRecord> {
    TRY(validateTemplateName(spec.name));
    std::error_code ec;
    fs::create_directories(templates_dir_, ec);
    if (ec) return sysError(ec.value(), "create {}", templates_dir_);

    ASSIGN_OR_RETURN(std::string suffix, randomHex(8));
    std::string tmp = fmt::format("{}/{}{}", templates_dir_, kTmpPrefix, suffix);
    // 0755: this directory becomes the published <hash> directory by rename.
    TRY(makeDir(tmp, 0755));
    Defer cleanup([&] { removeTreeQuietly(tmp); });
    std::string tmp_rootfs = fmt::format("{}/{}", tmp, kRootfsDir);
    TRY(makeDir(tmp_rootfs, 0755));

    if (progress) progress(fmt::format("building template {} from {}", spec.name, spec.kind));
    TRY(populate(spec, tmp_rootfs, progress));
    TRY(addSandboxDirectories(tmp_rootfs));
    TRY(writeTemplateHostname(tmp_rootfs));
    std::vector<std::string> warnings = templateWarnings(tmp_rootfs);
    if (progress) progress("hashing tree");
    ASSIGN_OR_RETURN(TreeDigest digest, hashTree(tmp_rootfs));
    TRY(syncFilesystemOf(tmp));

    std::lock_guard lock(mu_);
    std::string final_dir = fmt::format("{}/{}", templates_dir_, digest.hex);
    std::string id = fmt::format("{}{}", kIdPrefix, digest.hex);
    bool created = false;
    if (fs::exists(final_dir, ec)) {
      if (progress) progress(fmt::format("identical tree {} exists; reusing it", digest.hex));
    } else if (::rename(tmp.c_str(), final_dir.c_str()) == 0) {
      cleanup.dismiss();
      created = true;
      TRY(syncDir(templates_dir_));
    } else if (errno == EEXIST || errno == ENOTEMPTY) {
      if (progress) progress(fmt::format("identical tree {} exists; reusing it", digest.hex));
    } else {
      return sysError(errno, "rename {} to {}", tmp, final_dir);
    }

    auto previous = store_.getTemplate(spec.name);
    TemplateRecord record;
    record.id = id;
    record.name = spec.name;
    record.rootfs = fmt::format("{}/{}", final_dir, kRootfsDir);
    record.source = {{"kind", spec.kind}};
    if (spec.kind == "debootstrap") {
      record.source["suite"] = spec.suite;
      record.source["variant"] = spec.variant;
      record.source["packages"] = spec.packages;
      if (!spec.mirror.empty()) record.source["mirror"] = spec.mirror;
    } else if (spec.kind != "upload") {  // an upload's path is a scratch file, gone after the build
      record.source["path"] = spec.path;
    }
    record.size_bytes = digest.size_bytes;
    record.created_ms = nowMs();
    auto put = store_.putTemplate(record);
    if (!put) {
      if (created) (void)dropTreeIfUnused(id);  // not yet referenced: the failed build leaves nothing
      return tl::unexpected(put.error());
    }
    // A rebuild under the same name may orphan the tree the name pointed at before.
    if (previous && previous->id != id) {
      auto dropped = dropTreeIfUnused(previous->id);
      if (!dropped && progress) progress(fmt::format("previous tree kept: {}", dropped.error().message));
    }
    if (progress) progress(fmt::format("template {} is {}", spec.name, id));
    record.warnings = std::move(warnings);
    return record;
  }();
  if (!r) r.error().context(fmt::format("build template {}", spec.name));
  return r;
}

Status TemplateBuilder::dropTreeIfUnused(const std::string& template_id) {
  std::string hash_dir = hashDirOf(template_id);
  if (hash_dir.empty()) return makeError(ErrorKind::kInternal, "template id {} is not a content hash", template_id);
  ASSIGN_OR_RETURN(int names, store_.countTemplatesWithId(template_id));
  ASSIGN_OR_RETURN(int sandboxes, store_.countSandboxesUsingTemplate(template_id));
  if (names > 0 || sandboxes > 0) return ok();
  // Renamed to a tmp- name first: a crash during the removal then leaves a directory that start-up
  // deletes, never a half-deleted tree under its hash that a later build would take for complete.
  ASSIGN_OR_RETURN(std::string suffix, randomHex(8));
  std::string from = fmt::format("{}/{}", templates_dir_, hash_dir);
  std::string doomed = fmt::format("{}/{}{}", templates_dir_, kTmpPrefix, suffix);
  if (::rename(from.c_str(), doomed.c_str()) != 0) {
    if (errno == ENOENT) return ok();
    return sysError(errno, "rename {} to {}", from, doomed);
  }
  TRY(syncDir(templates_dir_));
  std::error_code ec;
  fs::remove_all(doomed, ec);
  if (ec) return sysError(ec.value(), "remove {}", doomed);
  return ok();
}

Status TemplateBuilder::remove(const std::string& name) {
  std::lock_guard lock(mu_);
  auto r = [&]() -> Status {
    ASSIGN_OR_RETURN(TemplateRecord t, store_.getTemplate(name));
    ASSIGN_OR_RETURN(int users, store_.countSandboxesUsingTemplate(t.id));
    if (users > 0) return makeError(ErrorKind::kConflict, "{} sandbox(es) use it", users);
    TRY(store_.deleteTemplate(name));
    return dropTreeIfUnused(t.id);
  }();
  if (!r) r.error().context(fmt::format("remove template {}", name));
  return r;
}

Status TemplateBuilder::removeInterruptedBuilds() {
  std::lock_guard lock(mu_);
  std::error_code ec;
  if (!fs::exists(templates_dir_, ec)) return ok();
  std::vector<std::string> doomed, trees;
  for (const auto& entry : fs::directory_iterator(templates_dir_, ec)) {
    std::string name = entry.path().filename().string();
    if (name.starts_with(kTmpPrefix)) doomed.push_back(entry.path().string());
    if (isHashDirName(name)) trees.push_back(name);
  }
  if (ec) return sysError(ec.value(), "list {}", templates_dir_);
  for (const auto& path : doomed) {
    fs::remove_all(path, ec);
    if (ec) return sysError(ec.value(), "remove interrupted build {}", path);
  }
  // A crash between publishing a tree and writing its row leaves a tree nothing refers to.
  for (const auto& hash : trees) TRY(dropTreeIfUnused(fmt::format("{}{}", kIdPrefix, hash)));
  return ok();
}

}  // namespace space::store
