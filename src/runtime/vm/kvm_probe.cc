#include "runtime/vm/kvm_probe.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <linux/kvm.h>
#include <openssl/evp.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/hex.h"
#include "common/unique_fd.h"
#include "runtime/vm/launch.h"

namespace space::vm {

using nlohmann::json;

const char* kvmStateName(KvmState state) {
  switch (state) {
    case KvmState::kProven:
      return "proven";
    case KvmState::kFailed:
      return "failed";
    case KvmState::kProbing:
      return "probing";
    case KvmState::kAbsent:
      return "absent";
    case KvmState::kOff:
      return "off";
  }
  return "failed";
}

json KvmVerdict::toJson() const {
  json j = {{"state", kvmStateName(state)}, {"usable", usable()}, {"cached", cached}};
  if (!reason.empty()) j["reason"] = reason;
  if (!checked_at.empty()) j["checked_at"] = checked_at;
  if (probe_ms) j["probe_ms"] = probe_ms;
  return j;
}

std::optional<KvmVerdict> KvmVerdict::fromJson(const json& j) {
  if (!j.is_object() || !j.contains("state") || !j["state"].is_string()) return std::nullopt;
  KvmVerdict v;
  std::string s = j["state"];
  if (s == "proven")
    v.state = KvmState::kProven;
  else if (s == "failed")
    v.state = KvmState::kFailed;
  else
    return std::nullopt;  // only probe outcomes are cached
  v.reason = j.value("reason", "");
  v.checked_at = j.value("checked_at", "");
  v.probe_ms = j.value("probe_ms", int64_t{0});
  return v;
}

std::string isoNowUtc() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::optional<KvmVerdict> kvmPreflight(const std::string& node) {
  KvmVerdict v;
  v.state = KvmState::kFailed;
  v.checked_at = isoNowUtc();
  struct stat st;
  if (stat(node.c_str(), &st) < 0) {
    v.state = errno == ENOENT ? KvmState::kAbsent : KvmState::kFailed;
    v.reason = errno == ENOENT ? node + " absent" : fmt::format("stat {}: {}", node, std::strerror(errno));
    return v;
  }
  if (!S_ISCHR(st.st_mode)) {
    v.reason = node + " is not a character device";
    return v;
  }
  UniqueFd fd(open(node.c_str(), O_RDWR | O_CLOEXEC));
  if (!fd) {
    v.reason = errno == EACCES || errno == EPERM
                   ? fmt::format("permission denied opening {} read-write (a nodev mount, or a security module)", node)
                   : fmt::format("open {}: {}", node, std::strerror(errno));
    return v;
  }
  int version = ioctl(fd.get(), KVM_GET_API_VERSION, 0);
  if (version != KVM_API_VERSION) {
    v.reason = version < 0 ? fmt::format("{}: KVM_GET_API_VERSION: {}", node, std::strerror(errno))
                           : fmt::format("{} speaks KVM API {}, not {}", node, version, KVM_API_VERSION);
    return v;
  }
  return std::nullopt;
}

namespace {

std::string firstLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// A file's identity for the key: its real path, size and modification time.
std::string fileIdentity(const std::string& path) {
  std::string real = findQemuBinary(path).value_or(path);
  char buf[PATH_MAX];
  if (::realpath(real.c_str(), buf)) real = buf;
  struct stat st;
  if (stat(real.c_str(), &st) < 0) return real + ":missing";
  return fmt::format("{}:{}:{}.{}", real, st.st_size, st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
}

}  // namespace

std::string kvmProbeKey(const std::string& qemu, const std::string& kernel, const std::string& initrd) {
  utsname u{};
  uname(&u);
  std::string material =
      fmt::format("boot={}|host={} {}|qemu={}|kernel={}|initrd={}", firstLine("/proc/sys/kernel/random/boot_id"),
                  u.release, u.version, fileIdentity(qemu), fileIdentity(kernel), fileIdentity(initrd));
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned len = 0;
  EVP_Digest(material.data(), material.size(), md, &len, EVP_sha256(), nullptr);
  return toHex(md, 16);
}

std::string KvmProbeCache::pathOf(const std::string& key, const char* suffix) const {
  return dir_ + "/" + key + suffix;
}

std::optional<KvmVerdict> KvmProbeCache::read(const std::string& key) const {
  std::ifstream in(pathOf(key, ".json"));
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  json j = json::parse(ss.str(), nullptr, false);
  if (j.is_discarded()) return std::nullopt;  // a torn or foreign file: probe again
  auto v = KvmVerdict::fromJson(j);
  if (v) v->cached = true;
  return v;
}

Status KvmProbeCache::write(const std::string& key, const KvmVerdict& verdict) const {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec) return makeError(ErrorKind::kInternal, "create {}: {}", dir_, ec.message());
  std::string tmp = pathOf(key, ".json.tmp");
  {
    std::ofstream out(tmp, std::ios::trunc);
    json j = verdict.toJson();
    j.erase("cached");
    out << j.dump() << "\n";
    if (!out) return makeError(ErrorKind::kInternal, "write {}", tmp);
  }
  if (rename(tmp.c_str(), pathOf(key, ".json").c_str()) < 0) return sysError(errno, "rename {}", tmp);
  return ok();
}

KvmProbeCache::Lock::~Lock() {
  if (fd_ >= 0) close(fd_);
}

Result<KvmProbeCache::Lock> KvmProbeCache::lock(const std::string& key) const {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec) return makeError(ErrorKind::kInternal, "create {}: {}", dir_, ec.message());
  chmod(dir_.c_str(), 0700);
  std::string path = pathOf(key, ".lock");
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return sysError(errno, "open {}", path);
  while (flock(fd, LOCK_EX) < 0) {
    if (errno != EINTR) {
      int err = errno;
      close(fd);
      return sysError(err, "lock {}", path);
    }
  }
  return Lock(fd);
}

}  // namespace space::vm
