#include "archive/chunk_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "archive/durable_file.h"
#include "archive/format.h"
#include "common/unique_fd.h"
#include "crypto/aes_gcm.h"

namespace space::archive {
namespace {

Status makeDir(const std::string& path) {
  if (mkdir(path.c_str(), 0700) < 0 && errno != EEXIST) return sysError(errno, "create chunk store directory {}", path);
  return ok();
}

}  // namespace

std::string ChunkStore::pathOf(const std::string& dek_id, const std::string& id) const {
  return fmt::format("{}/{}/{}/{}", dir_, dek_id, id.substr(0, 2), id);
}

Result<std::optional<std::string>> ChunkStore::get(const std::string& dek_id, const std::string& id) const {
  std::string path = pathOf(dek_id, id);
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd && errno == ENOENT) return std::optional<std::string>();
  if (!fd) return sysError(errno, "open stored chunk {}", path);
  struct stat st;
  if (fstat(fd.get(), &st) < 0) return sysError(errno, "stat {}", path);
  uint64_t max_record = crypto::kGcmOverhead + kMaxChunkSize + kMaxChunkSize / 64 + 1024;
  if (!S_ISREG(st.st_mode) || static_cast<uint64_t>(st.st_size) > max_record)
    return makeError(ErrorKind::kInternal, "stored chunk {} is not a chunk record", path);
  std::string record;
  TRY(preadExact(fd.get(), 0, static_cast<size_t>(st.st_size), record, path));
  return std::optional<std::string>(std::move(record));
}

Status ChunkStore::put(const std::string& dek_id, const std::string& id, std::string_view record, bool replace) const {
  std::string path = pathOf(dek_id, id);
  if (!replace && access(path.c_str(), F_OK) == 0) return ok();
  TRY(makeDir(dir_));
  TRY(makeDir(fmt::format("{}/{}", dir_, dek_id)));
  TRY(makeDir(fmt::format("{}/{}/{}", dir_, dek_id, id.substr(0, 2))));
  auto stored = writeFileAtomic(path, record, 0600, replace);
  if (!stored && stored.error().sys_errno == EEXIST) return ok();  // stored meanwhile by another export
  return stored;
}

}  // namespace space::archive
