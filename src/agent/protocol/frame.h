// The agent protocol's framing: one multiplexed, versioned byte stream between spaced and space-agent.
//
//   [u32 length][u8 type][u32 channel][payload: length bytes]      (integers little-endian)
//
// length counts the payload only. Control frames carry JSON; data frames carry raw bytes. Channel 0 is
// the connection itself (hello, ping); every operation runs on a channel the host picks (odd numbers)
// and ends with a kControl frame whose "event" is "exit", "done" or "error". The full message catalogue
// is in docs/protocol.md. The decoder is fed untrusted bytes: it never trusts a length beyond
// kMaxPayload and reports malformed input as an error instead of asserting.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace space::protocol {

inline constexpr uint32_t kVersion = 1;
inline constexpr size_t kHeaderSize = 9;
inline constexpr uint32_t kMaxPayload = 1u << 20;     // 1 MiB per frame
inline constexpr uint32_t kInitialCredit = 4u << 20;  // bytes a sender may have in flight per channel

enum class FrameType : uint8_t {
  kHello = 1,    // JSON {"version":1,"role":"host"|"agent", ...}; first frame each way, channel 0
  kControl = 2,  // JSON request (host→agent) or event (agent→host) on a channel
  kDataIn = 3,   // raw bytes host→agent: process stdin, file upload
  kDataOut = 4,  // raw bytes agent→host: process stdout, file download
  kDataErr = 5,  // raw bytes agent→host: process stderr
  kEofIn = 6,    // host→agent: no more kDataIn on this channel
  kCredit = 7,   // u32 LE: receiver grants the sender this many more data bytes on the channel
  kCancel = 8,   // host→agent: abandon the operation on this channel (the agent still ends it)
};

bool isKnownFrameType(uint8_t t);

struct Frame {
  FrameType type = FrameType::kControl;
  uint32_t channel = 0;
  std::string payload;
};

// Appends the encoded frame to out.
void encodeFrame(const Frame& frame, std::string& out);
std::string encodeFrame(const Frame& frame);
// Header-only encoding for writev of large data payloads without a copy.
void encodeHeader(FrameType type, uint32_t channel, uint32_t length, char out[kHeaderSize]);

std::string encodeCredit(uint32_t bytes);
Result<uint32_t> decodeCredit(std::string_view payload);

// Incremental decoder: feed any chunking of the stream, take whole frames out.
class Decoder {
 public:
  explicit Decoder(uint32_t max_payload = kMaxPayload) : max_payload_(max_payload) {}
  void feed(std::string_view bytes);
  // A frame when one is complete, nullopt when more bytes are needed, an error when the stream is
  // malformed (the connection must then be dropped: no resynchronisation is attempted).
  Result<std::optional<Frame>> next();
  size_t buffered() const { return buf_.size() - pos_; }

 private:
  std::string buf_;
  size_t pos_ = 0;
  uint32_t max_payload_;
  bool failed_ = false;
};

}  // namespace space::protocol
