// The containment checklist, in order. Ordering constraints:
//  - namespaces before mounts (mounts must land in our own namespace, never the host's);
//  - all mounts before pivot_root, which drops the host tree (and the host paths they reference);
//  - lo up and hostname while CAP_NET_ADMIN / CAP_SYS_ADMIN are still held;
//  - Landlock before dropping capabilities is fine (it needs CAP_SYS_ADMIN in our userns or no_new_privs);
//  - seccomp last: it forbids mount, unshare, … that the earlier steps use.
#include "runtime/jail/inside/contain.h"

#include "runtime/jail/inside/seccomp.h"
#include "runtime/jail/inside/steps.h"

namespace space::jail {

Status runContainment(const JailInitConfig& config, int sync_fd) {
  // Compile first: a broken policy fails the sandbox before anything else happens.
  ASSIGN_OR_RETURN(SeccompProgram seccomp, compileSeccompPolicy(config.seccomp_policy).map_error([](Error e) {
    e.context("seccomp-compile");
    return e;
  }));
  if (!seccomp.unknown_syscalls.empty()) {
    std::string names;
    for (const auto& n : seccomp.unknown_syscalls) names += " " + n;
    (void)sendMessage(sync_fd, "note seccomp policy names syscalls unknown here (denied):" + names);
  }

  struct Step {
    const char* name;
    std::function<Status()> run;
  };
  const Step steps[] = {
      {"unshare-namespaces", [] { return enterMountCgroupTimeNamespaces(); }},
      {"private-mounts", [] { return makeMountsPrivate(); }},
      {"bind-rootfs", [&] { return bindRootfs(config); }},
      {"mount-proc", [&] { return mountProc(config); }},
      {"build-dev", [&] { return buildDev(config); }},
      {"mask-proc", [&] { return maskProc(config); }},
      {"pivot-root", [&] { return pivotIntoRoot(config); }},
      {"report-mounted", [&] { return sendMessage(sync_fd, "mounted"); }},
      {"hostname", [&] { return setHostname(config); }},
      {"loopback-up", [] { return bringUpLoopback(); }},
      {"rlimits", [&] { return setResourceLimits(config); }},
      {"landlock",
       [&]() -> Status {
         ASSIGN_OR_RETURN(std::string skipped, applyLandlock());
         if (!skipped.empty()) (void)sendMessage(sync_fd, "note landlock skipped: " + skipped);
         return ok();
       }},
      {"drop-capabilities", [] { return dropCapabilities(); }},
      // no_new_privs is set inside applySeccompProgram, immediately before the filters.
      {"seccomp", [&] { return applySeccompProgram(seccomp); }},  // last
  };
  for (const Step& step : steps) {
    Status st = step.run();
    if (!st) {
      Error e = st.error();
      e.context(step.name);
      (void)sendMessage(sync_fd, formatError(step.name, e.sys_errno, e.message));
      return tl::unexpected(e);
    }
  }
  return ok();
}

}  // namespace space::jail
