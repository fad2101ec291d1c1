#include "runtime/vm/template_snapshot.h"

#include <thread>

namespace space::vm {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

Status setIgnoreShared(QmpClient& qmp) {
  TRY(qmp.execute("migrate-set-capabilities",
                  {{"capabilities", json::array({{{"capability", "x-ignore-shared"}, {"state", true}}})}}));
  return ok();
}

// Polls query-migrate: QEMU 7.2 has no blocking wait, and MIGRATION events need one more capability.
Status waitMigration(QmpClient& qmp, std::chrono::milliseconds timeout, const char* what) {
  auto deadline = Clock::now() + timeout;
  for (;;) {
    ASSIGN_OR_RETURN(json info, qmp.execute("query-migrate"));
    std::string status = info.is_object() && info.contains("status") && info["status"].is_string()
                             ? info["status"].get<std::string>()
                             : "";
    if (status == "completed") return ok();
    if (status == "failed" || status == "cancelled")
      return makeError(ErrorKind::kInternal, "{}: migration {}: {}", what, status,
                       info.value("error-desc", std::string()));
    if (Clock::now() > deadline) return makeError(ErrorKind::kUnavailable, "{}: timed out (status {})", what, status);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace

Result<std::string> shellSafePath(const std::string& path) {
  for (char c : path) {
    bool safe = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '/' || c == '.' ||
                c == '-' || c == '_';
    if (!safe) return makeError(ErrorKind::kInvalidArgument, "path not usable in a migration URI: {}", path);
  }
  if (path.empty() || path[0] != '/') return makeError(ErrorKind::kInvalidArgument, "not an absolute path: {}", path);
  return path;
}

Status saveDeviceState(QmpClient& qmp, const std::string& state_file, std::chrono::milliseconds timeout) {
  ASSIGN_OR_RETURN(std::string path, shellSafePath(state_file));
  TRY(qmp.execute("stop"));
  TRY(setIgnoreShared(qmp));
  TRY(qmp.execute("migrate", {{"uri", "exec:cat > " + path}}));
  return waitMigration(qmp, timeout, "save device state");
}

Status loadDeviceState(QmpClient& qmp, const std::string& state_file, std::chrono::milliseconds timeout) {
  ASSIGN_OR_RETURN(std::string path, shellSafePath(state_file));
  TRY(setIgnoreShared(qmp));
  TRY(qmp.execute("migrate-incoming", {{"uri", "exec:cat " + path}}));
  TRY(waitMigration(qmp, timeout, "load device state"));
  // Without -S the destination starts running by itself once the state is in; make sure.
  ASSIGN_OR_RETURN(json status, qmp.execute("query-status"));
  if (!status.value("running", false)) TRY(qmp.execute("cont"));
  return ok();
}

}  // namespace space::vm
