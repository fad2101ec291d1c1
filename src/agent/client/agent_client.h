// AgentClient: spaced's side of the agent protocol. One connection per sandbox, shared by every API
// request on that sandbox; a reader thread demultiplexes frames into per-channel queues. Every call is
// thread-safe. Output queues are bounded by protocol credits: a slow consumer stops the producer inside
// the sandbox instead of growing host memory.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"

namespace space::agent {

using Duration = std::chrono::milliseconds;

struct ExecRequest {
  std::vector<std::string> argv;           // argv[0] resolved through PATH inside the sandbox
  std::map<std::string, std::string> env;  // added to the sandbox's base environment
  std::string cwd;                         // default "/root" (or the user's home)
  std::string user;                        // name or uid inside the sandbox; default root
  bool pty = false;                        // run on a pseudo-terminal (stdout carries the tty output)
  uint16_t rows = 24, cols = 80;
  double timeout_s = 0;     // 0 = none; on expiry SIGKILL to the process group
  bool stdin_open = false;  // false: stdin is /dev/null
};

struct ExitStatus {
  int exit_code = -1;  // -1 when killed by a signal
  int signal = 0;
  bool timed_out = false;
  // The agent's own kernel (a VM guest's) counted an OOM kill as the process died of SIGKILL. Older
  // agents and jails never say so; there the host's cgroup tells.
  bool oom_killed = false;
};

struct ExecEvent {
  enum class Kind { kStdout, kStderr, kExit } kind = Kind::kStdout;
  std::string data;  // for kStdout / kStderr
  ExitStatus exit;   // for kExit
};

// One running foreground process (exec or PTY). Destroying it before the exit event cancels: the agent
// kills the process group.
class ExecStream {
 public:
  virtual ~ExecStream() = default;
  virtual int pid() const = 0;
  // Blocks until the next event. After kExit, returns an error kind kConflict ("stream ended").
  virtual Result<ExecEvent> next(std::optional<Duration> timeout = std::nullopt) = 0;
  virtual Status writeStdin(std::string_view data) = 0;
  virtual Status closeStdin() = 0;
  virtual Status resize(uint16_t rows, uint16_t cols) = 0;
  virtual Status signal(int signo) = 0;
};

struct ProcessInfo {
  std::string id;  // agent-assigned id of a background process ("p1", "p2", ...)
  int pid = 0;
  std::vector<std::string> argv;
  bool running = true;
  ExitStatus exit;  // valid when !running
  uint64_t output_bytes = 0;
  int64_t started_unix_ms = 0;
};

// Output of a background process, kept by the agent in a bounded buffer per process.
class OutputReader {
 public:
  virtual ~OutputReader() = default;
  // kStdout/kStderr chunks; kExit when the process ended (follow) or when the buffer is drained (!follow).
  virtual Result<ExecEvent> next(std::optional<Duration> timeout = std::nullopt) = 0;
};

struct FileStat {
  std::string name;  // base name (list) or the path asked for (stat)
  std::string type;  // "file", "dir", "symlink", "other"
  uint64_t size = 0;
  uint32_t mode = 0;  // permission bits
  uint32_t uid = 0, gid = 0;
  int64_t mtime_unix_ms = 0;
  std::string link_target;  // for symlinks
};

class FileReader {
 public:
  virtual ~FileReader() = default;
  virtual uint64_t size() const = 0;
  // Up to max bytes; an empty string at end of file.
  virtual Result<std::string> read(size_t max) = 0;
};

class FileWriter {
 public:
  virtual ~FileWriter() = default;
  virtual Status write(std::string_view data) = 0;
  // Commits the file (written to a temporary name in the target directory, then renamed) and returns
  // the byte count. Destroying the writer without finish() discards the upload.
  virtual Result<uint64_t> finish() = 0;
};

// Identity given to a sandbox after start or restore (hostname, extra environment, RNG seed, clock).
struct Identity {
  std::string hostname;
  std::map<std::string, std::string> env;
  std::string rng_seed_hex;   // mixed into the guest RNG; empty = none
  int64_t clock_unix_ms = 0;  // 0 = leave the clock
  std::string machine_id;     // 32 lowercase hex digits for /etc/machine-id; empty = leave it
  // A VM's network, configured by its agent (a jail's is made by the host): its NIC (the only one) gets
  // `mac` and `address`/`prefix`, the default route goes via `gateway`, lo comes up, and /etc/resolv.conf
  // names `nameserver`. Empty address = no network.
  struct Network {
    std::string address, gateway, nameserver, mac;
    int prefix = 30;
  } network;
  // Set after a restore of memory (a VM from its template, a fork child, a rollback): the agent starts
  // a new generation (/run/space/generation) and then signals (`processes` "signal", with `signal`),
  // kills ("kill") or leaves ("none") every running process (docs/snapshots.md "Generations").
  struct Generation {
    std::string processes = "none";
    int signal = 0;
  };
  std::optional<Generation> generation;
};

class AgentClient;

// Writes a small file inside the sandbox in one go (the agent commits it by rename).
Status writeWholeFile(AgentClient& agent, const std::string& path, const std::string& content, uint32_t mode = 0644);

class AgentClient {
 public:
  virtual ~AgentClient() = default;

  // Connects to an agent listening on a unix socket and performs the hello handshake.
  static Result<std::shared_ptr<AgentClient>> connectUnix(const std::string& socket_path, Duration timeout);
  // Adopts an already-connected stream (socketpair, virtio-serial socket, vsock) and performs the handshake.
  static Result<std::shared_ptr<AgentClient>> adopt(int fd, Duration timeout);

  virtual bool alive() const = 0;
  virtual nlohmann::json agentInfo() const = 0;  // the agent's hello (version, pid, features)

  virtual Result<std::unique_ptr<ExecStream>> exec(const ExecRequest& req) = 0;

  virtual Result<ProcessInfo> startBackground(const ExecRequest& req) = 0;
  virtual Result<std::vector<ProcessInfo>> listProcesses() = 0;
  virtual Status signalProcess(const std::string& id, int signo) = 0;
  virtual Result<std::unique_ptr<OutputReader>> readOutput(const std::string& id, bool follow) = 0;

  virtual Result<std::unique_ptr<FileReader>> readFile(const std::string& path) = 0;
  virtual Result<std::unique_ptr<FileWriter>> writeFile(const std::string& path, uint32_t mode) = 0;
  virtual Result<FileStat> stat(const std::string& path) = 0;
  virtual Result<std::vector<FileStat>> list(const std::string& path) = 0;
  virtual Status mkdir(const std::string& path, bool parents, uint32_t mode) = 0;
  virtual Status move(const std::string& from, const std::string& to) = 0;
  virtual Status remove(const std::string& path, bool recursive) = 0;

  virtual Status setIdentity(const Identity& identity) = 0;
  // The OOM kills the agent's own kernel has counted (a VM guest's); kUnsupported where its kernel is
  // the host's (a jail) or the agent predates the count.
  virtual Result<uint64_t> oomKills() {
    return makeError(ErrorKind::kUnsupported, "the agent does not count OOM kills");
  }
  virtual Status ping(Duration timeout) = 0;
};

}  // namespace space::agent
