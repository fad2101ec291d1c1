// The agent's internal state: one host connection, the operations running on its channels, and the
// processes the agent started. Split by concern: serve.cc (loop, connection, framing), process.cc
// (exec, reaping, timeouts, stdin), spawn.cc (the child side of fork/exec), background.cc (detached
// processes and their output rings), files.cc (file API beneath the root), identity.cc, generation.cc.
#pragma once

#include <sys/epoll.h>
#include <sys/types.h>

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "agent/protocol/frame.h"
#include "agent/server/serve.h"
#include "common/result.h"
#include "common/unique_fd.h"

namespace space::agent {

using nlohmann::json;

inline constexpr size_t kOutHighWater = 2u << 20;     // stop producing data while this much is unsent
inline constexpr size_t kRingBytes = 1u << 20;        // output kept per background process
inline constexpr size_t kMaxBackground = 64;          // background processes running at once
inline constexpr size_t kMaxBackgroundRecords = 256;  // running + exited records kept for list/output

// Output of a background process: the newest kRingBytes, each byte at an absolute offset so readers
// keep a cursor and learn how much was dropped under them.
class OutputRing {
 public:
  void append(bool is_err, const char* data, size_t n);
  uint64_t begin() const { return begin_; }
  uint64_t end() const { return end_; }
  // Copies the run of one stream starting at *cursor (moved up to begin() first) into out, at most max
  // bytes; advances *cursor. Returns false when nothing is available.
  bool read(uint64_t* cursor, size_t max, bool* is_err, std::string* out) const;

 private:
  struct Chunk {
    uint64_t offset;
    bool is_err;
    std::string data;
  };
  std::deque<Chunk> chunks_;
  uint64_t begin_ = 0, end_ = 0;
  size_t held_ = 0;  // bytes plus a per-chunk charge, so tiny writes cannot grow memory without bound
};

struct Process {
  uint64_t key = 0;
  pid_t pid = -1;
  std::vector<std::string> argv;
  int64_t started_ms = 0;
  bool pty = false;
  UniqueFd out, err, in, timer;  // agent ends; with a pty, out and in are the master (in a dup)
  uint32_t out_watch = 0, err_watch = 0, in_watch = 0, timer_watch = 0;  // registered epoll events
  std::string stdin_buf;   // host bytes not yet written to the child (bounded by credit)
  bool stdin_eof = false;  // close stdin once stdin_buf is written
  bool exited = false;
  int wait_status = 0;
  bool timed_out = false;
  std::optional<uint64_t> oom_kills_at_start;  // the kernel's OOM kill count at spawn, where counted
  bool oom_killed = false;                     // it died of SIGKILL while that count rose (oom_count.cc)
  uint32_t channel = 0;                        // foreground: the host channel; 0 once detached
  std::string bg_id;                           // background: "p1", ...
  OutputRing ring;                             // background output
  uint64_t output_bytes = 0;
};

struct Channel {
  enum class Kind { kExec, kReadFile, kWriteFile, kOutput };
  Kind kind = Kind::kExec;
  uint32_t id = 0;
  int64_t send_credit = protocol::kInitialCredit;   // data bytes the agent may still send
  int64_t recv_allowed = protocol::kInitialCredit;  // data bytes the host may still send
  uint64_t proc_key = 0;                            // kExec, kOutput
  UniqueFd file;                                    // kReadFile: source; kWriteFile: temporary file
  UniqueFd dir;                                     // kWriteFile: target directory
  std::string tmp_name, final_name;
  uint32_t mode = 0644;           // kWriteFile: permission bits of the committed file
  uint64_t bytes = 0;             // transferred so far
  uint64_t cursor = 0;            // kOutput: ring offset
  uint64_t stop_at = UINT64_MAX;  // kOutput without follow: ring end when asked
  uint64_t dropped = 0;           // kOutput: bytes lost to the ring before this reader saw them
  bool follow = false;
  bool cancelled = false;  // kExec: the host gave up; output is discarded, the exit still sent
};

// Exit status as the protocol reports it.
json exitEvent(const Process& p);

// What happens to the running processes when set_identity starts a new generation (generation.cc).
struct RestoreAction {
  enum Mode { kSignal, kKill, kNone } mode = kSignal;
  int signal = 0;
};
Result<RestoreAction> parseRestoreAction(const json& spec);

class Server {
 public:
  explicit Server(const ServeOptions& options);
  int run();

 private:
  enum Tag : uint64_t { kListen = 1, kConn, kSignal, kOut, kErr, kIn, kTimer };
  static uint64_t tag(Tag t, uint64_t key) { return (uint64_t{t} << 56) | key; }

  // serve.cc: loop and connection
  Status setup();
  void dispatch(const epoll_event& ev);
  void acceptConnection();
  void acceptDeviceSession();
  void beginSession(UniqueFd fd);
  void armDevice();
  void dropConnection(const std::string& why);
  void readConnection();
  void flushConnection();
  void handleFrame(protocol::Frame& frame);
  void handleHello(const protocol::Frame& frame);
  void handleRequest(uint32_t ch, const json& msg);
  void handleChannelControl(Channel& c, const json& msg);
  void handleDataIn(Channel& c, std::string& data);
  void handleEofIn(Channel& c);
  void cancelChannel(Channel& c);
  void watch(int fd, Tag t, uint64_t key, uint32_t* current, uint32_t wanted);
  void unwatch(int fd, uint32_t* current);
  void updateWatches();
  bool pumpAll();  // true while some producer could make progress without an epoll event
  bool outRoom() const { return out_.size() - out_pos_ < kOutHighWater; }

 public:  // used by the operation files
  void sendControl(uint32_t ch, const json& msg);
  void sendData(protocol::FrameType type, uint32_t ch, const char* data, size_t n);
  // Reserves a data frame of up to max bytes in the output buffer; commitData(n) fixes its length.
  char* beginData(protocol::FrameType type, uint32_t ch, size_t max);
  void commitData(size_t n);
  void sendCredit(uint32_t ch, uint32_t bytes);
  // Sends the final event and forgets the channel.
  void endChannel(uint32_t ch, const json& final_event);
  void endChannelError(uint32_t ch, const Error& e);
  Channel* channel(uint32_t ch);
  Channel& openChannel(uint32_t ch, Channel::Kind kind);

  // process.cc
  void opExec(uint32_t ch, const json& msg, bool background);
  Result<Process*> startProcess(const json& msg, bool background);
  void pumpProcessFd(Process& p, bool is_err, bool draining);
  void writeStdin(Process& p);
  void closeStdin(Process& p);
  void reapChildren();
  void onTimer(Process& p);
  void killGroup(Process& p, int signo);
  void finishIfDone(Process& p);
  void detachForeground(Process& p);
  void closeProcessFds(Process& p);
  Process* process(uint64_t key);
  void signalForeground(Channel& c, const json& msg);
  void resizePty(Channel& c, const json& msg);

  // background.cc
  void opPs(uint32_t ch);
  void opKill(uint32_t ch, const json& msg);
  void opOutput(uint32_t ch, const json& msg);
  Process* findBackground(const std::string& id);
  bool pumpOutputReader(Channel& c);
  void forgetOldBackground();

  // files.cc
  void opReadFile(uint32_t ch, const json& msg);
  void opWriteFile(uint32_t ch, const json& msg);
  void opStat(uint32_t ch, const json& msg);
  void opList(uint32_t ch, const json& msg);
  void opMkdir(uint32_t ch, const json& msg);
  void opMove(uint32_t ch, const json& msg);
  void opRemove(uint32_t ch, const json& msg);
  bool pumpReadFile(Channel& c);
  void writeUploadChunk(Channel& c, const std::string& data);
  void finishUpload(Channel& c);
  void abandonUpload(Channel& c);

  // oom_count.cc
  std::optional<uint64_t> oomKillCount() const;
  void noteOomKill(Process& p);
  void opUsage(uint32_t ch);

  // identity.cc
  void opSetIdentity(uint32_t ch, const json& msg);

  // generation.cc
  Status startFirstGeneration();
  Status publishGeneration();
  Result<json> beginGeneration(const RestoreAction& action);
  void signalEveryProcess(int signo);
  void killEveryProcess();

  ServeOptions options_;
  UniqueFd root_;  // O_PATH directory fd of options_.root; every file path resolves beneath it
  UniqueFd epoll_, signal_fd_, listen_;
  UniqueFd conn_;
  // Device mode (options_.device_fd): conn_ is a dup of device_ while a host session is live; while none
  // is, device_ itself waits edge-triggered for the host to connect.
  UniqueFd device_;
  uint32_t device_watch_ = 0;
  bool conn_hello_ = false;
  uint32_t conn_watch_ = 0;
  protocol::Decoder decoder_;
  std::string out_;
  size_t out_pos_ = 0;
  size_t frame_start_ = 0;  // beginData's frame header offset in out_
  protocol::FrameType frame_type_ = protocol::FrameType::kDataOut;
  uint32_t frame_channel_ = 0;
  std::map<uint32_t, Channel> channels_;
  std::map<uint64_t, std::unique_ptr<Process>> procs_;
  std::map<pid_t, uint64_t> by_pid_;
  uint64_t next_key_ = 1;
  uint64_t next_bg_ = 1;
  std::map<std::string, std::string> env_;  // base environment, extended by set_identity
  uint64_t generation_ = 0;                 // restores of this memory so far (generation.cc)
  std::string generation_id_;               // 32 hex digits, new with every generation
};

int64_t nowUnixMs();

}  // namespace space::agent
