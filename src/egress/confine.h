// The gateway's confinement (SECURITY.md E18, docs/egress.md "Confinement"). space-egress parses what
// sandboxes send and terminates their TLS, so once it has read what only root may read (its config, the
// upstream CA bundle, the host's resolv.conf, its control socket, handed in as a descriptor), it confines
// itself before it serves anything: a mount namespace whose root is an empty tmpfs holding only its audit
// directory and /dev/null and /dev/urandom; its own unprivileged uid and gid; no capabilities in any set;
// no_new_privs; and the seccomp allow-list of policies/seccomp/egress.json, last. It needs no privilege
// after that: its ports are above 1024, and SO_ORIGINAL_DST and IP_PKTOPTIONS need none.
//
// Each step is named, so a failure says which one failed; the list reads as the checklist it is.
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

#include "common/result.h"

namespace space::egress {

struct Confinement {
  uid_t uid = 0;  // the gateway's host uid and gid; never 0
  gid_t gid = 0;
  std::string root_dir;                // an empty host directory: the mount point of its tmpfs root
  std::vector<std::string> writable;   // host directories it writes (the audit directory), same path inside
  std::vector<std::string> read_only;  // host paths it reads after the drop, same path inside
  std::vector<std::string> devices = {"/dev/null", "/dev/urandom"};
  std::string seccomp_policy;  // JSON text of policies/seccomp/egress.json
};

struct ConfineStep {
  std::string name;
  std::function<Status()> run;
};

// The ordered steps (exposed for tests: the order is part of the contract, seccomp last).
std::vector<ConfineStep> confinementSteps(const Confinement& c);

// Runs every step in order; the first failure is returned as "confine: <step>: <reason>". The caller
// must be single-threaded (a thread started earlier would keep root and no filter).
Status confineGateway(const Confinement& c);

}  // namespace space::egress
