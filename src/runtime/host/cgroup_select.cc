// Backend choice and the small file helpers both backends share.
#include <dirent.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/unique_fd.h"
#include "runtime/host/cgroup.h"

namespace space::host {

namespace {
bool isFs(const std::string& path, long magic) {
  struct statfs st;
  return statfs(path.c_str(), &st) == 0 && st.f_type == magic;
}
bool has(const std::vector<std::string>& v, const char* name) { return std::find(v.begin(), v.end(), name) != v.end(); }
}  // namespace

CgroupProbe probeCgroups(const std::string& root) {
  CgroupProbe p;
  p.root_is_cgroup2 = isFs(root, CGROUP2_SUPER_MAGIC);
  p.v1_memory = isFs(root + "/memory", CGROUP_SUPER_MAGIC);
  p.v1_pids = isFs(root + "/pids", CGROUP_SUPER_MAGIC);
  p.v1_cpu = isFs(root + "/cpu", CGROUP_SUPER_MAGIC);
  if (p.root_is_cgroup2)
    p.unified_mount = root;
  else if (isFs(root + "/unified", CGROUP2_SUPER_MAGIC))
    p.unified_mount = root + "/unified";
  if (!p.unified_mount.empty()) {
    if (auto text = readCgroupFile(p.unified_mount + "/cgroup.controllers")) {
      std::istringstream in(*text);
      for (std::string c; in >> c;) p.unified_controllers.push_back(c);
    }
  }
  return p;
}

Result<CgroupChoice> chooseCgroupBackend(const CgroupProbe& p) {
  bool v2_ok = !p.unified_mount.empty() && has(p.unified_controllers, "memory") && has(p.unified_controllers, "pids") &&
               has(p.unified_controllers, "cpu");
  if (v2_ok) return CgroupChoice{CgroupKind::kV2, p.unified_mount};
  if (p.v1_memory && p.v1_pids && p.v1_cpu && !p.root_is_cgroup2)
    return CgroupChoice{CgroupKind::kV1, "/sys/fs/cgroup"};
  return makeError(ErrorKind::kUnsupported,
                   "no usable cgroup hierarchy: need memory, pids and cpu on cgroup2 ({}) or as v1 hierarchies",
                   p.unified_mount.empty() ? "not mounted" : p.unified_mount);
}

Result<std::unique_ptr<CgroupBackend>> makeCgroupBackend(const std::string& parent) {
  ASSIGN_OR_RETURN(CgroupChoice choice, chooseCgroupBackend(probeCgroups()));
  if (choice.kind == CgroupKind::kV2) return makeCgroupV2(choice.root, parent);
  return makeCgroupV1(choice.root, parent, probeCgroups().unified_mount);
}

Status writeCgroupFile(const std::string& path, const std::string& value) {
  UniqueFd fd(open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd) return sysError(errno, "open {}", path);
  if (write(fd.get(), value.data(), value.size()) < 0) return sysError(errno, "write '{}' to {}", value, path);
  return ok();
}

Result<std::string> readCgroupFile(const std::string& path) {
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return sysError(errno, "open {}", path);
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t n = read(fd.get(), buf, sizeof buf);
    if (n < 0) return sysError(errno, "read {}", path);
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

Result<std::vector<pid_t>> readCgroupProcs(const std::string& procs_path) {
  auto text = readCgroupFile(procs_path);
  if (!text) {
    if (text.error().sys_errno == ENOENT) return std::vector<pid_t>{};
    return tl::unexpected(text.error());
  }
  std::vector<pid_t> pids;
  std::istringstream in(*text);
  for (pid_t pid; in >> pid;) pids.push_back(pid);
  return pids;
}

Status removeCgroupDir(const std::string& path) {
  for (int attempt = 0;; ++attempt) {
    if (rmdir(path.c_str()) == 0 || errno == ENOENT) return ok();
    if (errno != EBUSY || attempt >= 200) return sysError(errno, "rmdir {}", path);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

Status waitCgroupEvent(const std::string& events_path, const std::string& want) {
  UniqueFd fd(open(events_path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return sysError(errno, "open {}", events_path);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  char buf[512];
  for (;;) {
    ssize_t n = pread(fd.get(), buf, sizeof buf - 1, 0);
    if (n < 0) return sysError(errno, "read {}", events_path);
    std::string_view text(buf, static_cast<size_t>(n));
    for (size_t pos = 0; pos < text.size();) {
      size_t nl = text.find('\n', pos);
      if (text.substr(pos, nl == std::string_view::npos ? std::string_view::npos : nl - pos) == want) return ok();
      if (nl == std::string_view::npos) break;
      pos = nl + 1;
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0)
      return makeError(ErrorKind::kUnavailable, "{} did not reach '{}': {}", events_path, want, text);
    // kernfs signals a change with POLLPRI; a 1 ms cap covers a notification that raced the read.
    pollfd pfd{fd.get(), POLLPRI, 0};
    (void)poll(&pfd, 1, static_cast<int>(std::min<int64_t>(left.count(), 1)));
  }
}

uint64_t flatKeyedValue(const std::string& text, const std::string& key) {
  std::istringstream in(text);
  for (std::string k; in >> k;) {
    uint64_t v = 0;
    in >> v;
    if (k == key) return v;
  }
  return 0;
}

std::vector<std::string> listSubdirs(const std::string& path) {
  std::vector<std::string> out;
  DIR* d = opendir(path.c_str());
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    if (e->d_type == DT_DIR && e->d_name[0] != '.') out.push_back(path + "/" + e->d_name);
  }
  closedir(d);
  return out;
}

Status waitCgroupState(const std::string& path, const std::function<bool(const std::string&)>& reached) {
  auto pause = std::chrono::microseconds(50);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  for (;;) {
    ASSIGN_OR_RETURN(std::string text, readCgroupFile(path));
    if (reached(text)) return ok();
    if (std::chrono::steady_clock::now() > deadline)
      return makeError(ErrorKind::kUnavailable, "{} did not settle: {}", path, text);
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(5000));
  }
}

}  // namespace space::host
