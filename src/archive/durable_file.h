// Files that appear whole or not at all: written unnamed (O_TMPFILE), fsynced, then given their final
// name by rename, and the directory fsynced. A kill -9 before commit() leaves nothing under any name.
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>

#include "common/result.h"
#include "common/unique_fd.h"

namespace space::archive {

class AtomicFile {
 public:
  // The file's directory must exist; the final name is only taken by commit().
  static Result<AtomicFile> create(std::string final_path, mode_t mode);
  AtomicFile(AtomicFile&&) = default;
  AtomicFile& operator=(AtomicFile&&) = default;
  ~AtomicFile();

  int fd() const { return fd_.get(); }
  // fsync, name the file (replacing what held final_path), fsync the directory.
  Status commit();
  // Like commit(), but fails with sys_errno EEXIST when final_path already exists.
  Status commitNoReplace();

 private:
  AtomicFile() = default;
  Status commitAs(bool replace);
  std::string final_path_, temp_path_;  // temp_path_: only on filesystems without O_TMPFILE
  UniqueFd fd_;
  bool committed_ = false;
};

Status fsyncPath(const std::string& path);  // a directory or file, opened read-only
std::string parentDir(const std::string& path);
Status writeAll(int fd, std::string_view data, const std::string& what);
Status preadExact(int fd, uint64_t offset, size_t n, std::string& out, const std::string& what);
Status writeFileAtomic(const std::string& path, std::string_view data, mode_t mode, bool replace = true);

}  // namespace space::archive
