// In-memory SandboxManager, Store and AgentClient for testing the API layer without sandboxes.
#pragma once

#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>

#include "core/manager.h"

namespace space::api::testing {

class FakeStore : public store::Store {
 public:
  Status putTemplate(const store::TemplateRecord&) override { return ok(); }
  Result<store::TemplateRecord> getTemplate(const std::string& n) override {
    return makeError(ErrorKind::kNotFound, "no template {}", n);
  }
  Result<std::vector<store::TemplateRecord>> listTemplates() override { return std::vector<store::TemplateRecord>{}; }
  Status deleteTemplate(const std::string&) override { return ok(); }
  Result<int> countSandboxesUsingTemplate(const std::string&) override { return 0; }
  Status insertSandbox(const store::SandboxRecord&) override { return ok(); }
  Status updateSandbox(const store::SandboxRecord&) override { return ok(); }
  Result<store::SandboxRecord> getSandbox(const std::string& id) override {
    return makeError(ErrorKind::kNotFound, "{}", id);
  }
  Result<std::vector<store::SandboxRecord>> listSandboxes(const store::SandboxFilter&) override {
    return std::vector<store::SandboxRecord>{};
  }
  Status deleteSandbox(const std::string&) override { return ok(); }
  Result<int> freeUidSlot() override { return 0; }
  Result<std::pair<store::ApiKeyRecord, std::string>> createApiKey(const std::string& name) override {
    std::lock_guard lock(mu);
    store::ApiKeyRecord r{"key-" + std::to_string(keys.size() + 1), name, "sk_test", 1, 0};
    keys.push_back(r);
    return std::make_pair(r, std::string("sk_test_secret_") + name);
  }
  Result<std::vector<store::ApiKeyRecord>> listApiKeys() override {
    std::lock_guard lock(mu);
    return keys;
  }
  Result<size_t> purgeRevokedApiKeys(int64_t before_ms) override {
    std::lock_guard lock(mu);
    size_t n = keys.size();
    std::erase_if(keys, [&](const store::ApiKeyRecord& k) { return k.revoked_ms != 0 && k.revoked_ms <= before_ms; });
    return n - keys.size();
  }
  Status revokeApiKey(const std::string& id) override {
    std::lock_guard lock(mu);
    for (auto& k : keys) {
      if (k.id == id || k.name == id) {
        k.revoked_ms = 2;
        return ok();
      }
    }
    return makeError(ErrorKind::kNotFound, "no key {}", id);
  }
  Result<store::ApiKeyRecord> verifyApiKey(const std::string& secret) override {
    std::lock_guard lock(mu);
    for (auto& k : keys) {
      if (k.revoked_ms == 0 && "sk_test_secret_" + k.name == secret) return k;
    }
    return makeError(ErrorKind::kUnauthenticated, "bad key");
  }
  std::mutex mu;
  std::vector<store::ApiKeyRecord> keys;
};

// Emits a scripted list of events.
class FakeExecStream : public agent::ExecStream {
 public:
  FakeExecStream(std::deque<agent::ExecEvent> events, std::pair<int, int>* resize_sink)
      : events_(std::move(events)), resize_sink_(resize_sink) {}
  int pid() const override { return 42; }
  Result<agent::ExecEvent> next(std::optional<agent::Duration>) override {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return !events_.empty() || killed_; });
    if (events_.empty()) {
      agent::ExecEvent ev;
      ev.kind = agent::ExecEvent::Kind::kExit;
      ev.exit.signal = 9;
      killed_ = false;
      ended_ = true;
      return ev;
    }
    auto ev = events_.front();
    events_.pop_front();
    return ev;
  }
  Status writeStdin(std::string_view data) override {
    std::lock_guard lock(mu_);
    stdin_ += data;
    // Echo, like a terminal.
    agent::ExecEvent ev;
    ev.data = std::string(data);
    events_.push_front(ev);
    cv_.notify_all();
    return ok();
  }
  Status closeStdin() override { return ok(); }
  Status resize(uint16_t rows, uint16_t cols) override {
    std::lock_guard lock(mu_);
    *resize_sink_ = {rows, cols};
    return ok();
  }
  Status signal(int) override {
    std::lock_guard lock(mu_);
    if (!ended_) killed_ = true;
    cv_.notify_all();
    return ok();
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<agent::ExecEvent> events_;
  std::string stdin_;
  std::pair<int, int>* resize_sink_;
  bool killed_ = false, ended_ = false;
};

class FakeFileWriter : public agent::FileWriter {
 public:
  explicit FakeFileWriter(std::string* sink, uint64_t* count) : sink_(sink), count_(count) {}
  Status write(std::string_view d) override {
    *count_ += d.size();
    if (sink_->size() < 4096) sink_->append(d.substr(0, 4096));
    return ok();
  }
  Result<uint64_t> finish() override { return *count_; }
  std::string* sink_;
  uint64_t* count_;
};

class FakeFileReader : public agent::FileReader {
 public:
  explicit FakeFileReader(uint64_t size) : size_(size) {}
  uint64_t size() const override { return size_; }
  Result<std::string> read(size_t max) override {
    size_t n = static_cast<size_t>(std::min<uint64_t>(max, size_ - pos_));
    std::string out;
    for (size_t i = 0; i < n; ++i) out.push_back(static_cast<char>('a' + (pos_ + i) % 26));
    pos_ += n;
    return out;
  }
  uint64_t size_, pos_ = 0;
};

class FakeAgent : public agent::AgentClient {
 public:
  bool alive() const override { return true; }
  nlohmann::json agentInfo() const override { return {}; }
  Result<std::unique_ptr<agent::ExecStream>> exec(const agent::ExecRequest& req) override {
    last_exec = req;
    std::deque<agent::ExecEvent> ev;
    if (!req.pty) {
      agent::ExecEvent out;
      out.data = "hello\n";
      ev.push_back(out);
      agent::ExecEvent err;
      err.kind = agent::ExecEvent::Kind::kStderr;
      err.data = "oops";
      ev.push_back(err);
      agent::ExecEvent exit;
      exit.kind = agent::ExecEvent::Kind::kExit;
      exit.exit.exit_code = 3;
      ev.push_back(exit);
    }
    return std::unique_ptr<agent::ExecStream>(new FakeExecStream(std::move(ev), &last_resize));
  }
  Result<agent::ProcessInfo> startBackground(const agent::ExecRequest& req) override {
    agent::ProcessInfo p;
    p.id = "p1";
    p.pid = 7;
    p.argv = req.argv;
    return p;
  }
  Result<std::vector<agent::ProcessInfo>> listProcesses() override { return std::vector<agent::ProcessInfo>{}; }
  Status signalProcess(const std::string& id, int signo) override {
    last_signal = signo;
    return id == "p1" ? ok() : Status(makeError(ErrorKind::kNotFound, "no process {}", id));
  }
  Result<std::unique_ptr<agent::OutputReader>> readOutput(const std::string&, bool) override {
    return makeError(ErrorKind::kUnsupported, "not in the fake");
  }
  Result<std::unique_ptr<agent::FileReader>> readFile(const std::string& path) override {
    if (path == "/missing") return makeError(ErrorKind::kNotFound, "{} does not exist", path);
    return std::unique_ptr<agent::FileReader>(new FakeFileReader(download_size));
  }
  Result<std::unique_ptr<agent::FileWriter>> writeFile(const std::string& path, uint32_t mode) override {
    last_mode = mode;
    uploaded.clear();
    uploaded_bytes = 0;
    return std::unique_ptr<agent::FileWriter>(new FakeFileWriter(&uploaded, &uploaded_bytes));
  }
  Result<agent::FileStat> stat(const std::string& path) override {
    agent::FileStat s;
    s.name = path;
    s.type = "file";
    s.size = 5;
    return s;
  }
  Result<std::vector<agent::FileStat>> list(const std::string&) override { return std::vector<agent::FileStat>{}; }
  Status mkdir(const std::string&, bool, uint32_t) override { return ok(); }
  Status move(const std::string&, const std::string&) override { return ok(); }
  Status remove(const std::string&, bool) override { return ok(); }
  Status setIdentity(const agent::Identity&) override { return ok(); }
  Status ping(agent::Duration) override { return ok(); }

  agent::ExecRequest last_exec;
  std::pair<int, int> last_resize{0, 0};
  int last_signal = 0;
  uint32_t last_mode = 0;
  std::string uploaded;
  uint64_t uploaded_bytes = 0;
  uint64_t download_size = 100;
};

class FakeManager : public core::SandboxManager {
 public:
  Result<core::SandboxView> create(const core::CreateSandbox& cmd) override {
    std::lock_guard lock(mu);
    last_create = cmd;
    core::SandboxView v;
    v.record.id = "sb-" + std::to_string(++next_id);
    v.record.state = store::SandboxState::kRunning;
    v.record.labels = cmd.labels;
    sandboxes[v.record.id] = v;
    return v;
  }
  Result<core::SandboxView> get(const std::string& id) override {
    std::lock_guard lock(mu);
    auto it = sandboxes.find(id);
    if (it == sandboxes.end()) return makeError(ErrorKind::kNotFound, "no sandbox {}", id);
    return it->second;
  }
  Result<std::vector<core::SandboxView>> list(const core::ListSandboxes&) override {
    std::lock_guard lock(mu);
    std::vector<core::SandboxView> out;
    for (auto& [id, v] : sandboxes) out.push_back(v);
    return out;
  }
  Status destroy(const std::string& id) override {
    std::lock_guard lock(mu);
    if (!sandboxes.erase(id)) return makeError(ErrorKind::kNotFound, "no sandbox {}", id);
    return ok();
  }
  Status pause(const std::string& id) override {
    TRY(get(id));
    return makeError(ErrorKind::kUnsupported, "pause is not implemented yet");
  }
  Status resume(const std::string&) override {
    return makeError(ErrorKind::kUnsupported, "resume is not implemented yet");
  }
  Result<std::shared_ptr<agent::AgentClient>> agent(const std::string& id) override {
    if (!get(id)) return makeError(ErrorKind::kNotFound, "no sandbox {}", id);
    return std::static_pointer_cast<agent::AgentClient>(fake_agent);
  }
  Result<store::TemplateRecord> buildTemplate(const core::BuildTemplate& cmd,
                                              const core::ProgressFn& progress) override {
    progress("step 1");
    progress("step 2");
    store::TemplateRecord t;
    t.name = cmd.name;
    t.id = "sha256:x";
    return t;
  }
  Result<std::vector<store::TemplateRecord>> listTemplates() override { return std::vector<store::TemplateRecord>{}; }
  Status removeTemplate(const std::string& name) override {
    return makeError(ErrorKind::kNotFound, "no template {}", name);
  }
  store::Store& store() override { return fake_store; }
  std::string metricsText() override { return "space_sandboxes 0\n"; }
  Result<nlohmann::json> warmTemplate(const std::string& name) override {
    return makeError(ErrorKind::kUnavailable, "the vm tier is not available on this node: fake");
  }
  nlohmann::json isolationInfo() override {
    return {{"jail", {{"available", true}}}, {"vm", {{"available", false}, {"reason", "fake"}}}, {"auto", "jail"}};
  }
  nlohmann::json egressInfo() const override { return {{"on", false}, {"reason", "fake"}}; }

  std::mutex mu;
  int next_id = 0;
  std::map<std::string, core::SandboxView> sandboxes;
  core::CreateSandbox last_create;
  FakeStore fake_store;
  std::shared_ptr<FakeAgent> fake_agent = std::make_shared<FakeAgent>();
};

}  // namespace space::api::testing
