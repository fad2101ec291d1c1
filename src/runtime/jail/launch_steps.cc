// The host side of a jail's launch. Ordering constraints:
//  - the layer (disk, clone or mount) and the cgroup exist before the init, so that every later failure
//    finds them recorded and destroy() takes them back;
//  - the init is spawned before the id maps, its cgroup and its root: all three name its pid, and it
//    waits for the go byte until they are done;
//  - its network link goes into the network namespace it waits in, also before the go byte;
//  - the go byte and the init's config are sent last: from then on the init contains itself
//    (inside/contain.cc) and reports each step back over the sync channel.
#include "runtime/jail/launch_steps.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

#include "common/defer.h"
#include "runtime/host/cgroup.h"
#include "runtime/host/layer_volume.h"
#include "runtime/host/network.h"
#include "runtime/jail/inside/handshake.h"
#include "runtime/jail/jail_runtime.h"
#include "runtime/jail/launch.h"
#include "runtime/jail/layer_disk.h"
#include "runtime/jail/userns.h"

namespace space::jail {
namespace {

using Step = Status (*)(HostLaunch&);

struct LaunchStep {
  const char* name;
  Step run;
};

std::string layerImage(const HostLaunch& l) { return l.persisted.state["image"].get<std::string>(); }

// fresh, fork: the sandbox's directory must be new; from here on it is this sandbox's to remove.
Status claimSandboxDir(HostLaunch& l) {
  struct stat st;
  if (lstat(l.spec.dir.c_str(), &st) == 0)
    return makeError(ErrorKind::kConflict, "sandbox dir {} exists already (a leftover to destroy first?)", l.spec.dir);
  l.persisted.state["dir_created"] = true;
  return ok();
}

Status createLayer(HostLaunch& l) {
  const auto& lim = l.spec.limits;
  return createLayerDisk(l.spec.dir, layerImage(l), lim.disk_bytes, lim.disk_inodes, l.spec.uid_base, &l.device);
}

// fork: the layer is a block-sharing clone of the snapshot's, whatever its size.
Status cloneLayer(HostLaunch& l) { return cloneFile(l.base_image, layerImage(l), 0600, /*durable=*/false); }

Status mountLayer(HostLaunch& l) { return mountLayerDisk(l.spec.dir, layerImage(l), &l.device); }

// fork: the snapshot's files move to this sandbox's uid range.
Status shiftOwners(HostLaunch& l) {
  return shiftLayerOwners(l.spec.dir, l.base_uid, l.spec.uid_base, l.spec.uid_count);
}

// relaunch: only a layer from another sandbox (an imported snapshot) has files of another uid range.
Status shiftImportedOwners(HostLaunch& l) { return l.base_uid ? shiftOwners(l) : ok(); }

Status createCgroup(HostLaunch& l) {
  TRY(l.cgroups.create(l.spec.id, l.spec.limits));
  l.persisted.state["cgroup"] = l.spec.id;
  return ok();
}

Status listenAgentSocket(HostLaunch& l) {
  const std::string path = l.spec.dir + "/agent.sock";
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path) return sysError(ENAMETOOLONG, "socket path {}", path);
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) return sysError(errno, "socket(AF_UNIX)");
  unlink(path.c_str());
  if (bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) < 0) return sysError(errno, "bind {}", path);
  // Only spaced (host root) connects; sandbox code never sees this path, only the agent's fd.
  if (chmod(path.c_str(), 0600) < 0) return sysError(errno, "chmod {}", path);
  if (listen(fd.get(), 16) < 0) return sysError(errno, "listen {}", path);
  l.listen_fd = std::move(fd);
  return ok();
}

Status openSyncChannel(HostLaunch& l) {
  int pair[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) < 0) return sysError(errno, "socketpair");
  l.host_sync = UniqueFd(pair[0]);
  l.child_sync = UniqueFd(pair[1]);
  return ok();
}

Status openAgentStdio(HostLaunch& l) {
  const std::string path = l.config.agent_log_path.empty() ? "/dev/null" : l.config.agent_log_path;
  l.stdio = UniqueFd(open(path.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0600));
  if (!l.stdio) return sysError(errno, "open {}", path);
  return ok();
}

Status spawnAgent(HostLaunch& l) {
  ASSIGN_OR_RETURN(AgentChild child, spawnAgentChild(l.agent_fd, l.child_sync.get(), l.listen_fd.get(), l.stdio.get()));
  l.pid = child.pid;
  l.persisted.state["pid"] = child.pid;
  ASSIGN_OR_RETURN(uint64_t start_time, processStartTime(child.pid));
  l.persisted.state["start_time"] = start_time;
  l.child_sync.reset();  // the host must see EOF when the child dies
  return ok();
}

Status writeUidMap(HostLaunch& l) { return writeIdMaps(l.pid, l.spec.uid_base, l.spec.uid_count); }

Status joinCgroup(HostLaunch& l) { return l.cgroups.addProcess(l.persisted.state.value("cgroup", l.spec.id), l.pid); }

Status buildRoot(HostLaunch& l) { return buildRootfs(l.pid, l.spec.template_rootfs, l.spec.dir); }

// The child waits for its go byte inside its new network namespace: its link goes there now.
Status attachNewNetwork(HostLaunch& l) {
  if (!l.config.network_pool) return ok();  // a network namespace with only lo
  return attachNetwork(*l.config.network_pool, l.pid, l.persisted.state);
}

// relaunch: the sandbox's subnet and host end exist; a new link into the new namespace.
Status relinkExistingNetwork(HostLaunch& l) { return relinkNetwork(l.pid, l.persisted.state); }

Status sendInitConfig(HostLaunch& l) {
  JailInitConfig init;
  init.rootfs = l.spec.dir + "/rootfs";
  init.hostname = l.spec.hostname;
  init.nofile = l.spec.limits.nofile;
  init.shm_bytes = l.config.shm_bytes;
  if (auto subnet = persistedSubnet(l.persisted.state)) init.env = proxyEnv(*subnet, l.config.network);
  for (const auto& [k, v] : l.spec.env) init.env[k] = v;
  init.seccomp_policy = l.seccomp_policy;
  TRY(sendMessage(l.host_sync.get(), std::string(1, kGoByte)));
  return sendMessage(l.host_sync.get(), init.toJson().dump());
}

// The init contains itself and reports: notes, "mounted" (the host's copies of its mounts may go),
// "ready", or the containment step that failed.
Status awaitReady(HostLaunch& l) {
  auto deadline = std::chrono::steady_clock::now() + l.config.start_timeout;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return makeError(ErrorKind::kUnavailable, "sandbox init: timed out");
    auto raw = receiveMessage(l.host_sync.get(), left);
    if (!raw) return tl::unexpected(raw.error().context("sandbox init"));
    HandshakeMessage m = parseMessage(*raw);
    if (m.kind == "note") {
      spdlog::info("sandbox {}: {}", l.spec.id, m.text);
    } else if (m.kind == "mounted") {
      unmountHostCopies(l.spec.dir);
    } else if (m.kind == "ready") {
      return ok();
    } else if (m.kind == "error") {
      Error e{ErrorKind::kInternal, m.err, fmt::format("containment step {} failed: {}", m.step, m.text)};
      if (m.err == ENOSPC || m.err == EDQUOT) e.kind = ErrorKind::kResourceExhausted;
      return tl::unexpected(e);
    } else {
      return makeError(ErrorKind::kInternal, "sandbox init: unexpected message '{}'", *raw);
    }
  }
}

// One step a line: the tables read as checklists.
// clang-format off
constexpr LaunchStep kFreshSteps[] = {
    {"claim dir", claimSandboxDir},
    {"layer disk", createLayer},
    {"cgroup", createCgroup},
    {"agent socket", listenAgentSocket},
    {"sync channel", openSyncChannel},
    {"agent stdio", openAgentStdio},
    {"spawn agent", spawnAgent},
    {"uid map", writeUidMap},
    {"join cgroup", joinCgroup},
    {"rootfs", buildRoot},
    {"network", attachNewNetwork},
    {"init config", sendInitConfig},
    {"handshake", awaitReady},
};

constexpr LaunchStep kForkSteps[] = {
    {"claim dir", claimSandboxDir},
    {"clone layer", cloneLayer},
    {"mount layer", mountLayer},
    {"shift owners", shiftOwners},
    {"cgroup", createCgroup},
    {"agent socket", listenAgentSocket},
    {"sync channel", openSyncChannel},
    {"agent stdio", openAgentStdio},
    {"spawn agent", spawnAgent},
    {"uid map", writeUidMap},
    {"join cgroup", joinCgroup},
    {"rootfs", buildRoot},
    {"network", attachNewNetwork},
    {"init config", sendInitConfig},
    {"handshake", awaitReady},
};

// No directory, layer image or cgroup is made: they are the sandbox's already.
constexpr LaunchStep kRelaunchSteps[] = {
    {"mount layer", mountLayer},
    {"shift owners", shiftImportedOwners},
    {"agent socket", listenAgentSocket},
    {"sync channel", openSyncChannel},
    {"agent stdio", openAgentStdio},
    {"spawn agent", spawnAgent},
    {"uid map", writeUidMap},
    {"join cgroup", joinCgroup},
    {"rootfs", buildRoot},
    {"relink network", relinkExistingNetwork},
    {"init config", sendInitConfig},
    {"handshake", awaitReady},
};
// clang-format on

template <size_t N>
std::vector<LaunchStep> asVector(const LaunchStep (&steps)[N]) {
  return std::vector<LaunchStep>(steps, steps + N);
}

std::vector<LaunchStep> stepsOf(LaunchVariant variant) {
  switch (variant) {
    case LaunchVariant::kFresh:
      return asVector(kFreshSteps);
    case LaunchVariant::kFork:
      return asVector(kForkSteps);
    case LaunchVariant::kRelaunch:
      return asVector(kRelaunchSteps);
  }
  return {};
}

}  // namespace

std::vector<std::string_view> launchStepNames(LaunchVariant variant) {
  std::vector<std::string_view> names;
  for (const LaunchStep& step : stepsOf(variant)) names.emplace_back(step.name);
  return names;
}

Status runLaunchSteps(HostLaunch& l, LaunchVariant variant) {
  // The layer's device is recorded whether or not the launch gets further (writeGeneration reads it).
  Defer note_device([&] {
    if (!l.device.empty()) l.persisted.state["layer_dev"] = l.device;
  });
  for (const LaunchStep& step : stepsOf(variant)) {
    Status st = step.run(l);
    if (!st) {
      Error e = st.error();
      e.context(fmt::format("launch step '{}'", step.name));
      return tl::unexpected(e);
    }
  }
  return ok();
}

}  // namespace space::jail
