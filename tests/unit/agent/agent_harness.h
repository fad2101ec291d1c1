// Starts the real space-agent binary with --listen/--root in a temporary directory for end-to-end tests.
// The binary comes from $SPACE_AGENT_BIN, else the first build-*/bin/space-agent under SPACE_SOURCE_DIR.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "agent/client/agent_client.h"

namespace space::agent::testing {

namespace fs = std::filesystem;

inline std::string findAgentBinary() {
  if (const char* env = std::getenv("SPACE_AGENT_BIN"); env && *env) return env;
#ifdef SPACE_SOURCE_DIR
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(SPACE_SOURCE_DIR, ec)) {
    if (entry.path().filename().string().rfind("build", 0) != 0) continue;
    fs::path bin = entry.path() / "bin" / "space-agent";
    if (fs::exists(bin)) return bin.string();
  }
#endif
  return {};
}

inline std::string readHostFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::string data;
  char buf[1 << 16];
  while (in.read(buf, sizeof buf) || in.gcount() > 0) data.append(buf, static_cast<size_t>(in.gcount()));
  return data;
}

inline void writeHostFile(const fs::path& p, const std::string& data) {
  std::ofstream out(p, std::ios::binary);
  out << data;
}

class AgentProcess {
 public:
  AgentProcess() {
    char tmpl[] = "/tmp/space-agent-test-XXXXXX";
    dir_ = mkdtemp(tmpl);
    root_ = dir_ / "root";
    fs::create_directories(root_);
    socket_ = (dir_ / "agent.sock").string();
  }
  ~AgentProcess() {
    stop();
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // Returns false (and the test should skip) when no binary is available. extra_args follow --root.
  bool start(const std::vector<std::string>& extra_args = {}) {
    std::string bin = findAgentBinary();
    if (bin.empty()) return false;
    std::vector<std::string> args = {bin, "--listen", socket_, "--root", root_.string()};
    args.insert(args.end(), extra_args.begin(), extra_args.end());
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_ = fork();
    if (pid_ == 0) {
      execv(bin.c_str(), argv.data());
      _exit(127);
    }
    for (int i = 0; i < 500 && !fs::exists(socket_); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    return fs::exists(socket_);
  }

  void stop() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
  }

  bool running() const { return pid_ > 0 && kill(pid_, 0) == 0 && waitpid(pid_, nullptr, WNOHANG) == 0; }

  std::shared_ptr<AgentClient> connect() {
    auto c = AgentClient::connectUnix(socket_, Duration(5000));
    EXPECT_TRUE(c.has_value()) << (c ? "" : c.error().message);
    return c ? *c : nullptr;
  }

  const fs::path& dir() const { return dir_; }
  const fs::path& root() const { return root_; }
  const std::string& socketPath() const { return socket_; }
  pid_t pid() const { return pid_; }

 private:
  fs::path dir_, root_;
  std::string socket_;
  pid_t pid_ = -1;
};

struct Collected {
  std::string out, err;
  ExitStatus exit;
  bool exited = false;
};

// Reads events until the exit event (or an error).
inline Collected collect(ExecStream& s) {
  Collected c;
  for (;;) {
    auto ev = s.next(Duration(60000));
    if (!ev) {
      ADD_FAILURE() << "stream error: " << ev.error().message;
      return c;
    }
    if (ev->kind == ExecEvent::Kind::kStdout) c.out += ev->data;
    if (ev->kind == ExecEvent::Kind::kStderr) c.err += ev->data;
    if (ev->kind == ExecEvent::Kind::kExit) {
      c.exit = ev->exit;
      c.exited = true;
      return c;
    }
  }
}

inline Collected collect(OutputReader& r) {
  Collected c;
  for (;;) {
    auto ev = r.next(Duration(60000));
    if (!ev) {
      ADD_FAILURE() << "output error: " << ev.error().message;
      return c;
    }
    if (ev->kind == ExecEvent::Kind::kStdout) c.out += ev->data;
    if (ev->kind == ExecEvent::Kind::kStderr) c.err += ev->data;
    if (ev->kind == ExecEvent::Kind::kExit) {
      c.exit = ev->exit;
      c.exited = true;
      return c;
    }
  }
}

inline ExecRequest cmd(std::vector<std::string> argv) {
  ExecRequest r;
  r.argv = std::move(argv);
  return r;
}

inline ExecRequest sh(const std::string& script) { return cmd({"/bin/sh", "-c", script}); }

#define SPACE_START_AGENT(agent)                                          \
  do {                                                                    \
    if (!(agent).start()) GTEST_SKIP() << "space-agent binary not found"; \
  } while (0)

}  // namespace space::agent::testing
