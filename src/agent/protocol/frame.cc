#include "agent/protocol/frame.h"

#include <cstring>

namespace space::protocol {
namespace {

void putU32(char* p, uint32_t v) {
  p[0] = static_cast<char>(v & 0xff);
  p[1] = static_cast<char>((v >> 8) & 0xff);
  p[2] = static_cast<char>((v >> 16) & 0xff);
  p[3] = static_cast<char>((v >> 24) & 0xff);
}

uint32_t getU32(const char* p) {
  auto b = reinterpret_cast<const unsigned char*>(p);
  return uint32_t{b[0]} | uint32_t{b[1]} << 8 | uint32_t{b[2]} << 16 | uint32_t{b[3]} << 24;
}

}  // namespace

bool isKnownFrameType(uint8_t t) { return t >= 1 && t <= 8; }

void encodeHeader(FrameType type, uint32_t channel, uint32_t length, char out[kHeaderSize]) {
  putU32(out, length);
  out[4] = static_cast<char>(type);
  putU32(out + 5, channel);
}

void encodeFrame(const Frame& frame, std::string& out) {
  char header[kHeaderSize];
  encodeHeader(frame.type, frame.channel, static_cast<uint32_t>(frame.payload.size()), header);
  out.append(header, kHeaderSize);
  out.append(frame.payload);
}

std::string encodeFrame(const Frame& frame) {
  std::string out;
  out.reserve(kHeaderSize + frame.payload.size());
  encodeFrame(frame, out);
  return out;
}

std::string encodeCredit(uint32_t bytes) {
  std::string s(4, '\0');
  putU32(s.data(), bytes);
  return s;
}

Result<uint32_t> decodeCredit(std::string_view payload) {
  if (payload.size() != 4)
    return makeError(ErrorKind::kInvalidArgument, "credit frame of {} bytes, want 4", payload.size());
  return getU32(payload.data());
}

void Decoder::feed(std::string_view bytes) {
  // Compact before growing so a long-lived connection does not accumulate consumed bytes.
  if (pos_ > 0 && pos_ >= buf_.size() / 2) {
    buf_.erase(0, pos_);
    pos_ = 0;
  }
  buf_.append(bytes);
}

Result<std::optional<Frame>> Decoder::next() {
  if (failed_) return makeError(ErrorKind::kInvalidArgument, "decoder already failed");
  if (buf_.size() - pos_ < kHeaderSize) return std::optional<Frame>{};
  const char* p = buf_.data() + pos_;
  uint32_t length = getU32(p);
  uint8_t type = static_cast<uint8_t>(p[4]);
  if (!isKnownFrameType(type)) {
    failed_ = true;
    return makeError(ErrorKind::kInvalidArgument, "unknown frame type {}", type);
  }
  if (length > max_payload_) {
    failed_ = true;
    return makeError(ErrorKind::kInvalidArgument, "frame payload of {} bytes exceeds limit {}", length, max_payload_);
  }
  if (buf_.size() - pos_ < kHeaderSize + length) return std::optional<Frame>{};
  Frame f;
  f.type = static_cast<FrameType>(type);
  f.channel = getU32(p + 5);
  f.payload.assign(p + kHeaderSize, length);
  pos_ += kHeaderSize + length;
  if (pos_ == buf_.size()) {
    buf_.clear();
    pos_ = 0;
  }
  return std::optional<Frame>{std::move(f)};
}

}  // namespace space::protocol
