// Background processes: started detached from any channel, they survive host reconnections. Their
// output goes into a bounded ring per process (oldest bytes dropped, and reported as dropped), from
// which any number of readers stream with their own cursor and credit.
#include <signal.h>

#include <algorithm>

#include "agent/protocol/message.h"
#include "agent/server/server.h"

namespace space::agent {
namespace {

constexpr size_t kChunkCharge = 64;      // bookkeeping cost counted per chunk
constexpr size_t kMaxChunk = 64u << 10;  // appends merge into the last chunk up to this size
constexpr size_t kMaxArgListed = 256;    // ps truncates each argv string to this

}  // namespace

void OutputRing::append(bool is_err, const char* data, size_t n) {
  if (n == 0) return;
  if (!chunks_.empty() && chunks_.back().is_err == is_err && chunks_.back().data.size() + n <= kMaxChunk) {
    chunks_.back().data.append(data, n);
    held_ += n;
  } else {
    chunks_.push_back(Chunk{end_, is_err, std::string(data, n)});
    held_ += n + kChunkCharge;
  }
  end_ += n;
  while (held_ > kRingBytes && chunks_.size() > 1) {
    held_ -= chunks_.front().data.size() + kChunkCharge;
    chunks_.pop_front();
    begin_ = chunks_.front().offset;
  }
}

bool OutputRing::read(uint64_t* cursor, size_t max, bool* is_err, std::string* out) const {
  if (*cursor < begin_) *cursor = begin_;
  if (*cursor >= end_ || max == 0) return false;
  auto it = std::upper_bound(chunks_.begin(), chunks_.end(), *cursor,
                             [](uint64_t off, const Chunk& c) { return off < c.offset; });
  --it;  // the chunk holding *cursor: chunks are contiguous from begin_ to end_
  size_t within = static_cast<size_t>(*cursor - it->offset);
  size_t n = std::min(max, it->data.size() - within);
  out->assign(it->data, within, n);
  *is_err = it->is_err;
  *cursor += n;
  return true;
}

Process* Server::findBackground(const std::string& id) {
  for (auto& [key, p] : procs_) {
    if (p->bg_id == id) return p.get();
  }
  return nullptr;
}

void Server::forgetOldBackground() {
  size_t records = 0;
  for (auto& [key, p] : procs_) records += !p->bg_id.empty();
  for (auto it = procs_.begin(); records > kMaxBackgroundRecords && it != procs_.end();) {
    Process& p = *it->second;
    if (!p.bg_id.empty() && p.exited && !p.out && !p.err) {
      it = procs_.erase(it);
      --records;
    } else {
      ++it;
    }
  }
}

void Server::opPs(uint32_t ch) {
  json list = json::array();
  for (auto& [key, up] : procs_) {
    const Process& p = *up;
    if (p.bg_id.empty()) continue;
    json argv = json::array();
    for (const auto& a : p.argv) argv.push_back(a.substr(0, kMaxArgListed));
    json item = {{"id", p.bg_id},
                 {"pid", p.pid},
                 {"argv", argv},
                 {"running", !p.exited},
                 {"output_bytes", p.output_bytes},
                 {"started_unix_ms", p.started_ms}};
    if (p.exited) {
      json ev = exitEvent(p);
      item["exit_code"] = ev["exit_code"];
      item["signal"] = ev["signal"];
      item["timed_out"] = ev["timed_out"];
    }
    list.push_back(std::move(item));
  }
  endChannel(ch, {{"event", "done"}, {"processes", std::move(list)}});
}

void Server::opKill(uint32_t ch, const json& msg) {
  std::string id = protocol::optString(msg, "id");
  int64_t sig = protocol::optInt(msg, "signal", SIGTERM);
  if (sig < 0 || sig >= NSIG) return endChannelError(ch, Error{ErrorKind::kInvalidArgument, 0, "bad signal number"});
  Process* p = findBackground(id);
  if (!p) return endChannelError(ch, Error{ErrorKind::kNotFound, 0, fmt::format("no background process \"{}\"", id)});
  if (p->exited) return endChannelError(ch, Error{ErrorKind::kConflict, 0, fmt::format("{} already exited", id)});
  killGroup(*p, static_cast<int>(sig));
  endChannel(ch, {{"event", "done"}});
}

void Server::opOutput(uint32_t ch, const json& msg) {
  std::string id = protocol::optString(msg, "id");
  Process* p = findBackground(id);
  if (!p) return endChannelError(ch, Error{ErrorKind::kNotFound, 0, fmt::format("no background process \"{}\"", id)});
  Channel& c = openChannel(ch, Channel::Kind::kOutput);
  c.proc_key = p->key;
  c.follow = protocol::optBool(msg, "follow", false);
  c.cursor = p->ring.begin();
  c.dropped = p->ring.begin();
  if (!c.follow) c.stop_at = p->ring.end();
  sendControl(ch, {{"event", "output"}, {"id", id}, {"running", !p->exited}, {"dropped_bytes", c.dropped}});
}

bool Server::pumpOutputReader(Channel& c) {
  Process* p = process(c.proc_key);
  if (!p) {
    endChannelError(c.id, Error{ErrorKind::kNotFound, 0, "background process record was discarded"});
    return true;
  }
  bool progress = false;
  std::string data;
  while (c.send_credit > 0 && outRoom()) {
    if (c.cursor < p->ring.begin()) {
      c.dropped += p->ring.begin() - c.cursor;
      c.cursor = p->ring.begin();
    }
    uint64_t limit = std::min(c.stop_at, p->ring.end());
    if (c.cursor >= limit) break;
    size_t max = static_cast<size_t>(
        std::min<uint64_t>({protocol::kDataChunk, static_cast<uint64_t>(c.send_credit), limit - c.cursor}));
    bool is_err = false;
    if (!p->ring.read(&c.cursor, max, &is_err, &data)) break;
    sendData(is_err ? protocol::FrameType::kDataErr : protocol::FrameType::kDataOut, c.id, data.data(), data.size());
    c.send_credit -= static_cast<int64_t>(data.size());
    progress = true;
  }
  bool finished = p->exited && !p->out && !p->err;
  bool caught_up = c.cursor >= std::min(c.stop_at, p->ring.end());
  if (caught_up && (!c.follow || finished)) {
    json ev =
        finished ? exitEvent(*p) : json{{"event", "exit"}, {"exit_code", -1}, {"signal", 0}, {"timed_out", false}};
    ev["running"] = !finished;
    ev["dropped_bytes"] = c.dropped;
    endChannel(c.id, ev);
    return true;
  }
  return progress;
}

}  // namespace space::agent
