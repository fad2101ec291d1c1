#include "store/tree_hash.h"

#include <dirent.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "common/hex.h"
#include "common/unique_fd.h"

namespace space::store {
namespace {

struct MdCtxFree {
  void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
};
using MdCtx = std::unique_ptr<EVP_MD_CTX, MdCtxFree>;

Result<MdCtx> newSha256() {
  MdCtx ctx(EVP_MD_CTX_new());
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1) {
    return makeError(ErrorKind::kInternal, "EVP_DigestInit_ex(sha256) failed");
  }
  return ctx;
}

std::string finishHex(EVP_MD_CTX* ctx) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx, digest, &len);
  return toHex(digest, len);
}

Result<std::string> hashFileContents(int dirfd, const std::string& name, const std::string& rel) {
  UniqueFd fd(::openat(dirfd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) return sysError(errno, "open {}", rel);
  ASSIGN_OR_RETURN(auto ctx, newSha256());
  std::vector<char> buf(1 << 16);
  for (;;) {
    ssize_t n = ::read(fd.get(), buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return sysError(errno, "read {}", rel);
    if (n == 0) break;
    EVP_DigestUpdate(ctx.get(), buf.data(), static_cast<size_t>(n));
  }
  return finishHex(ctx.get());
}

// Sorted "name=hexvalue" list of the entry's extended attributes, read without following symlinks.
Result<std::vector<std::string>> readXattrs(const std::string& path, const std::string& rel) {
  std::vector<std::string> out;
  ssize_t size = ::llistxattr(path.c_str(), nullptr, 0);
  if (size < 0 && (errno == ENOTSUP || errno == EPERM)) return out;
  if (size < 0) return sysError(errno, "llistxattr {}", rel);
  if (size == 0) return out;
  std::string names(static_cast<size_t>(size), '\0');
  size = ::llistxattr(path.c_str(), names.data(), names.size());
  if (size < 0) return sysError(errno, "llistxattr {}", rel);
  names.resize(static_cast<size_t>(size));
  for (size_t pos = 0; pos < names.size();) {
    std::string name = names.c_str() + pos;
    pos += name.size() + 1;
    if (name.empty()) continue;
    ssize_t vsize = ::lgetxattr(path.c_str(), name.c_str(), nullptr, 0);
    if (vsize < 0) return sysError(errno, "lgetxattr {} {}", rel, name);
    std::string value(static_cast<size_t>(vsize), '\0');
    vsize = ::lgetxattr(path.c_str(), name.c_str(), value.data(), value.size());
    if (vsize < 0) return sysError(errno, "lgetxattr {} {}", rel, name);
    value.resize(static_cast<size_t>(vsize));
    out.push_back(name + "=" + toHex(reinterpret_cast<const unsigned char*>(value.data()), value.size()));
  }
  std::sort(out.begin(), out.end());
  return out;
}

class Walker {
 public:
  Walker(std::string root, EVP_MD_CTX* manifest) : root_(std::move(root)), manifest_(manifest) {}

  // One manifest record per entry: NUL-separated fields (no field can contain NUL; xattr values are hex),
  // a type-specific field count, then a newline.
  Status visit(int dirfd, const std::string& name, const std::string& rel) {
    struct stat st;
    if (::fstatat(dirfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return sysError(errno, "stat {}", rel);
    ++digest_.entries;
    std::vector<std::string> fields = {rel, "", fmt::format("{:o}", st.st_mode & 07777), std::to_string(st.st_uid),
                                       std::to_string(st.st_gid)};
    switch (st.st_mode & S_IFMT) {
      case S_IFREG: {
        fields[1] = "f";
        auto key = std::pair(st.st_dev, st.st_ino);
        if (st.st_nlink > 1) {
          auto [it, first] = first_link_.emplace(key, rel);
          // The walk order is fixed, so "the first path seen" is the same for equal trees.
          if (!first) {
            fields.push_back("hardlink");
            fields.push_back(it->second);
            break;
          }
        }
        ASSIGN_OR_RETURN(std::string sha, hashFileContents(dirfd, name, rel));
        fields.push_back(std::to_string(st.st_size));
        fields.push_back(sha);
        digest_.size_bytes += static_cast<uint64_t>(st.st_size);
        break;
      }
      case S_IFDIR:
        fields[1] = "d";
        break;
      case S_IFLNK: {
        fields[1] = "l";
        std::string target(static_cast<size_t>(st.st_size) + 1, '\0');
        ssize_t n = ::readlinkat(dirfd, name.c_str(), target.data(), target.size());
        if (n < 0) return sysError(errno, "readlink {}", rel);
        target.resize(static_cast<size_t>(n));
        fields.push_back(target);
        break;
      }
      case S_IFCHR:
      case S_IFBLK:
        fields[1] = S_ISCHR(st.st_mode) ? "c" : "b";
        fields.push_back(std::to_string(major(st.st_rdev)));
        fields.push_back(std::to_string(minor(st.st_rdev)));
        break;
      case S_IFIFO:
        fields[1] = "p";
        break;
      case S_IFSOCK:
        fields[1] = "s";
        break;
      default:
        return makeError(ErrorKind::kInvalidArgument, "{}: unknown file type {:o}", rel, st.st_mode & S_IFMT);
    }
    ASSIGN_OR_RETURN(auto xattrs, readXattrs(rel == "." ? root_ : root_ + "/" + rel, rel));
    fields.push_back(std::to_string(xattrs.size()));
    fields.insert(fields.end(), xattrs.begin(), xattrs.end());
    for (const auto& f : fields) EVP_DigestUpdate(manifest_, f.c_str(), f.size() + 1);  // with its NUL
    EVP_DigestUpdate(manifest_, "\n", 1);

    if (S_ISDIR(st.st_mode)) {
      UniqueFd sub(::openat(dirfd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (!sub) return sysError(errno, "open directory {}", rel);
      TRY(walkChildren(std::move(sub), rel));
    }
    return ok();
  }

  TreeDigest finish() {
    digest_.hex = finishHex(manifest_);
    return digest_;
  }

 private:
  Status walkChildren(UniqueFd dirfd, const std::string& rel) {
    // fdopendir takes the descriptor; iterate a duplicate so dirfd stays usable for the *at() calls.
    int dup = ::fcntl(dirfd.get(), F_DUPFD_CLOEXEC, 0);
    if (dup < 0) return sysError(errno, "dup directory fd of {}", rel);
    std::unique_ptr<DIR, int (*)(DIR*)> dir(::fdopendir(dup), ::closedir);
    if (!dir) {
      int err = errno;
      ::close(dup);
      return sysError(err, "opendir {}", rel);
    }
    std::vector<std::string> names;
    errno = 0;
    while (dirent* e = ::readdir(dir.get())) {
      std::string_view n = e->d_name;
      if (n != "." && n != "..") names.emplace_back(n);
      errno = 0;
    }
    if (errno != 0) return sysError(errno, "readdir {}", rel);
    std::sort(names.begin(), names.end());
    for (const auto& n : names) TRY(visit(dirfd.get(), n, rel == "." ? n : rel + "/" + n));
    return ok();
  }

  std::string root_;
  EVP_MD_CTX* manifest_;
  TreeDigest digest_;
  std::map<std::pair<dev_t, ino_t>, std::string> first_link_;
};

}  // namespace

Result<TreeDigest> hashTree(const std::string& root) {
  UniqueFd root_fd(::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!root_fd) return sysError(errno, "open tree {}", root);
  ASSIGN_OR_RETURN(auto manifest, newSha256());
  Walker walker(root, manifest.get());
  // The root is visited as "." through its own descriptor, so its mode and owner are part of the hash.
  auto walked = walker.visit(root_fd.get(), ".", ".");
  if (!walked) return tl::unexpected(walked.error().context(fmt::format("hash tree {}", root)));
  return walker.finish();
}

}  // namespace space::store
