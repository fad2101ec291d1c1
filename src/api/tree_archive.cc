#include "api/tree_archive.h"

#include <archive.h>
#include <archive_entry.h>

#include <memory>
#include <set>
#include <vector>

namespace space::api {
namespace {

constexpr size_t kChunk = 64 * 1024;

struct ArchiveWriteDeleter {
  void operator()(struct archive* a) const { archive_write_free(a); }
};
struct ArchiveReadDeleter {
  void operator()(struct archive* a) const { archive_read_free(a); }
};
struct EntryDeleter {
  void operator()(archive_entry* e) const { archive_entry_free(e); }
};
using WriteArchive = std::unique_ptr<struct archive, ArchiveWriteDeleter>;
using ReadArchive = std::unique_ptr<struct archive, ArchiveReadDeleter>;
using Entry = std::unique_ptr<archive_entry, EntryDeleter>;

std::string joinPath(const std::string& dir, const std::string& name) {
  return dir.ends_with('/') ? dir + name : dir + "/" + name;
}

std::string baseName(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.ends_with('/')) p.pop_back();
  size_t slash = p.find_last_of('/');
  std::string base = slash == std::string::npos ? p : p.substr(slash + 1);
  return base.empty() ? "." : base;
}

// The stream's state: the sink's own error wins over libarchive's message (the client went away).
struct Writer {
  struct archive* a = nullptr;
  const TarSink* sink = nullptr;
  Status sink_status = ok();

  static la_ssize_t write(struct archive* a, void* self, const void* buf, size_t n) {
    auto* w = static_cast<Writer*>(self);
    w->sink_status = (*w->sink)(std::string_view(static_cast<const char*>(buf), n));
    if (!w->sink_status) {
      archive_set_error(a, EIO, "the receiver went away");
      return -1;
    }
    return static_cast<la_ssize_t>(n);
  }

  Status fail(std::string_view what) const {
    if (!sink_status) return sink_status;
    return makeError(ErrorKind::kInternal, "tar {}: {}", what, archive_error_string(a) ? archive_error_string(a) : "");
  }

  Status header(const std::string& name, const agent::FileStat& st, mode_t type, uint64_t size) {
    Entry e(archive_entry_new());
    archive_entry_set_pathname(e.get(), name.c_str());
    archive_entry_set_filetype(e.get(), type);
    archive_entry_set_perm(e.get(), st.mode & 07777);
    archive_entry_set_uid(e.get(), st.uid);
    archive_entry_set_gid(e.get(), st.gid);
    archive_entry_set_mtime(e.get(), st.mtime_unix_ms / 1000, (st.mtime_unix_ms % 1000) * 1000000);
    archive_entry_set_size(e.get(), static_cast<la_int64_t>(size));
    if (type == AE_IFLNK) archive_entry_set_symlink(e.get(), st.link_target.c_str());
    if (archive_write_header(a, e.get()) != ARCHIVE_OK) return fail("header of " + name);
    return ok();
  }

  Status file(agent::AgentClient& agent, const std::string& path, const std::string& name, const agent::FileStat& st) {
    // Opened before the header, so the header carries the size that will really be sent.
    ASSIGN_OR_RETURN(std::unique_ptr<agent::FileReader> reader, agent.readFile(path));
    uint64_t remaining = reader->size();
    TRY(header(name, st, AE_IFREG, remaining));
    while (remaining > 0) {
      ASSIGN_OR_RETURN(std::string chunk, reader->read(static_cast<size_t>(std::min<uint64_t>(kChunk, remaining))));
      // A tar header cannot be taken back: a file that shrank fails the stream rather than padding it.
      if (chunk.empty()) return makeError(ErrorKind::kConflict, "{} changed size while it was archived", path);
      if (archive_write_data(a, chunk.data(), chunk.size()) < 0) return fail("data of " + name);
      remaining -= chunk.size();
    }
    return ok();
  }

  Status tree(agent::AgentClient& agent, const std::string& path, const std::string& name, const agent::FileStat& st) {
    if (st.type == "file") return file(agent, path, name, st);
    if (st.type == "symlink") return header(name, st, AE_IFLNK, 0);
    if (st.type != "dir") return ok();  // devices, sockets, fifos: nothing a copy can carry
    TRY(header(name, st, AE_IFDIR, 0));
    ASSIGN_OR_RETURN(auto entries, agent.list(path));
    for (const auto& e : entries) TRY(tree(agent, joinPath(path, e.name), name + "/" + e.name, e));
    return ok();
  }
};

struct Reader {
  const TarSource* source = nullptr;
  std::vector<char> buf = std::vector<char>(kChunk);
  Status source_status = ok();

  static la_ssize_t read(struct archive* a, void* self, const void** out) {
    auto* r = static_cast<Reader*>(self);
    auto n = (*r->source)(r->buf.data(), r->buf.size());
    if (!n) {
      r->source_status = tl::unexpected(n.error());
      archive_set_error(a, EIO, "the request body failed");
      return -1;
    }
    *out = r->buf.data();
    return static_cast<la_ssize_t>(*n);
  }
};

Status readFailure(struct archive* a, const Reader& r, std::string_view what) {
  if (!r.source_status) return r.source_status;
  const char* msg = archive_error_string(a);
  return makeError(ErrorKind::kInvalidArgument, "the body is not a usable tar stream ({}): {}", what,
                   msg ? msg : "unreadable");
}

}  // namespace

Result<std::string> safeEntryName(std::string_view name) {
  if (name.empty()) return makeError(ErrorKind::kInvalidArgument, "a tar entry without a name");
  if (name.front() == '/') return makeError(ErrorKind::kInvalidArgument, "tar entry '{}' has an absolute name", name);
  std::string out;
  size_t start = 0;
  while (start <= name.size()) {
    size_t slash = name.find('/', start);
    std::string_view part =
        name.substr(start, slash == std::string_view::npos ? std::string_view::npos : slash - start);
    if (part == "..") return makeError(ErrorKind::kInvalidArgument, "tar entry '{}' climbs out with '..'", name);
    if (!part.empty() && part != ".") out += (out.empty() ? "" : "/") + std::string(part);
    if (slash == std::string_view::npos) break;
    start = slash + 1;
  }
  return out;
}

Status writeTreeArchive(agent::AgentClient& agent, const std::string& dir, const TarSink& sink) {
  ASSIGN_OR_RETURN(agent::FileStat top, agent.stat(dir));
  WriteArchive a(archive_write_new());
  if (!a) return makeError(ErrorKind::kInternal, "archive_write_new failed");
  Writer w{a.get(), &sink};
  // pax: no limit on name length or file size; readers that know only ustar still read the plain entries.
  archive_write_set_format_pax_restricted(a.get());
  archive_write_set_bytes_in_last_block(a.get(), 1);
  if (archive_write_open(a.get(), &w, nullptr, &Writer::write, nullptr) != ARCHIVE_OK) return w.fail("open");
  TRY(w.tree(agent, dir, baseName(dir), top));
  if (archive_write_close(a.get()) != ARCHIVE_OK) return w.fail("close");
  return ok();
}

Result<ExtractCounts> extractTreeArchive(agent::AgentClient& agent, const std::string& dir, const TarSource& source) {
  ReadArchive a(archive_read_new());
  if (!a) return makeError(ErrorKind::kInternal, "archive_read_new failed");
  archive_read_support_format_tar(a.get());
  archive_read_support_format_gnutar(a.get());
  Reader r{&source};
  if (archive_read_open(a.get(), &r, nullptr, &Reader::read, nullptr) != ARCHIVE_OK)
    return tl::unexpected(readFailure(a.get(), r, "open").error());
  TRY(agent.mkdir(dir, true, 0755));
  std::set<std::string> made = {dir};
  auto ensureDir = [&](const std::string& path, uint32_t mode) -> Status {
    if (made.count(path)) return ok();
    TRY(agent.mkdir(path, true, mode));
    made.insert(path);
    return ok();
  };
  ExtractCounts counts;
  std::vector<char> buf(kChunk);
  for (;;) {
    archive_entry* e = nullptr;
    int rc = archive_read_next_header(a.get(), &e);
    if (rc == ARCHIVE_EOF) break;
    if (rc != ARCHIVE_OK && rc != ARCHIVE_WARN) return tl::unexpected(readFailure(a.get(), r, "header").error());
    ASSIGN_OR_RETURN(std::string name, safeEntryName(archive_entry_pathname(e) ? archive_entry_pathname(e) : ""));
    std::string target = name.empty() ? dir : joinPath(dir, name);
    auto type = archive_entry_filetype(e);
    uint32_t perm = archive_entry_perm(e) & 07777;
    if (type == AE_IFDIR) {
      TRY(ensureDir(target, perm ? perm : 0755));
      if (!name.empty()) ++counts.dirs;
      continue;
    }
    // Symlinks, hard links and devices are not made: a copy into a sandbox carries files and directories.
    if (type != AE_IFREG || archive_entry_hardlink(e) || name.empty()) {
      ++counts.skipped;
      continue;
    }
    std::string parent = target.substr(0, target.find_last_of('/'));
    TRY(ensureDir(parent.empty() ? "/" : parent, 0755));
    ASSIGN_OR_RETURN(std::unique_ptr<agent::FileWriter> writer, agent.writeFile(target, perm));
    for (;;) {
      la_ssize_t n = archive_read_data(a.get(), buf.data(), buf.size());
      if (n < 0) return tl::unexpected(readFailure(a.get(), r, "data of " + name).error());
      if (n == 0) break;
      TRY(writer->write(std::string_view(buf.data(), static_cast<size_t>(n))));
    }
    ASSIGN_OR_RETURN(uint64_t bytes, writer->finish());
    ++counts.files;
    counts.bytes += bytes;
  }
  return counts;
}

}  // namespace space::api
