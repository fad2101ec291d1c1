#include "store/template_sources.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <filesystem>
#include <regex>

#include "common/unique_fd.h"
#include "sys/host_command.h"
#include "sys/open_in_root.h"

namespace space::store {
namespace {

// Arguments that reach debootstrap's argv are checked against these, so none can be read as an option.
bool matches(const std::string& value, const char* pattern) { return std::regex_match(value, std::regex(pattern)); }

Status validateDebootstrap(const TemplateBuildSpec& spec) {
  if (!matches(spec.suite, "[a-z0-9][a-z0-9.-]{0,63}")) {
    return makeError(ErrorKind::kInvalidArgument, "invalid debootstrap suite '{}'", spec.suite);
  }
  if (!spec.variant.empty() && spec.variant != "minbase" && spec.variant != "buildd" && spec.variant != "fakechroot") {
    return makeError(ErrorKind::kInvalidArgument, "invalid debootstrap variant '{}' (minbase, buildd, fakechroot)",
                     spec.variant);
  }
  for (const auto& p : spec.packages) {
    // Debian policy 5.6.1: lowercase letters, digits, + - . ; at least two characters, starting alphanumeric.
    if (!matches(p, "[a-z0-9][a-z0-9+.-]{1,127}")) {
      return makeError(ErrorKind::kInvalidArgument, "invalid package name '{}'", p);
    }
  }
  if (!spec.mirror.empty() && !matches(spec.mirror, "(https?|file)://[^\\s]+")) {
    return makeError(ErrorKind::kInvalidArgument, "invalid mirror '{}' (http://, https:// or file:// URL)",
                     spec.mirror);
  }
  return ok();
}

bool hasDotDotComponent(std::string_view name) {
  size_t start = 0;
  for (;;) {
    size_t slash = name.find('/', start);
    if (name.substr(start, slash == std::string_view::npos ? std::string_view::npos : slash - start) == "..")
      return true;
    if (slash == std::string_view::npos) return false;
    start = slash + 1;
  }
}

struct SandboxDir {
  const char* name;
  mode_t mode;
  bool force_mode;  // applied even when the directory exists: programs rely on it
};
constexpr std::array<SandboxDir, 7> kSandboxDirs = {{
    {"proc", 0555, false},
    {"sys", 0555, false},
    {"dev", 0755, false},
    {"run", 0755, false},
    {"tmp", 01777, true},  // every user may create files, only the owner may delete them
    {"root", 0700, false},
    {"etc", 0755, false},
}};

// debootstrap leaves every .deb it installed in apt's cache (about 40 MiB for minbase): dead weight in
// every sandbox's template, and apt inside a sandbox downloads again anyway.
Status removeDownloadedPackages(const std::string& rootfs, const ProgressFn& progress) {
  namespace fs = std::filesystem;
  fs::path cache = fs::path(rootfs) / "var/cache/apt/archives";
  std::error_code ec;
  if (!fs::is_directory(fs::symlink_status(cache, ec))) return ok();
  uint64_t removed = 0;
  for (const auto& entry : fs::directory_iterator(cache, ec)) {
    if (entry.path().extension() != ".deb" || !entry.is_regular_file(ec) || entry.is_symlink(ec)) continue;
    removed += entry.file_size(ec);
    fs::remove(entry.path(), ec);
    if (ec) return sysError(ec.value(), "remove {}", entry.path().string());
  }
  if (ec) return sysError(ec.value(), "clean {}", cache.string());
  if (progress) progress(fmt::format("removed {} MiB of downloaded packages", removed >> 20));
  return ok();
}

}  // namespace

Status populateFromDebootstrap(const TemplateBuildSpec& spec, const std::string& rootfs, const ProgressFn& progress) {
  TRY(validateDebootstrap(spec));
  std::vector<std::string> argv = {"debootstrap"};
  if (!spec.variant.empty()) argv.push_back("--variant=" + spec.variant);
  if (!spec.packages.empty()) {
    std::string include = "--include=";
    for (size_t i = 0; i < spec.packages.size(); ++i) include += (i ? "," : "") + spec.packages[i];
    argv.push_back(include);
  }
  argv.push_back(spec.suite);
  argv.push_back(rootfs);
  if (!spec.mirror.empty()) argv.push_back(spec.mirror);
  TRY(sys::runCommand(argv, progress));
  return removeDownloadedPackages(rootfs, progress);
}

Status populateFromDir(const std::string& source_dir, const std::string& rootfs, const ProgressFn& progress) {
  if (source_dir.empty() || source_dir[0] != '/') {
    return makeError(ErrorKind::kInvalidArgument, "template directory must be an absolute path, got '{}'", source_dir);
  }
  struct stat st;
  if (::stat(source_dir.c_str(), &st) != 0) return clientSysError(errno, "template directory {}", source_dir);
  if (!S_ISDIR(st.st_mode)) return makeError(ErrorKind::kInvalidArgument, "{} is not a directory", source_dir);
  // "src/." copies the directory's contents (and its own mode and owner) into the existing rootfs.
  // --reflink=auto shares blocks on filesystems that can (xfs, btrfs) and copies elsewhere.
  return sys::runCommand({"cp", "-a", "--reflink=auto", "--", source_dir + "/.", rootfs}, progress);
}

Status populateFromTar(const std::string& tarball, const std::string& rootfs, const ProgressFn& progress) {
  if (tarball.empty() || tarball[0] != '/') {
    return makeError(ErrorKind::kInvalidArgument, "tarball must be an absolute path, got '{}'", tarball);
  }
  struct stat st;
  if (::stat(tarball.c_str(), &st) != 0) return clientSysError(errno, "tarball {}", tarball);
  if (!S_ISREG(st.st_mode)) return makeError(ErrorKind::kInvalidArgument, "{} is not a regular file", tarball);

  // GNU tar skips ".." members (exit 2) but silently strips a leading "/" and extracts the member anyway.
  // An archive with either was not made as a rootfs, so it is refused as a whole, before extraction.
  // Listing quotes control characters (--quoting-style=escape, tar's default), so one line is one member.
  std::string bad;
  auto listed = sys::runCommand({"tar", "--quoting-style=escape", "-tf", tarball}, [&](const std::string& member) {
    if (bad.empty() && (member.starts_with('/') || hasDotDotComponent(member))) bad = member;
  });
  if (!listed) {
    listed.error().kind = ErrorKind::kInvalidArgument;
    return tl::unexpected(listed.error().context(fmt::format("list tarball {}", tarball)));
  }
  if (!bad.empty()) {
    return makeError(ErrorKind::kInvalidArgument, "tarball {}: member '{}' is absolute or contains '..'", tarball, bad);
  }
  // Symlinks in the archive cannot redirect later members outside rootfs: GNU tar creates a placeholder for
  // a symlink whose target is absolute or climbs, and refuses to extract through it. Hard-link targets get
  // their leading "/" and "../" stripped, so they resolve inside rootfs.
  auto extracted = sys::runCommand(
      {"tar", "-C", rootfs, "--numeric-owner", "-p", "--xattrs", "--xattrs-include=*", "-xf", tarball}, progress);
  if (!extracted) {
    extracted.error().kind = ErrorKind::kInvalidArgument;
    return tl::unexpected(extracted.error().context(fmt::format("extract tarball {}", tarball)));
  }
  return ok();
}

Status addSandboxDirectories(const std::string& rootfs) {
  UniqueFd root(::open(rootfs.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!root) return sysError(errno, "open {}", rootfs);
  for (const auto& d : kSandboxDirs) {
    struct stat st;
    if (::fstatat(root.get(), d.name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
      if (!S_ISDIR(st.st_mode)) {
        return makeError(ErrorKind::kInvalidArgument, "template tree: /{} must be a directory, not a {}", d.name,
                         S_ISLNK(st.st_mode) ? "symlink" : "file");
      }
      if (!d.force_mode) continue;
    } else if (errno != ENOENT) {
      return sysError(errno, "stat {}/{}", rootfs, d.name);
    } else if (::mkdirat(root.get(), d.name, d.mode) != 0) {
      return sysError(errno, "mkdir {}/{}", rootfs, d.name);
    }
    // mkdirat's mode is filtered by the umask; set the intended mode explicitly.
    if (::fchmodat(root.get(), d.name, d.mode, 0) != 0) return sysError(errno, "chmod {}/{}", rootfs, d.name);
  }
  return ok();
}

Status writeTemplateHostname(const std::string& rootfs) {
  UniqueFd etc(::open((rootfs + "/etc").c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!etc)
    return errno == ENOENT || errno == ENOTDIR || errno == ELOOP ? ok() : sysError(errno, "open {}/etc", rootfs);
  // Unlinked first: a symlink named hostname in a user's tree is replaced, never followed.
  if (::unlinkat(etc.get(), "hostname", 0) != 0 && errno != ENOENT)
    return sysError(errno, "replace {}/etc/hostname", rootfs);
  UniqueFd f(::openat(etc.get(), "hostname", O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644));
  if (!f) return sysError(errno, "create {}/etc/hostname", rootfs);
  std::string text = std::string(kTemplateHostname) + "\n";
  if (::write(f.get(), text.data(), text.size()) != static_cast<ssize_t>(text.size()))
    return sysError(errno, "write {}/etc/hostname", rootfs);
  return ok();
}

namespace {

// Whether /bin/sh of the tree is an executable file. Resolved with the tree as "/": /bin/sh -> busybox or
// -> /usr/bin/dash counts when the target is in the tree, a link to a path only the host has does not.
bool hasExecutableShell(int root_fd) {
  auto sh = sys::openInRoot(root_fd, "/bin/sh", O_PATH);
  struct stat st;
  return sh && ::fstat(sh->get(), &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 0111) != 0;
}

}  // namespace

std::vector<std::string> templateWarnings(const std::string& rootfs) {
  std::vector<std::string> warnings;
  UniqueFd root(::open(rootfs.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (root && !hasExecutableShell(root.get())) {
    warnings.push_back(
        "the tree has no executable /bin/sh: shell execs (exec with \"shell\", `space run -- sh -c '...'`) and "
        "`space shell` without --cmd will fail in its sandboxes; run programs by path (exec \"cmd\": "
        "[\"/path/to/program\"]), or add a shell (busybox with /bin/sh -> busybox) and build again");
  }
  return warnings;
}

}  // namespace space::store
