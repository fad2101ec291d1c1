#include "runtime/vm/template_snapshot.h"

#include <fcntl.h>
#include <unistd.h>

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
  auto pause = std::chrono::microseconds(200);
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
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(5000));
  }
}

}  // namespace

// The state travels over a descriptor handed to QEMU (getfd + fd: URI): QEMU runs under its seccomp
// sandbox with spawn=deny, so exec: URIs are impossible, and a confined VMM cannot open the template's
// files by name anyway.
Status saveDeviceState(QmpClient& qmp, const std::string& state_file, std::chrono::milliseconds timeout) {
  UniqueFd fd(open(state_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!fd) return sysError(errno, "create {}", state_file);
  TRY(qmp.execute("stop"));
  TRY(setIgnoreShared(qmp));
  TRY(qmp.passFd("state-out", fd.get()));
  TRY(qmp.execute("migrate", {{"uri", "fd:state-out"}}));
  TRY(waitMigration(qmp, timeout, "save device state"));
  if (fsync(fd.get()) < 0) return sysError(errno, "fsync {}", state_file);
  return ok();
}

Status loadDeviceState(QmpClient& qmp, const std::string& state_file, std::chrono::milliseconds timeout) {
  UniqueFd fd(open(state_file.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return sysError(errno, "open {}", state_file);
  TRY(setIgnoreShared(qmp));
  TRY(qmp.passFd("state-in", fd.get()));
  TRY(qmp.execute("migrate-incoming", {{"uri", "fd:state-in"}}));
  TRY(waitMigration(qmp, timeout, "load device state"));
  // Without -S the destination starts running by itself once the state is in; make sure.
  ASSIGN_OR_RETURN(json status, qmp.execute("query-status"));
  if (!status.value("running", false)) TRY(qmp.execute("cont"));
  return ok();
}

}  // namespace space::vm
