// The host end of one agent connection: a reader thread demultiplexes frames into per-channel queues,
// writers share one mutex, and credits flow both ways. Everything the agent sends is untrusted (the agent
// runs inside the sandbox): a frame beyond the granted credit, an unparsable control message or a
// runaway queue fails the connection instead of growing host memory.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>

#include "agent/client/agent_client.h"
#include "agent/protocol/frame.h"
#include "common/result.h"
#include "common/unique_fd.h"

namespace space::agent {

struct Incoming {
  protocol::FrameType type = protocol::FrameType::kControl;
  std::string data;       // data frames
  nlohmann::json msg;     // control frames, parsed
  size_t wire_bytes = 0;  // control frames: payload size, for the queue bound
};

struct ChannelState {
  std::deque<Incoming> queue;
  std::condition_variable cv;
  int64_t send_credit = protocol::kInitialCredit;  // data bytes we may still send
  int64_t recv_window = protocol::kInitialCredit;  // data bytes the agent may still send us
  uint64_t consumed = 0;                           // consumed since the last grant
  size_t queued_control = 0;                       // bytes of queued control messages
  bool ended = false;                              // the agent sent the final event
};

class Connection {
 public:
  Connection(UniqueFd fd, protocol::Decoder decoder);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Sends the host hello and waits for the agent's; returns the agent hello.
  static Result<nlohmann::json> handshake(int fd, protocol::Decoder& decoder, Duration timeout);

  void start();
  void close();
  bool alive() const { return alive_.load(); }

  // Allocates a channel, registers it and sends the request on it.
  Result<uint32_t> open(const nlohmann::json& request);
  // Forgets a channel: frames still arriving for it are dropped.
  void release(uint32_t ch);
  // The next frame on the channel. Buffered frames are delivered even after the connection broke;
  // then kUnavailable. A timeout is kUnavailable with sys_errno ETIMEDOUT.
  Result<Incoming> next(uint32_t ch, std::optional<Duration> timeout);
  // Like next() but never blocks: nullopt when nothing is queued.
  std::optional<Incoming> poll(uint32_t ch);

  Status sendControl(uint32_t ch, const nlohmann::json& msg);
  Status sendFrame(protocol::FrameType type, uint32_t ch, std::string_view payload);
  // Sends data frames, waiting for credit. kConflict when the agent ended the channel meanwhile.
  Status sendData(uint32_t ch, std::string_view data);

 private:
  void readerLoop();
  void fail(const std::string& why);
  bool handleFrame(protocol::Frame& frame);  // false: protocol violation
  void grantCredit(uint32_t ch, uint64_t bytes);

  UniqueFd fd_;
  protocol::Decoder decoder_;
  std::thread reader_;
  std::atomic<bool> alive_{true};
  std::mutex write_mu_;
  std::mutex mu_;
  std::map<uint32_t, std::shared_ptr<ChannelState>> channels_;
  uint32_t next_channel_ = 1;
  std::string failure_;
};

Error unavailable(const std::string& why);

}  // namespace space::agent
