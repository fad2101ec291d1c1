#include "agent/client/streams.h"

#include "agent/protocol/message.h"

namespace space::agent {
namespace {

using protocol::FrameType;

Error streamEnded() { return Error{ErrorKind::kConflict, 0, "stream ended"}; }

// Owns a channel: cancels the operation if it is dropped before the agent ended it.
class ChannelOwner {
 public:
  ChannelOwner(std::shared_ptr<Connection> conn, uint32_t ch) : conn_(std::move(conn)), ch_(ch) {}
  ~ChannelOwner() {
    if (!ended_) (void)conn_->sendFrame(FrameType::kCancel, ch_, {});
    conn_->release(ch_);
  }

 protected:
  std::shared_ptr<Connection> conn_;
  uint32_t ch_;
  bool ended_ = false;
};

// Shared by exec streams and output readers: both carry stdout/stderr data and end with "exit".
Result<ExecEvent> nextExecEvent(Connection& conn, uint32_t ch, bool* ended, std::optional<Duration> timeout) {
  if (*ended) return tl::unexpected(streamEnded());
  for (;;) {
    ASSIGN_OR_RETURN(Incoming in, conn.next(ch, timeout));
    if (in.type == FrameType::kDataOut) return ExecEvent{ExecEvent::Kind::kStdout, std::move(in.data), {}};
    if (in.type == FrameType::kDataErr) return ExecEvent{ExecEvent::Kind::kStderr, std::move(in.data), {}};
    std::string ev = protocol::optString(in.msg, "event");
    if (ev == "exit") {
      *ended = true;
      return ExecEvent{ExecEvent::Kind::kExit, {}, exitStatusFrom(in.msg)};
    }
    if (ev == "error") {
      *ended = true;
      return tl::unexpected(protocol::errorFromEvent(in.msg));
    }
    // Other events are informational.
  }
}

class ExecStreamImpl : public ExecStream, ChannelOwner {
 public:
  ExecStreamImpl(std::shared_ptr<Connection> conn, uint32_t ch, int pid, bool has_stdin)
      : ChannelOwner(std::move(conn), ch), pid_(pid), has_stdin_(has_stdin) {}
  int pid() const override { return pid_; }
  Result<ExecEvent> next(std::optional<Duration> timeout) override {
    return nextExecEvent(*conn_, ch_, &ended_, timeout);
  }
  Status writeStdin(std::string_view data) override {
    if (!has_stdin_) return makeError(ErrorKind::kConflict, "stdin is not open (stdin_open was false)");
    if (ended_) return tl::unexpected(streamEnded());
    return conn_->sendData(ch_, data);
  }
  Status closeStdin() override {
    if (ended_) return tl::unexpected(streamEnded());
    return conn_->sendFrame(FrameType::kEofIn, ch_, {});
  }
  Status resize(uint16_t rows, uint16_t cols) override {
    if (ended_) return tl::unexpected(streamEnded());
    return conn_->sendControl(ch_, {{"op", "resize"}, {"rows", rows}, {"cols", cols}});
  }
  Status signal(int signo) override {
    if (ended_) return tl::unexpected(streamEnded());
    return conn_->sendControl(ch_, {{"op", "signal"}, {"signal", signo}});
  }

 private:
  int pid_;
  bool has_stdin_;
};

class OutputReaderImpl : public OutputReader, ChannelOwner {
 public:
  using ChannelOwner::ChannelOwner;
  Result<ExecEvent> next(std::optional<Duration> timeout) override {
    return nextExecEvent(*conn_, ch_, &ended_, timeout);
  }
};

class FileReaderImpl : public FileReader, ChannelOwner {
 public:
  FileReaderImpl(std::shared_ptr<Connection> conn, uint32_t ch, uint64_t size)
      : ChannelOwner(std::move(conn), ch), size_(size) {}
  uint64_t size() const override { return size_; }
  Result<std::string> read(size_t max) override {
    if (max == 0) return std::string();
    while (pending_pos_ >= pending_.size()) {
      if (ended_) return std::string();
      ASSIGN_OR_RETURN(Incoming in, conn_->next(ch_, std::nullopt));
      if (in.type == FrameType::kDataOut) {
        pending_ = std::move(in.data);
        pending_pos_ = 0;
        continue;
      }
      std::string ev = protocol::optString(in.msg, "event");
      if (ev == "done") ended_ = true;
      if (ev == "error") {
        ended_ = true;
        return tl::unexpected(protocol::errorFromEvent(in.msg));
      }
    }
    size_t n = std::min(max, pending_.size() - pending_pos_);
    std::string out;
    if (pending_pos_ == 0 && n == pending_.size()) {
      out = std::move(pending_);  // the common case: hand over a whole frame without a copy
      pending_.clear();
    } else {
      out = pending_.substr(pending_pos_, n);
      pending_pos_ += n;
      if (pending_pos_ < pending_.size()) return out;
      pending_.clear();
    }
    pending_pos_ = 0;
    return out;
  }

 private:
  uint64_t size_;
  std::string pending_;
  size_t pending_pos_ = 0;
};

class FileWriterImpl : public FileWriter, ChannelOwner {
 public:
  using ChannelOwner::ChannelOwner;
  Status write(std::string_view data) override {
    if (ended_) return tl::unexpected(streamEnded());
    TRY(takeEarlyError());
    auto s = conn_->sendData(ch_, data);
    if (!s) {
      TRY(takeEarlyError());
      return s;
    }
    return ok();
  }
  Result<uint64_t> finish() override {
    if (ended_) return tl::unexpected(streamEnded());
    TRY(conn_->sendFrame(FrameType::kEofIn, ch_, {}));
    for (;;) {
      ASSIGN_OR_RETURN(Incoming in, conn_->next(ch_, std::nullopt));
      std::string ev = protocol::optString(in.msg, "event");
      if (ev == "done") {
        ended_ = true;
        return static_cast<uint64_t>(protocol::optInt(in.msg, "bytes", 0));
      }
      if (ev == "error") {
        ended_ = true;
        return tl::unexpected(protocol::errorFromEvent(in.msg));
      }
    }
  }

 private:
  // The agent ends an upload early only with an error (disk full, ...): report it on the next write.
  Status takeEarlyError() {
    while (auto in = conn_->poll(ch_)) {
      if (protocol::optString(in->msg, "event") == "error") {
        ended_ = true;
        return tl::unexpected(protocol::errorFromEvent(in->msg));
      }
    }
    return ok();
  }
};

}  // namespace

ExitStatus exitStatusFrom(const nlohmann::json& ev) {
  ExitStatus st;
  st.exit_code = static_cast<int>(protocol::optInt(ev, "exit_code", -1));
  st.signal = static_cast<int>(protocol::optInt(ev, "signal", 0));
  st.timed_out = protocol::optBool(ev, "timed_out", false);
  st.oom_killed = protocol::optBool(ev, "oom_killed", false);
  return st;
}

std::unique_ptr<ExecStream> makeExecStream(std::shared_ptr<Connection> conn, uint32_t ch, int pid, bool has_stdin) {
  return std::make_unique<ExecStreamImpl>(std::move(conn), ch, pid, has_stdin);
}
std::unique_ptr<OutputReader> makeOutputReader(std::shared_ptr<Connection> conn, uint32_t ch) {
  return std::make_unique<OutputReaderImpl>(std::move(conn), ch);
}
std::unique_ptr<FileReader> makeFileReader(std::shared_ptr<Connection> conn, uint32_t ch, uint64_t size) {
  return std::make_unique<FileReaderImpl>(std::move(conn), ch, size);
}
std::unique_ptr<FileWriter> makeFileWriter(std::shared_ptr<Connection> conn, uint32_t ch) {
  return std::make_unique<FileWriterImpl>(std::move(conn), ch);
}

}  // namespace space::agent
