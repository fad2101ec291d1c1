#include "agent/server/users.h"

#include <unistd.h>

#include <charconv>
#include <string_view>

#include "agent/server/paths.h"

namespace space::agent {
namespace {

constexpr size_t kMaxDbBytes = 4u << 20;

std::vector<std::string_view> splitFields(std::string_view line) {
  std::vector<std::string_view> f;
  size_t i = 0;
  for (;;) {
    size_t j = line.find(':', i);
    f.push_back(line.substr(i, j == std::string_view::npos ? std::string_view::npos : j - i));
    if (j == std::string_view::npos) return f;
    i = j + 1;
  }
}

bool parseId(std::string_view s, uint32_t* out) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size();
}

template <class F>
void forEachLine(const std::string& db, F f) {
  size_t i = 0;
  while (i < db.size()) {
    size_t j = db.find('\n', i);
    if (j == std::string::npos) j = db.size();
    std::string_view line(db.data() + i, j - i);
    if (!line.empty() && line[0] != '#') f(line);
    i = j + 1;
  }
}

}  // namespace

Result<UserInfo> lookupUser(int root_fd, const std::string& spec) {
  UserInfo info;
  uint32_t numeric = 0;
  bool by_id = spec.empty() || parseId(spec, &numeric);
  if (spec.empty()) numeric = geteuid();
  bool found = false;
  auto passwd = readSmallFile(root_fd, "/etc/passwd", kMaxDbBytes);
  if (passwd) {
    forEachLine(*passwd, [&](std::string_view line) {
      auto f = splitFields(line);
      uint32_t uid = 0, gid = 0;
      if (found || f.size() < 7 || !parseId(f[2], &uid) || !parseId(f[3], &gid)) return;
      if (by_id ? uid != numeric : f[0] != spec) return;
      found = true;
      info.name = std::string(f[0]);
      info.uid = uid;
      info.gid = gid;
      info.home = f[5].empty() ? "/" : std::string(f[5]);
    });
  }
  if (!found) {
    if (!by_id) return makeError(ErrorKind::kNotFound, "user \"{}\" not in /etc/passwd", spec);
    info.uid = numeric;
    info.gid = spec.empty() ? getegid() : numeric;
  }
  info.groups.push_back(info.gid);
  auto group = readSmallFile(root_fd, "/etc/group", kMaxDbBytes);
  if (group && !info.name.empty()) {
    forEachLine(*group, [&](std::string_view line) {
      auto f = splitFields(line);
      uint32_t gid = 0;
      if (f.size() < 4 || !parseId(f[2], &gid) || gid == info.gid) return;
      std::string_view members = f[3];
      size_t i = 0;
      while (i <= members.size()) {
        size_t j = members.find(',', i);
        if (j == std::string_view::npos) j = members.size();
        if (members.substr(i, j - i) == info.name) {
          info.groups.push_back(gid);
          break;
        }
        i = j + 1;
      }
    });
  }
  return info;
}

}  // namespace space::agent
