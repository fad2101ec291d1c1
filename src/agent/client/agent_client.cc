#include "agent/client/agent_client.h"

#include <sys/socket.h>
#include <sys/un.h>

#include <algorithm>
#include <cstring>
#include <functional>

#include "agent/client/connection.h"
#include "agent/client/streams.h"
#include "agent/protocol/message.h"

namespace space::agent {
namespace {

using nlohmann::json;
using protocol::FrameType;

constexpr Duration kRequestTimeout{120000};  // a simple request the agent leaves unanswered this long fails

json execJson(const char* op, const ExecRequest& req) {
  json j = {{"op", op},
            {"argv", req.argv},
            {"env", req.env},
            {"cwd", req.cwd},
            {"user", req.user},
            {"pty", req.pty},
            {"rows", req.rows},
            {"cols", req.cols},
            {"timeout_s", req.timeout_s},
            {"stdin", req.stdin_open}};
  return j;
}

Result<FileStat> fileStatFrom(const json& j) {
  if (!j.is_object()) return makeError(ErrorKind::kInternal, "agent sent a malformed stat");
  FileStat st;
  st.name = protocol::optString(j, "name");
  st.type = protocol::optString(j, "type", "other");
  st.size = static_cast<uint64_t>(protocol::optInt(j, "size", 0));
  st.mode = static_cast<uint32_t>(protocol::optInt(j, "mode", 0));
  st.uid = static_cast<uint32_t>(protocol::optInt(j, "uid", 0));
  st.gid = static_cast<uint32_t>(protocol::optInt(j, "gid", 0));
  st.mtime_unix_ms = protocol::optInt(j, "mtime_unix_ms", 0);
  st.link_target = protocol::optString(j, "link_target");
  return st;
}

ProcessInfo processInfoFrom(const json& j) {
  ProcessInfo p;
  p.id = protocol::optString(j, "id");
  p.pid = static_cast<int>(protocol::optInt(j, "pid", 0));
  if (auto it = j.find("argv"); it != j.end() && it->is_array()) {
    for (const auto& a : *it) {
      if (a.is_string()) p.argv.push_back(a.get<std::string>());
    }
  }
  p.running = protocol::optBool(j, "running", true);
  if (!p.running) p.exit = exitStatusFrom(j);
  p.output_bytes = static_cast<uint64_t>(protocol::optInt(j, "output_bytes", 0));
  p.started_unix_ms = protocol::optInt(j, "started_unix_ms", 0);
  return p;
}

class AgentClientImpl : public AgentClient {
 public:
  AgentClientImpl(std::shared_ptr<Connection> conn, json hello) : conn_(std::move(conn)), hello_(std::move(hello)) {}
  ~AgentClientImpl() override { conn_->close(); }

  bool alive() const override { return conn_->alive(); }
  json agentInfo() const override { return hello_; }

  Result<std::unique_ptr<ExecStream>> exec(const ExecRequest& req) override {
    ASSIGN_OR_RETURN(uint32_t ch, conn_->open(execJson("exec", req)));
    ASSIGN_OR_RETURN(json ev, firstEvent(ch, "started"));
    return makeExecStream(conn_, ch, static_cast<int>(protocol::optInt(ev, "pid", 0)), req.stdin_open || req.pty);
  }

  Result<ProcessInfo> startBackground(const ExecRequest& req) override {
    ASSIGN_OR_RETURN(json done, request(execJson("spawn", req)));
    ProcessInfo p = processInfoFrom(done);
    p.running = true;
    return p;
  }

  Result<std::vector<ProcessInfo>> listProcesses() override {
    ASSIGN_OR_RETURN(json done, request({{"op", "ps"}}));
    std::vector<ProcessInfo> out;
    if (auto it = done.find("processes"); it != done.end() && it->is_array()) {
      for (const auto& j : *it) out.push_back(processInfoFrom(j));
    }
    return out;
  }

  Status signalProcess(const std::string& id, int signo) override {
    TRY(request({{"op", "kill"}, {"id", id}, {"signal", signo}}));
    return ok();
  }

  Result<std::unique_ptr<OutputReader>> readOutput(const std::string& id, bool follow) override {
    ASSIGN_OR_RETURN(uint32_t ch, conn_->open({{"op", "output"}, {"id", id}, {"follow", follow}}));
    TRY(firstEvent(ch, "output"));
    return makeOutputReader(conn_, ch);
  }

  Result<std::unique_ptr<FileReader>> readFile(const std::string& path) override {
    ASSIGN_OR_RETURN(uint32_t ch, conn_->open({{"op", "read_file"}, {"path", path}}));
    ASSIGN_OR_RETURN(json ev, firstEvent(ch, "file"));
    return makeFileReader(conn_, ch, static_cast<uint64_t>(protocol::optInt(ev, "size", 0)));
  }

  Result<std::unique_ptr<FileWriter>> writeFile(const std::string& path, uint32_t mode) override {
    ASSIGN_OR_RETURN(uint32_t ch, conn_->open({{"op", "write_file"}, {"path", path}, {"mode", mode}}));
    TRY(firstEvent(ch, "ready"));
    return makeFileWriter(conn_, ch);
  }

  Result<FileStat> stat(const std::string& path) override {
    ASSIGN_OR_RETURN(json done, request({{"op", "stat"}, {"path", path}}));
    return fileStatFrom(done.value("stat", json()));
  }

  Result<std::vector<FileStat>> list(const std::string& path) override {
    std::vector<FileStat> out;
    auto collect = [&out](const json& ev) {
      if (auto it = ev.find("entries"); it != ev.end() && it->is_array()) {
        for (const auto& j : *it) {
          if (auto st = fileStatFrom(j)) out.push_back(std::move(*st));
        }
      }
    };
    ASSIGN_OR_RETURN(json done, request({{"op", "list"}, {"path", path}}, collect));
    collect(done);
    return out;
  }

  Status mkdir(const std::string& path, bool parents, uint32_t mode) override {
    TRY(request({{"op", "mkdir"}, {"path", path}, {"parents", parents}, {"mode", mode}}));
    return ok();
  }
  Status move(const std::string& from, const std::string& to) override {
    TRY(request({{"op", "move"}, {"from", from}, {"to", to}}));
    return ok();
  }
  Status remove(const std::string& path, bool recursive) override {
    TRY(request({{"op", "remove"}, {"path", path}, {"recursive", recursive}}));
    return ok();
  }

  Status setIdentity(const Identity& id) override {
    json req = {{"op", "set_identity"}, {"hostname", id.hostname}, {"env", id.env}, {"rng_seed_hex", id.rng_seed_hex}};
    if (id.clock_unix_ms != 0) req["clock_unix_ms"] = id.clock_unix_ms;
    if (!id.machine_id.empty()) req["machine_id"] = id.machine_id;
    if (!id.network.address.empty())
      req["net"] = {{"address", id.network.address},
                    {"prefix", id.network.prefix},
                    {"gateway", id.network.gateway},
                    {"nameserver", id.network.nameserver},
                    {"mac", id.network.mac}};
    if (id.generation) {
      const auto features = agentInfo().value("features", json::array());
      if (std::find(features.begin(), features.end(), "generation") != features.end()) {
        req["generation"] = {{"processes", id.generation->processes}};
        if (id.generation->signal > 0) req["generation"]["signal"] = id.generation->signal;
      } else if (id.generation->processes != "none") {
        // Going on would leave the restored processes with their copied random state, unannounced.
        return makeError(ErrorKind::kUnsupported,
                         "the guest's agent cannot tell its processes about a restore "
                         "(built before generations; rebuild the guest with scripts/vm/build-guest)");
      }
    }
    TRY(request(req));
    return ok();
  }

  Result<uint64_t> oomKills() override {
    ASSIGN_OR_RETURN(json done, request({{"op", "usage"}}));
    int64_t kills = protocol::optInt(done, "oom_kills", -1);
    if (kills < 0) return makeError(ErrorKind::kInternal, "agent sent usage without oom_kills");
    return static_cast<uint64_t>(kills);
  }

  Status ping(Duration timeout) override {
    TRY(request({{"op", "ping"}}, {}, timeout));
    return ok();
  }

 private:
  // Sends a request and waits for its final event; intermediate events go to on_event.
  Result<json> request(const json& req, const std::function<void(const json&)>& on_event = {},
                       Duration timeout = kRequestTimeout) {
    ASSIGN_OR_RETURN(uint32_t ch, conn_->open(req));
    struct Release {
      Connection& c;
      uint32_t ch;
      ~Release() { c.release(ch); }
    } release{*conn_, ch};
    for (;;) {
      ASSIGN_OR_RETURN(Incoming in, conn_->next(ch, timeout));
      if (in.type != FrameType::kControl) continue;
      std::string ev = protocol::optString(in.msg, "event");
      if (ev == "error") return tl::unexpected(protocol::errorFromEvent(in.msg));
      if (ev == "done") return std::move(in.msg);
      if (on_event) on_event(in.msg);
    }
  }

  // Waits for the event that confirms a streaming operation started; releases the channel on failure.
  Result<json> firstEvent(uint32_t ch, const char* want) {
    auto in = conn_->next(ch, kRequestTimeout);
    std::string ev = in ? protocol::optString(in->msg, "event") : std::string();
    if (in && ev == want) return std::move(in->msg);
    if (in && ev != "error" && ev != "done" && ev != "exit") (void)conn_->sendFrame(FrameType::kCancel, ch, {});
    conn_->release(ch);
    if (!in) return tl::unexpected(in.error());
    if (ev == "error") return tl::unexpected(protocol::errorFromEvent(in->msg));
    return makeError(ErrorKind::kInternal, "agent answered \"{}\" where \"{}\" was expected", ev, want);
  }

  std::shared_ptr<Connection> conn_;
  json hello_;
};

Result<std::shared_ptr<AgentClient>> finishAdopt(UniqueFd fd, Duration timeout) {
  protocol::Decoder decoder;
  ASSIGN_OR_RETURN(json hello, Connection::handshake(fd.get(), decoder, timeout));
  auto conn = std::make_shared<Connection>(std::move(fd), std::move(decoder));
  conn->start();
  return std::shared_ptr<AgentClient>(std::make_shared<AgentClientImpl>(std::move(conn), std::move(hello)));
}

}  // namespace

Result<std::shared_ptr<AgentClient>> AgentClient::connectUnix(const std::string& socket_path, Duration timeout) {
  UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) return sysError(errno, "socket AF_UNIX");
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_path.size() >= sizeof addr.sun_path)
    return makeError(ErrorKind::kInvalidArgument, "socket path too long: {}", socket_path);
  std::memcpy(addr.sun_path, socket_path.c_str(), socket_path.size() + 1);
  // connect() on a unix socket whose backlog is full blocks; SO_SNDTIMEO bounds that wait.
  timeval tv{static_cast<time_t>(timeout.count() / 1000), static_cast<suseconds_t>((timeout.count() % 1000) * 1000)};
  setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  if (connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) < 0) {
    Error e = sysError(errno, "connect {}", socket_path).value();
    e.kind = ErrorKind::kUnavailable;
    return tl::unexpected(e);
  }
  return finishAdopt(std::move(fd), timeout);
}

Result<std::shared_ptr<AgentClient>> AgentClient::adopt(int fd, Duration timeout) {
  return finishAdopt(UniqueFd(fd), timeout);
}

Status writeWholeFile(AgentClient& agent, const std::string& path, const std::string& content, uint32_t mode) {
  ASSIGN_OR_RETURN(auto writer, agent.writeFile(path, mode));
  TRY(writer->write(content));
  TRY(writer->finish());
  return ok();
}

}  // namespace space::agent
