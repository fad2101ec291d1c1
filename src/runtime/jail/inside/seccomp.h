// Seccomp: the policy is reviewed data (policies/seccomp/*.json, a "reason" on every rule), compiled with
// libseccomp into classic BPF. The same code compiles it inside the agent (just before it is applied, as
// the last containment step) and in the host's tests (the golden test pins its decisions).
#pragma once

#include <linux/filter.h>

#include <string>
#include <vector>

#include "common/result.h"

namespace space::jail {

// One or more BPF programs, applied in order. The kernel runs every installed filter and keeps the most
// restrictive verdict, which lets an allow-list (default: deny) be combined with argument-specific denials
// of otherwise allowed calls (ioctl TIOCSTI): libseccomp refuses a rule whose action equals its filter's
// default, so such rules go into a second filter whose default is "allow".
struct SeccompProgram {
  std::vector<std::vector<sock_filter>> filters;
  std::vector<std::string> unknown_syscalls;  // named in the policy, unknown to this libseccomp/arch: denied
};

// Parses and compiles a policy (JSON text). Fails on any malformed rule, unknown action or missing reason.
Result<SeccompProgram> compileSeccompPolicy(const std::string& policy_json);

// Installs the filters on the calling thread (and so on every future child). Sets no_new_privs first, which
// the kernel requires for an unprivileged filter install.
Status applySeccompProgram(const SeccompProgram& program);

}  // namespace space::jail
