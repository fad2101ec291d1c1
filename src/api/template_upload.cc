#include "api/template_upload.h"

#include <archive.h>
#include <archive_entry.h>
#include <unistd.h>

#include <memory>
#include <set>

namespace space::api {
namespace {

constexpr size_t kChunk = 64 * 1024;
constexpr uint64_t kHeaderBytes = 512;  // what each member costs beyond its data, like a tar header
constexpr size_t kDevicesListed = 5;

struct ReadFree {
  void operator()(struct archive* a) const { archive_read_free(a); }
};
struct WriteFree {
  void operator()(struct archive* a) const { archive_write_free(a); }
};

// The upload's bytes; the body's own error (the client went away, 408) wins over libarchive's message.
struct Source {
  const TarSource* source = nullptr;
  Status status = ok();
  std::vector<char> buf = std::vector<char>(kChunk);

  static la_ssize_t read(struct archive* a, void* self, const void** out) {
    auto* s = static_cast<Source*>(self);
    auto n = (*s->source)(s->buf.data(), s->buf.size());
    if (!n) {
      s->status = tl::unexpected(n.error());
      archive_set_error(a, EIO, "the upload stopped");
      return -1;
    }
    *out = s->buf.data();
    return static_cast<la_ssize_t>(*n);
  }
};

Status readFailure(struct archive* a, const Source& s, std::string_view what) {
  if (!s.status) return s.status;
  const char* msg = archive_error_string(a);
  return makeError(ErrorKind::kInvalidArgument, "the upload is not a usable tar stream ({}): {}", what,
                   msg ? msg : "unreadable");
}

Status writeFailure(struct archive* a, std::string_view what) {
  // The spool is a local file: a failure there is the daemon's disk (ENOSPC: 507), not the upload.
  int err = archive_errno(a);
  const char* msg = archive_error_string(a);
  if (err > 0) return sysError(err, "spool the upload ({}): {}", what, msg ? msg : "");
  return makeError(ErrorKind::kInternal, "spool the upload ({}): {}", what, msg ? msg : "");
}

bool keptXattr(std::string_view name) {
  return name.starts_with("user.") || name.starts_with("system.posix_acl_access") ||
         name.starts_with("system.posix_acl_default");
}

// The symlinks the archive made so far. A later member whose path passes through one, or that takes one's
// name, is refused: extracting it would write wherever the link points. A hard link's target may itself
// be a symlink (linking does not follow the last component), but not pass through one.
class SymlinkGuard {
 public:
  void made(const std::string& name) { links_.insert(name); }
  Status check(const std::string& path, bool including_itself, std::string_view what) const {
    std::string walk = including_itself ? path + "/" : path;
    for (size_t slash = walk.find('/'); slash != std::string::npos; slash = walk.find('/', slash + 1)) {
      std::string prefix = walk.substr(0, slash);
      if (links_.count(prefix)) {
        return makeError(ErrorKind::kInvalidArgument,
                         "tar entry '{}': {} goes through '{}', a symlink made earlier in the archive",
                         path.substr(0, 256), what, prefix.substr(0, 256));
      }
    }
    return ok();
  }

 private:
  std::set<std::string> links_;
};

// Copies the entry's xattrs that may come from an uploader, counting the rest.
void filterXattrs(archive_entry* e, UploadSummary& summary) {
  struct Xattr {
    std::string name;
    std::string value;
  };
  std::vector<Xattr> kept;
  archive_entry_xattr_reset(e);
  const char* name = nullptr;
  const void* value = nullptr;
  size_t size = 0;
  while (archive_entry_xattr_next(e, &name, &value, &size) == ARCHIVE_OK) {
    if (name && keptXattr(name)) {
      kept.push_back({name, std::string(static_cast<const char*>(value), size)});
    } else {
      ++summary.xattrs_dropped;
    }
  }
  archive_entry_xattr_clear(e);
  for (const auto& x : kept) archive_entry_xattr_add_entry(e, x.name.c_str(), x.value.data(), x.value.size());
}

}  // namespace

Result<UploadSummary> spoolTemplateUpload(const TarSource& source, int out_fd, uint64_t limit_bytes) {
  std::unique_ptr<struct archive, ReadFree> in(archive_read_new());
  std::unique_ptr<struct archive, WriteFree> out(archive_write_new());
  if (!in || !out) return makeError(ErrorKind::kInternal, "libarchive: out of memory");
  archive_read_support_filter_all(in.get());
  archive_read_support_format_tar(in.get());
  archive_read_support_format_gnutar(in.get());
  Source src{&source};
  if (archive_read_open(in.get(), &src, nullptr, &Source::read, nullptr) != ARCHIVE_OK)
    return tl::unexpected(readFailure(in.get(), src, "open").error());
  // pax: no limit on name length or file size, and xattrs as SCHILY.xattr, which GNU tar extracts.
  archive_write_set_format_pax_restricted(out.get());
  archive_write_set_bytes_in_last_block(out.get(), 1);
  if (archive_write_open_fd(out.get(), out_fd) != ARCHIVE_OK)
    return tl::unexpected(writeFailure(out.get(), "open").error());

  UploadSummary summary;
  SymlinkGuard links;
  uint64_t content = 0;
  auto charge = [&](uint64_t bytes) -> Status {
    content += bytes;
    if (content <= limit_bytes) return ok();
    return makeError(ErrorKind::kResourceExhausted,
                     "the template's content is larger than this daemon's upload limit of {} MiB "
                     "(template_upload_max_mib in its config)",
                     limit_bytes >> 20);
  };
  std::vector<char> buf(kChunk);
  for (;;) {
    archive_entry* e = nullptr;
    int rc = archive_read_next_header(in.get(), &e);
    if (rc == ARCHIVE_EOF) break;
    if (rc != ARCHIVE_OK && rc != ARCHIVE_WARN) return tl::unexpected(readFailure(in.get(), src, "header").error());
    const char* raw = archive_entry_pathname(e);
    ASSIGN_OR_RETURN(std::string name, safeEntryName(raw ? raw : ""));
    TRY(links.check(name, /*including_itself=*/true, "it"));
    mode_t type = archive_entry_filetype(e);
    if (type == AE_IFCHR || type == AE_IFBLK) {
      if (summary.devices.size() < kDevicesListed) summary.devices.push_back(name);
      ++summary.devices_skipped;
      continue;
    }
    if (const char* hard = archive_entry_hardlink(e)) {
      auto target = safeEntryName(hard);
      if (!target)
        return makeError(ErrorKind::kInvalidArgument, "tar entry '{}': its hard-link target: {}", name.substr(0, 256),
                         target.error().message);
      if (target->empty())
        return makeError(ErrorKind::kInvalidArgument, "tar entry '{}' is a hard link to the tree's root",
                         name.substr(0, 256));
      TRY(links.check(*target, /*including_itself=*/false, "its hard-link target"));
      archive_entry_set_hardlink(e, target->c_str());
    }
    if (name.empty() && type != AE_IFDIR)
      return makeError(ErrorKind::kInvalidArgument, "the archive's top entry '{}' is not a directory", raw ? raw : "");
    archive_entry_set_pathname(e, name.empty() ? "." : name.c_str());
    if (type == AE_IFLNK) links.made(name);
    filterXattrs(e, summary);
    TRY(charge(kHeaderBytes));
    if (archive_write_header(out.get(), e) != ARCHIVE_OK) return tl::unexpected(writeFailure(out.get(), name).error());
    ++summary.entries;
    for (;;) {
      la_ssize_t n = archive_read_data(in.get(), buf.data(), buf.size());
      if (n < 0) return tl::unexpected(readFailure(in.get(), src, "data of " + name).error());
      if (n == 0) break;
      TRY(charge(static_cast<uint64_t>(n)));
      if (archive_write_data(out.get(), buf.data(), static_cast<size_t>(n)) < 0)
        return tl::unexpected(writeFailure(out.get(), name).error());
      summary.bytes += static_cast<uint64_t>(n);
    }
  }
  if (archive_write_close(out.get()) != ARCHIVE_OK) return tl::unexpected(writeFailure(out.get(), "close").error());
  if (summary.entries == 0) return makeError(ErrorKind::kInvalidArgument, "the upload holds no tar entries");
  return summary;
}

std::vector<std::string> uploadWarnings(const UploadSummary& summary) {
  std::vector<std::string> out;
  if (summary.devices_skipped) {
    std::string names;
    for (const auto& d : summary.devices) names += (names.empty() ? "" : ", ") + d;
    out.push_back(
        fmt::format("{} device node(s) not made ({}{}): an uploaded tree gets none; every sandbox's /dev "
                    "is SPACE's own",
                    summary.devices_skipped, names, summary.devices_skipped > summary.devices.size() ? ", ..." : ""));
  }
  if (summary.xattrs_dropped) {
    out.push_back(
        fmt::format("{} extended attribute(s) outside user.* and POSIX ACLs dropped (security.*, "
                    "trusted.* are the host's to set)",
                    summary.xattrs_dropped));
  }
  return out;
}

}  // namespace space::api
