// Users inside the sandbox, read from <root>/etc/passwd and <root>/etc/group (never through NSS: the
// agent is static and the host's databases are not the sandbox's).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "common/result.h"

namespace space::agent {

struct UserInfo {
  std::string name;  // empty when the uid has no passwd entry
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;  // supplementary groups, primary included
  std::string home = "/";
};

// spec: a user name, a numeric uid, or "" for the agent's own uid.
Result<UserInfo> lookupUser(int root_fd, const std::string& spec);

}  // namespace space::agent
