// Capabilities: the agent is root inside its user namespace, which means a full capability set over the
// sandbox's namespaces. Keep only what it needs to run commands as other users and manage their files;
// everything that reaches kernel-global state, devices or other processes' memory goes (J1).
#include <linux/capability.h>
#include <sys/capability.h>
#include <sys/prctl.h>

#include <vector>

#include "runtime/jail/inside/steps.h"

namespace space::jail {

namespace {
// What stays. CAP_SETPCAP lets the agent shrink the sets further for the commands it starts.
const std::vector<cap_value_t> kKeptCaps = {
    CAP_CHOWN,  CAP_DAC_OVERRIDE, CAP_FOWNER,           CAP_FSETID,     CAP_KILL,        CAP_SETGID,
    CAP_SETUID, CAP_SETPCAP,      CAP_NET_BIND_SERVICE, CAP_SYS_CHROOT, CAP_AUDIT_WRITE, CAP_SETFCAP,
};

bool kept(cap_value_t cap) {
  for (cap_value_t k : kKeptCaps)
    if (k == cap) return true;
  return false;
}
}  // namespace

Status dropCapabilities() {
  // Bounding set first (needs CAP_SETPCAP, which we keep): no later execve of a file with capabilities
  // can regain a dropped one.
  for (cap_value_t cap = 0; cap <= CAP_LAST_CAP; ++cap) {
    if (kept(cap)) continue;
    if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 && errno != EINVAL)
      return sysError(errno, "prctl(PR_CAPBSET_DROP, {})", cap);
  }
  if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL)
    return sysError(errno, "prctl(PR_CAP_AMBIENT_CLEAR_ALL)");
  cap_t caps = cap_init();  // all clear
  if (!caps) return sysError(errno, "cap_init");
  cap_set_flag(caps, CAP_EFFECTIVE, kKeptCaps.size(), kKeptCaps.data(), CAP_SET);
  cap_set_flag(caps, CAP_PERMITTED, kKeptCaps.size(), kKeptCaps.data(), CAP_SET);
  int rc = cap_set_proc(caps);
  int err = errno;
  cap_free(caps);
  if (rc < 0) return sysError(err, "cap_set_proc(kept set)");
  return ok();
}

}  // namespace space::jail
