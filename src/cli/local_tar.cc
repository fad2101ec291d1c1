#include "cli/local_tar.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <vector>

#include "common/defer.h"
#include "common/unique_fd.h"

namespace space::cli {
namespace {

namespace fs = std::filesystem;

struct WriteFree {
  void operator()(struct archive* a) const { archive_write_free(a); }
};
struct ReadFree {
  void operator()(struct archive* a) const { archive_read_free(a); }
};
struct EntryFree {
  void operator()(archive_entry* e) const { archive_entry_free(e); }
};

tl::unexpected<Error> archiveError(struct archive* a, const std::string& what) {
  const char* msg = archive_error_string(a);
  return makeError(ErrorKind::kInvalidArgument, "{}: {}", what, msg ? msg : "archive error");
}

Status addLocalEntry(struct archive* a, const fs::path& path, const std::string& name) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return clientSysError(errno, "lstat {}", path.string());
  mode_t type = st.st_mode & S_IFMT;
  if (type != S_IFREG && type != S_IFDIR && type != S_IFLNK) return ok();  // sockets, fifos, devices
  std::unique_ptr<archive_entry, EntryFree> e(archive_entry_new());
  archive_entry_set_pathname(e.get(), name.c_str());
  archive_entry_copy_stat(e.get(), &st);
  if (type != S_IFREG) archive_entry_set_size(e.get(), 0);
  std::string link;
  if (type == S_IFLNK) {
    std::error_code ec;
    link = fs::read_symlink(path, ec).string();
    if (ec) return makeError(ErrorKind::kInternal, "readlink {}: {}", path.string(), ec.message());
    archive_entry_set_symlink(e.get(), link.c_str());
  }
  UniqueFd fd;
  if (type == S_IFREG) {
    fd = UniqueFd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) return clientSysError(errno, "open {}", path.string());
  }
  if (archive_write_header(a, e.get()) != ARCHIVE_OK) return archiveError(a, "tar header of " + path.string());
  if (type != S_IFREG) return ok();
  std::vector<char> buf(64 * 1024);
  int64_t left = st.st_size;
  while (left > 0) {
    ssize_t n = ::read(fd.get(), buf.data(), std::min<size_t>(buf.size(), static_cast<size_t>(left)));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return clientSysError(errno, "read {}", path.string());
    if (n == 0) return makeError(ErrorKind::kConflict, "{} shrank while it was copied", path.string());
    if (archive_write_data(a, buf.data(), static_cast<size_t>(n)) < 0) return archiveError(a, "tar data");
    left -= n;
  }
  return ok();
}

// "dir/a/b" -> "a/b" with strip_top; "" for the top directory itself.
std::string destinationName(const std::string& name, bool strip_top) {
  std::string n = name;
  while (n.starts_with("./")) n.erase(0, 2);
  if (!strip_top) return n == "." ? "" : n;
  size_t slash = n.find('/');
  return slash == std::string::npos ? "" : n.substr(slash + 1);
}

}  // namespace

Status packLocalTree(const std::string& root, int fd) {
  std::unique_ptr<struct archive, WriteFree> a(archive_write_new());
  archive_write_set_format_pax_restricted(a.get());
  archive_write_set_bytes_in_last_block(a.get(), 1);
  if (archive_write_open_fd(a.get(), fd) != ARCHIVE_OK) return archiveError(a.get(), "tar");
  std::error_code ec;
  // Directories come before what they hold; directory symlinks are archived, never followed.
  for (auto it = fs::recursive_directory_iterator(root, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    TRY(addLocalEntry(a.get(), it->path(), it->path().lexically_relative(root).string()));
  }
  if (ec) return makeError(ErrorKind::kInvalidArgument, "read directory {}: {}", root, ec.message());
  if (archive_write_close(a.get()) != ARCHIVE_OK) return archiveError(a.get(), "tar");
  return ok();
}

Result<UnpackCounts> unpackTree(int fd, const std::string& dest, bool strip_top) {
  std::error_code ec;
  fs::create_directories(dest, ec);
  if (ec) return makeError(ErrorKind::kInvalidArgument, "create {}: {}", dest, ec.message());
  // Entries are made relative to dest, so the secure flags below judge only the archive's own names.
  UniqueFd cwd(::open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!cwd) return clientSysError(errno, "open the working directory");
  if (::chdir(dest.c_str()) != 0) return clientSysError(errno, "chdir {}", dest);
  Defer back([&] { (void)::fchdir(cwd.get()); });

  std::unique_ptr<struct archive, ReadFree> in(archive_read_new());
  archive_read_support_format_tar(in.get());
  archive_read_support_format_gnutar(in.get());
  if (archive_read_open_fd(in.get(), fd, 64 * 1024) != ARCHIVE_OK) return archiveError(in.get(), "tar from the daemon");
  std::unique_ptr<struct archive, WriteFree> out(archive_write_disk_new());
  archive_write_disk_set_options(out.get(), ARCHIVE_EXTRACT_TIME | ARCHIVE_EXTRACT_SECURE_SYMLINKS |
                                                ARCHIVE_EXTRACT_SECURE_NODOTDOT |
                                                ARCHIVE_EXTRACT_SECURE_NOABSOLUTEPATHS);
  UnpackCounts counts;
  for (;;) {
    archive_entry* e = nullptr;
    int rc = archive_read_next_header(in.get(), &e);
    if (rc == ARCHIVE_EOF) break;
    if (rc != ARCHIVE_OK && rc != ARCHIVE_WARN) return archiveError(in.get(), "tar from the daemon");
    std::string name = destinationName(archive_entry_pathname(e) ? archive_entry_pathname(e) : "", strip_top);
    auto type = archive_entry_filetype(e);
    if (name.empty() || archive_entry_hardlink(e) || (type != AE_IFREG && type != AE_IFDIR && type != AE_IFLNK))
      continue;
    archive_entry_set_pathname(e, name.c_str());
    if (archive_write_header(out.get(), e) != ARCHIVE_OK) return archiveError(out.get(), name);
    const void* block = nullptr;
    size_t size = 0;
    la_int64_t offset = 0;
    while ((rc = archive_read_data_block(in.get(), &block, &size, &offset)) == ARCHIVE_OK) {
      if (archive_write_data_block(out.get(), block, size, offset) != ARCHIVE_OK) return archiveError(out.get(), name);
    }
    if (rc != ARCHIVE_EOF) return archiveError(in.get(), name);
    if (archive_write_finish_entry(out.get()) != ARCHIVE_OK) return archiveError(out.get(), name);
    ++counts.entries;
  }
  return counts;
}

}  // namespace space::cli
