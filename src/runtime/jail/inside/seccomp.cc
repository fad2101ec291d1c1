#include "runtime/jail/inside/seccomp.h"

#include <linux/seccomp.h>
#include <seccomp.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <memory>
#include <nlohmann/json.hpp>

#include "common/unique_fd.h"

namespace space::jail {

namespace {

using Json = nlohmann::json;

struct CtxDeleter {
  void operator()(void* ctx) const { seccomp_release(ctx); }
};
using ScmpCtx = std::unique_ptr<void, CtxDeleter>;

Result<int> errnoByName(const std::string& name) {
  static const std::pair<const char*, int> kNames[] = {
      {"EPERM", EPERM}, {"ENOSYS", ENOSYS}, {"EACCES", EACCES}, {"EINVAL", EINVAL}, {"ENOTTY", ENOTTY}};
  for (const auto& [n, v] : kNames)
    if (name == n) return v;
  return makeError(ErrorKind::kInvalidArgument, "seccomp policy: unknown errno {}", name);
}

// "allow" | "errno:ENAME" | "kill_process" → libseccomp action.
Result<uint32_t> parseAction(const std::string& action) {
  if (action == "allow") return SCMP_ACT_ALLOW;
  if (action == "kill_process") return SCMP_ACT_KILL_PROCESS;
  if (action.rfind("errno:", 0) == 0) {
    ASSIGN_OR_RETURN(int err, errnoByName(action.substr(6)));
    return SCMP_ACT_ERRNO(static_cast<uint16_t>(err));
  }
  return makeError(ErrorKind::kInvalidArgument, "seccomp policy: unknown action '{}'", action);
}

Result<scmp_compare> parseOp(const std::string& op) {
  if (op == "eq") return SCMP_CMP_EQ;
  if (op == "ne") return SCMP_CMP_NE;
  if (op == "lt") return SCMP_CMP_LT;
  if (op == "le") return SCMP_CMP_LE;
  if (op == "gt") return SCMP_CMP_GT;
  if (op == "ge") return SCMP_CMP_GE;
  if (op == "masked_eq") return SCMP_CMP_MASKED_EQ;
  return makeError(ErrorKind::kInvalidArgument, "seccomp policy: unknown op '{}'", op);
}

Result<std::vector<scmp_arg_cmp>> parseArgs(const Json& rule) {
  std::vector<scmp_arg_cmp> out;
  if (!rule.contains("args")) return out;
  for (const Json& a : rule.at("args")) {
    ASSIGN_OR_RETURN(scmp_compare op, parseOp(a.at("op").get<std::string>()));
    scmp_arg_cmp cmp{};
    cmp.arg = a.at("index").get<unsigned>();
    cmp.op = op;
    // masked_eq: datum_a is the mask, datum_b the value compared with (arg & mask).
    if (op == SCMP_CMP_MASKED_EQ) {
      cmp.datum_a = a.at("mask").get<uint64_t>();
      cmp.datum_b = a.at("value").get<uint64_t>();
    } else {
      cmp.datum_a = a.at("value").get<uint64_t>();
    }
    if (cmp.arg > 5) return makeError(ErrorKind::kInvalidArgument, "seccomp policy: arg index {} > 5", cmp.arg);
    out.push_back(cmp);
  }
  return out;
}

// libseccomp 2.5 can only export into an fd; a memfd keeps it in memory.
Result<std::vector<sock_filter>> exportBpf(void* ctx) {
  UniqueFd mem(memfd_create("space-seccomp", MFD_CLOEXEC));
  if (!mem) return sysError(errno, "memfd_create");
  if (int rc = seccomp_export_bpf(ctx, mem.get()); rc < 0) return sysError(-rc, "seccomp_export_bpf");
  off_t size = lseek(mem.get(), 0, SEEK_END);
  if (size < 0 || size % sizeof(sock_filter) != 0) return sysError(EINVAL, "exported BPF size {}", size);
  std::vector<sock_filter> prog(size / sizeof(sock_filter));
  if (pread(mem.get(), prog.data(), size, 0) != size) return sysError(errno, "read exported BPF");
  return prog;
}

Result<ScmpCtx> newCtx(uint32_t default_action) {
  ScmpCtx ctx(seccomp_init(default_action));
  if (!ctx) return makeError(ErrorKind::kInternal, "seccomp_init failed");
  // We set no_new_privs ourselves, right before installing (applySeccompProgram).
  seccomp_attr_set(ctx.get(), SCMP_FLTATR_CTL_NNP, 0);
  // Syscalls through a foreign ABI (i386 int 0x80, x32) would bypass every rule: kill the process.
  seccomp_attr_set(ctx.get(), SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
  return ctx;
}

}  // namespace

Result<SeccompProgram> compileSeccompPolicy(const std::string& policy_json) {
  Json policy = Json::parse(policy_json, nullptr, /*allow_exceptions=*/false);
  if (policy.is_discarded() || !policy.is_object())
    return makeError(ErrorKind::kInvalidArgument, "seccomp policy: not a JSON object");
  if (!policy.contains("default_action") || !policy.contains("rules"))
    return makeError(ErrorKind::kInvalidArgument, "seccomp policy: needs default_action and rules");
  ASSIGN_OR_RETURN(uint32_t default_action, parseAction(policy["default_action"].get<std::string>()));
  ASSIGN_OR_RETURN(ScmpCtx main, newCtx(default_action));
  ASSIGN_OR_RETURN(ScmpCtx overlay, newCtx(SCMP_ACT_ALLOW));
  bool overlay_used = false;
  SeccompProgram out;
  try {
    for (const Json& rule : policy["rules"]) {
      if (!rule.contains("reason") || rule["reason"].get<std::string>().empty())
        return makeError(ErrorKind::kInvalidArgument, "seccomp policy: rule without a reason: {}", rule.dump());
      ASSIGN_OR_RETURN(uint32_t action, parseAction(rule.at("action").get<std::string>()));
      ASSIGN_OR_RETURN(auto args, parseArgs(rule));
      // A rule that repeats the default action narrows an otherwise allowed call: it belongs in the overlay.
      void* ctx = main.get();
      if (action == default_action) {
        ctx = overlay.get();
        overlay_used = true;
      }
      for (const Json& name_json : rule.at("syscalls")) {
        std::string name = name_json.get<std::string>();
        int nr = seccomp_syscall_resolve_name(name.c_str());
        if (nr == __NR_SCMP_ERROR) {
          out.unknown_syscalls.push_back(name);
          continue;
        }
        int rc = seccomp_rule_add_array(ctx, action, nr, args.size(), args.data());
        if (rc < 0) return sysError(-rc, "seccomp_rule_add({}, action={})", name, rule.at("action").dump());
      }
    }
  } catch (const Json::exception& e) {
    return makeError(ErrorKind::kInvalidArgument, "seccomp policy: {}", e.what());
  }
  ASSIGN_OR_RETURN(auto main_prog, exportBpf(main.get()));
  out.filters.push_back(std::move(main_prog));
  if (overlay_used) {
    ASSIGN_OR_RETURN(auto overlay_prog, exportBpf(overlay.get()));
    out.filters.push_back(std::move(overlay_prog));
  }
  return out;
}

Status applySeccompProgram(const SeccompProgram& program) {
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) return sysError(errno, "prctl(PR_SET_NO_NEW_PRIVS)");
  for (const auto& filter : program.filters) {
    sock_fprog prog{};
    prog.len = static_cast<unsigned short>(filter.size());
    prog.filter = const_cast<sock_filter*>(filter.data());
    if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) < 0)
      return sysError(errno, "prctl(PR_SET_SECCOMP, {} instructions)", filter.size());
  }
  return ok();
}

}  // namespace space::jail
