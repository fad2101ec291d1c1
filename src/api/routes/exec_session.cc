// Foreground exec over a WebSocket: GET /v1/sandboxes/{id}/exec, upgraded. What POST .../exec cannot do:
// stdin streams in while the process runs (an interactive python3 works), signals reach the process
// group while it runs (Ctrl-C), and the process group is killed the moment the client goes away.
//
// Client -> server: the first text message is the request (POST .../exec's body, "stdin": true|false);
// then binary messages are stdin, and text messages {"type":"eof"} or {"type":"signal","signal":"INT"}.
// Server -> client: text {"type":"started","pid":N}; binary messages whose first byte names the stream
// (1 stdout, 2 stderr; kubectl's channel.k8s.io numbering) followed by the bytes; a last text message
// {"type":"exit",...} or {"type":"error","error":{...}}, then the close.
#include <condition_variable>
#include <csignal>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "api/errors.h"
#include "api/metrics.h"
#include "api/ndjson.h"
#include "api/routes/routes.h"

namespace space::api {
namespace {

// Bytes queued either way before the producer waits: output for a slow client, stdin for a process that
// does not read it yet. The agent's flow-control credits bound what lies beyond.
constexpr size_t kMaxQueued = 1 << 20;

// Client stdin on its way to the agent, written from a thread of its own: writeStdin blocks while the
// process does not read, and the WebSocket's thread must stay free for signals and the client's close.
class StdinFeeder {
 public:
  explicit StdinFeeder(agent::ExecStream& stream)
      : stream_(stream), thread_([this] {
          run();
          stop();  // nothing more will be written: a push() waiting for room must not wait forever
        }) {}
  ~StdinFeeder() {
    stop();
    thread_.join();
  }

  // Blocks while kMaxQueued bytes wait (TCP then holds the client back).
  void push(std::string data) {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return stopped_ || queued_ <= kMaxQueued; });
    if (stopped_ || eof_) return;
    queued_ += data.size();
    chunks_.push_back(std::move(data));
    cv_.notify_all();
  }
  void eof() {
    std::lock_guard lock(mu_);
    eof_ = true;
    cv_.notify_all();
  }
  void stop() {
    std::lock_guard lock(mu_);
    stopped_ = true;
    cv_.notify_all();
  }

 private:
  void run() {
    for (;;) {
      std::string chunk;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return stopped_ || eof_ || !chunks_.empty(); });
        if (stopped_) return;
        if (chunks_.empty()) {  // eof_ and everything before it written
          lock.unlock();
          (void)stream_.closeStdin();
          return;
        }
        chunk = std::move(chunks_.front());
        chunks_.pop_front();
        queued_ -= chunk.size();
        cv_.notify_all();
      }
      if (!stream_.writeStdin(chunk)) return;  // the process closed its stdin or ended
    }
  }

  agent::ExecStream& stream_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> chunks_;
  size_t queued_ = 0;
  bool eof_ = false, stopped_ = false;
  std::thread thread_;
};

std::string errorText(const Error& e) {
  nlohmann::json line = errorJson(errorKindName(e.kind), e.message, e.reason);
  line["type"] = "error";
  return line.dump();
}

// Agent events -> client messages, until the exit (or the agent's failure).
void pumpOutput(agent::ExecStream& stream, http::WebSocket& ws, const AnnotateExit& annotate_exit) {
  for (;;) {
    auto ev = stream.next();
    if (!ev) {
      ws.sendText(errorText(ev.error()));
      return;
    }
    if (ev->kind == agent::ExecEvent::Kind::kExit) {
      nlohmann::json exit = exitJson(ev->exit);
      annotate_exit(ev->exit, exit);
      ws.sendText(exit.dump());
      return;
    }
    ws.waitForRoom(kMaxQueued);
    char tag = ev->kind == agent::ExecEvent::Kind::kStdout ? 1 : 2;
    ws.sendBinary(std::string(1, tag) + ev->data);
  }
}

}  // namespace

void registerExecSessionRoute(Router& r) {
  r.add("GET", "/v1/sandboxes/{id}/exec", [](RouteContext& ctx) -> Status {
    if (!ctx.resp.isWebSocketUpgrade()) {
      return makeError(ErrorKind::kInvalidArgument,
                       "GET .../exec needs a WebSocket upgrade (e.g. 'space exec'); POST .../exec streams NDJSON");
    }
    // Before the upgrade, so that an unknown or stopped sandbox is an ordinary 404 or 409.
    ASSIGN_OR_RETURN(auto agent, ctx.manager.agent(ctx.param("id")));
    std::optional<uint64_t> oom_before;
    if (auto n = ctx.manager.oomKills(ctx.param("id"))) oom_before = *n;
    ASSIGN_OR_RETURN(auto ws, ctx.resp.acceptWebSocket());

    std::unique_ptr<agent::ExecStream> stream;
    std::unique_ptr<StdinFeeder> feeder;
    std::thread pump;
    std::atomic<bool> ended{false};
    bool refused = false;
    auto refuse = [&](const Error& e) {
      refused = true;
      ctx.metrics.countRejection("invalid_exec_session_message");
      ws->sendText(errorText(e));
      ws->close();
    };
    Status st = ws->run([&](bool binary, std::string data) {
      if (refused) return;
      if (!stream) {
        if (binary)
          return refuse(
              Error{ErrorKind::kInvalidArgument, 0, "the first message must be the exec request (text JSON)"});
        auto req = parseExecSessionRequest(data);
        if (!req) return refuse(req.error());
        auto started = agent->exec(*req);
        if (!started) {
          // Not a bad message: the program could not start (its reason tells a missing one from one
          // that cannot be executed).
          refused = true;
          ws->sendText(errorText(started.error()));
          ws->close();
          return;
        }
        stream = std::move(*started);
        if (req->stdin_open) feeder = std::make_unique<StdinFeeder>(*stream);
        ws->sendText(nlohmann::json{{"type", "started"}, {"pid", stream->pid()}}.dump());
        pump = std::thread([&] {
          pumpOutput(*stream, *ws, [&](const agent::ExitStatus& status, nlohmann::json& exit) {
            markOomKill(ctx, oom_before, status, exit);
          });
          ended = true;
          ws->close();
        });
        return;
      }
      if (binary) {
        if (feeder) feeder->push(std::move(data));
        return;
      }
      auto control = parseExecControl(data);
      if (!control) {
        ctx.metrics.countRejection("invalid_exec_control");
        return;
      }
      if (control->kind == ExecControl::Kind::kSignal) {
        (void)stream->signal(control->signal);
      } else if (feeder) {
        feeder->eof();
      }
    });
    // The client went away (closed, reset, killed) before the process ended: nobody will read the rest,
    // and a process left running would be one nobody can stop. The agent signals the whole group.
    if (stream && !ended) (void)stream->signal(SIGKILL);
    if (feeder) feeder->stop();
    if (pump.joinable()) pump.join();
    feeder.reset();
    if (stream) ctx.manager.execFinished(ctx.param("id"));
    (void)st;
    return ok();
  });
}

}  // namespace space::api
