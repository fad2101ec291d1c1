// Generations: a restore of a sandbox's memory (a fork child, a rollback) copies every process's
// userspace state, random generators included (OpenSSL's DRBG, Python's `random`, a Go or Java
// SecureRandom): reseeding the kernel RNG does not reach them, so parent and children would draw the
// same "random" bytes (one reused ECDSA nonce gives the key away). The agent tells them: it publishes a
// generation, `<counter> <id>` in /run/space/generation, that changes with every restore, and signals or
// kills the processes that were running, as the host asks (docs/snapshots.md, SECURITY.md V9).
#include <fcntl.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "agent/protocol/message.h"
#include "agent/server/paths.h"
#include "agent/server/server.h"
#include "common/hex.h"

namespace space::agent {
namespace {

constexpr const char* kGenerationDir = "run/space";  // beneath the agent's root
constexpr const char* kGenerationName = "generation";
// SIGKILLed processes are gone at once unless they sleep uninterruptibly (D state, a dead disk): the
// agent waits this long for them before answering, so the host's next process list shows them exited.
constexpr auto kKillWait = std::chrono::seconds(2);

Result<std::string> freshGenerationId() {
  unsigned char id[16];
  // After set_identity's reseed the kernel RNG is this sandbox's own, so the id differs between siblings.
  if (getrandom(id, sizeof id, 0) != static_cast<ssize_t>(sizeof id)) return sysError(errno, "getrandom");
  return toHex(id, sizeof id);
}

Status makeDirIn(int dir_fd, const char* name) {
  if (mkdirat(dir_fd, name, 0755) < 0 && errno != EEXIST) return sysError(errno, "mkdir {}", name);
  return ok();
}

}  // namespace

Result<RestoreAction> parseRestoreAction(const json& spec) {
  if (!spec.is_object()) return makeError(ErrorKind::kInvalidArgument, "generation must be an object");
  RestoreAction action;
  std::string processes = protocol::optString(spec, "processes");
  if (processes == "signal")
    action.mode = RestoreAction::kSignal;
  else if (processes == "kill")
    action.mode = RestoreAction::kKill;
  else if (processes == "none")
    action.mode = RestoreAction::kNone;
  else
    return makeError(ErrorKind::kInvalidArgument, "generation.processes must be signal, kill or none");
  action.signal = static_cast<int>(protocol::optInt(spec, "signal", SIGURG));
  if (action.signal < 1 || action.signal >= NSIG)
    return makeError(ErrorKind::kInvalidArgument, "generation.signal must be a signal number from 1 to {}", NSIG - 1);
  return action;
}

// Replaced by rename: a reader sees the old line or the new one, and a watcher of the directory gets
// IN_MOVED_TO for each new generation.
Status Server::publishGeneration() {
  if (!options_.publish_generation) return ok();
  TRY(makeDirIn(root_.get(), "run"));
  ASSIGN_OR_RETURN(UniqueFd run, openInRoot(root_.get(), "run", O_RDONLY | O_DIRECTORY));
  TRY(makeDirIn(run.get(), "space"));
  ASSIGN_OR_RETURN(UniqueFd dir, openInRoot(root_.get(), kGenerationDir, O_RDONLY | O_DIRECTORY));
  const char* tmp = ".generation.new";
  UniqueFd fd(openat(dir.get(), tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0444));
  if (!fd) return sysError(errno, "create {}/{}", kGenerationDir, tmp);
  std::string line = fmt::format("{} {}\n", generation_, generation_id_);
  if (write(fd.get(), line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
    unlinkat(dir.get(), tmp, 0);
    return sysError(errno, "write {}/{}", kGenerationDir, tmp);
  }
  fd.reset();
  if (renameat(dir.get(), tmp, dir.get(), kGenerationName) < 0) {
    unlinkat(dir.get(), tmp, 0);
    return sysError(errno, "rename {}/{}", kGenerationDir, kGenerationName);
  }
  return ok();
}

Status Server::startFirstGeneration() {
  ASSIGN_OR_RETURN(generation_id_, freshGenerationId());
  generation_ = 0;
  return publishGeneration();
}

// As PID 1 (a VM's init, a jail's pid namespace) the agent signals every process of the sandbox, also
// those that left the process groups it made (daemons): any of them may hold a copied generator.
// kill(-1) never reaches init itself, nor anything outside the caller's pid namespace. Otherwise
// (--listen, tests) only the groups of the processes the agent started.
void Server::signalEveryProcess(int signo) {
  if (options_.is_pid1) {
    kill(-1, signo);
    return;
  }
  for (auto& [key, p] : procs_) killGroup(*p, signo);
}

void Server::killEveryProcess() {
  signalEveryProcess(SIGKILL);
  auto deadline = std::chrono::steady_clock::now() + kKillWait;
  for (;;) {
    reapChildren();
    bool running = false;
    for (auto& [key, p] : procs_) running |= !p->exited;
    if (!running || std::chrono::steady_clock::now() >= deadline) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

// Called last in set_identity: the kernel RNG is reseeded and the clock set by now, so a process woken
// by the signal reseeds from fresh kernel randomness and reads the new generation.
Result<json> Server::beginGeneration(const RestoreAction& action) {
  ASSIGN_OR_RETURN(generation_id_, freshGenerationId());
  ++generation_;
  json warnings = json::array();
  if (auto st = publishGeneration(); !st) warnings.push_back(st.error().message);
  switch (action.mode) {
    case RestoreAction::kSignal:
      signalEveryProcess(action.signal);
      break;
    case RestoreAction::kKill:
      killEveryProcess();
      break;
    case RestoreAction::kNone:
      break;
  }
  return json{{"counter", generation_}, {"id", generation_id_}, {"warnings", std::move(warnings)}};
}

}  // namespace space::agent
