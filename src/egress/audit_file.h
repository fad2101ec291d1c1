// The audit log on disk: whole lines appended to `path`, which is renamed to `path.1` (replacing the
// previous one) when the next line would take it past half of the cap. The two files together stay under
// the cap plus one line, whatever the sandboxes do (SECURITY.md E19). A reader that follows `path` must
// reopen it when it is replaced; a reader of `path` alone sees only the lines since the last rotation.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/result.h"
#include "common/unique_fd.h"

namespace space::egress {

class AuditFile {
 public:
  // path "-" writes to stdout (never rotated); "" discards. max_total_bytes 0: no cap, no rotation.
  static Result<std::unique_ptr<AuditFile>> open(const std::string& path, uint64_t max_total_bytes);

  // Appends one line (with its newline). An error when it was not written; a line is never left half
  // written in the file.
  Status append(std::string_view line);

  uint64_t currentBytes() const { return size_; }
  uint64_t rotations() const { return rotations_; }
  const std::string& path() const { return path_; }

 private:
  AuditFile() = default;
  Status rotate();

  std::string path_;
  UniqueFd owned_;
  int fd_ = -1;
  bool regular_ = false;  // a file of ours (not stdout), so it can be rotated and truncated
  uint64_t cap_ = 0;
  uint64_t size_ = 0;
  uint64_t rotations_ = 0;
};

}  // namespace space::egress
