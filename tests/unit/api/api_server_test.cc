// The API end to end over real sockets (unix and TCP), against an in-memory manager.
#include "api/api_server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>

#include "common/unique_fd.h"
#include "fake_manager.h"
#include "http/base64.h"
#include "http/client.h"
#include "http/server.h"

namespace space::api {
namespace {

using nlohmann::json;

// Raw sockets, for peers that misbehave on purpose.
UniqueFd connectUnix(const std::string& path) {
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
  EXPECT_EQ(::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0) << std::strerror(errno);
  return fd;
}

// From source (any 127/8 address is loopback on Linux) to 127.0.0.1:port.
UniqueFd connectTcp(const std::string& source, uint16_t port) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in from{};
  from.sin_family = AF_INET;
  ::inet_pton(AF_INET, source.c_str(), &from.sin_addr);
  EXPECT_EQ(::bind(fd.get(), reinterpret_cast<sockaddr*>(&from), sizeof from), 0) << std::strerror(errno);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(port);
  ::inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
  EXPECT_EQ(::connect(fd.get(), reinterpret_cast<sockaddr*>(&to), sizeof to), 0) << std::strerror(errno);
  return fd;
}

void sendAll(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n <= 0) return;  // the server may have given up on the peer already
    data.remove_prefix(static_cast<size_t>(n));
  }
}

struct Received {
  std::string data;
  bool closed = false;  // the server closed the connection
};

// What the server sends within timeout, stopping early when it closes.
Received receive(int fd, std::chrono::milliseconds timeout) {
  Received r;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd p{fd, POLLIN, 0};
    if (left.count() < 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0) return r;
    char buf[4096];
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) {
      r.closed = true;
      return r;
    }
    r.data.append(buf, static_cast<size_t>(n));
  }
}

bool startsWith(const std::string& s, std::string_view prefix) { return s.compare(0, prefix.size(), prefix) == 0; }

class ApiServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("space-api-test-" + std::to_string(getpid()) + "-" + std::to_string(counter_++));
    std::filesystem::create_directories(dir_);
    socket_ = (dir_ / "run" / "spaced.sock").string();
    api_ = std::make_unique<ApiServer>(manager_, ApiOptions{1 << 20, 8ull << 30});
    http::ServerOptions opts = serverOptions();
    server_ = std::make_unique<http::Server>(
        [this](http::Request& rq, http::BodyReader& b, http::ResponseWriter& rs) { api_->handle(rq, b, rs); }, opts,
        [this](const std::string& reason) { api_->metrics().countRejection(reason); });
    ASSERT_TRUE(server_->listenUnix(socket_));
    ASSERT_TRUE(server_->listenTcp("127.0.0.1:0"));
    thread_ = std::thread([this] { server_->run(std::chrono::seconds(2)); });
  }
  virtual http::ServerOptions serverOptions() {
    http::ServerOptions opts;
    opts.head_timeout = std::chrono::seconds(2);
    return opts;
  }
  void TearDown() override {
    server_->stop();
    thread_.join();
    server_.reset();
    std::filesystem::remove_all(dir_);
  }
  http::Client unixClient() { return http::Client(*http::parseEndpoint("unix://" + socket_), ""); }
  http::Client tcpClient(const std::string& key) {
    return http::Client(*http::parseEndpoint("http://127.0.0.1:" + std::to_string(server_->tcpPort())), key);
  }
  json call(const std::string& method, const std::string& target, const std::optional<std::string>& body,
            int want_status) {
    auto c = unixClient();
    auto r = c.request(method, target, body);
    EXPECT_TRUE(r) << (r ? "" : r.error().message);
    if (!r) return {};
    EXPECT_EQ(r->status, want_status) << method << " " << target << ": " << r->body;
    if (r->body.empty()) return {};
    return json::parse(r->body, nullptr, false);
  }

  static inline int counter_ = 0;
  std::filesystem::path dir_;
  std::string socket_;
  testing::FakeManager manager_;
  std::unique_ptr<ApiServer> api_;
  std::unique_ptr<http::Server> server_;
  std::thread thread_;
};

TEST_F(ApiServerTest, HealthzAndSocketMode) {
  EXPECT_EQ(call("GET", "/healthz", std::nullopt, 200)["status"], "ok");
  auto perms = std::filesystem::status(socket_).permissions();
  EXPECT_EQ(perms & std::filesystem::perms::all,
            std::filesystem::perms::owner_read | std::filesystem::perms::owner_write |
                std::filesystem::perms::group_read | std::filesystem::perms::group_write);
}

TEST_F(ApiServerTest, CreateParsesIntoCommand) {
  auto j = call(
      "POST", "/v1/sandboxes",
      R"({"template":"python","cpus":0.5,"memory_mib":256,"pids":64,"disk_mib":100,"env":{"A":"1"},"labels":{"team":"x"},"ttl_s":60})",
      201);
  EXPECT_EQ(j["id"], "sb-1");
  EXPECT_EQ(*manager_.last_create.cpu_millis, 500u);
  EXPECT_EQ(*manager_.last_create.memory_bytes, 256ull << 20);
  EXPECT_EQ(manager_.last_create.env.at("A"), "1");
  EXPECT_EQ(manager_.last_create.ttl_s, 60);
  EXPECT_EQ(call("GET", "/v1/sandboxes/sb-1", std::nullopt, 200)["id"], "sb-1");
  EXPECT_EQ(call("GET", "/v1/sandboxes?label=team=x&state=running", std::nullopt, 200)["sandboxes"].size(), 1u);
  call("DELETE", "/v1/sandboxes/sb-1", std::nullopt, 204);
  EXPECT_EQ(call("GET", "/v1/sandboxes/sb-1", std::nullopt, 404)["error"]["code"], "not_found");
}

TEST_F(ApiServerTest, BadInputIsAnsweredAndCounted) {
  auto j = call("POST", "/v1/sandboxes", R"({"memory_mib": 1})", 400);
  EXPECT_EQ(j["error"]["code"], "invalid_argument");
  EXPECT_NE(j["error"]["message"].get<std::string>().find("memory_mib"), std::string::npos);
  call("POST", "/v1/sandboxes", "{not json", 400);
  call("POST", "/v1/sandboxes", R"({"memory_mb": 512})", 400);
  call("POST", "/v1/sandboxes", R"({"cpus": -1})", 400);
  call("POST", "/v1/sandboxes", R"({"cpus": "2"})", 400);
  call("POST", "/v1/sandboxes", R"({"pids": 2})", 400);
  call("POST", "/v1/sandboxes", R"([1,2])", 400);
  call("GET", "/v1/sandboxes/..", std::nullopt, 400);
  call("GET", "/v1/sandboxes/a%00b", std::nullopt, 400);
  call("GET", "/v1/nothing", std::nullopt, 404);
  call("PATCH", "/v1/sandboxes", std::nullopt, 405);
  EXPECT_EQ(call("POST", "/v1/sandboxes/sb-9/pause", std::nullopt, 404)["error"]["code"], "not_found");
  call("POST", "/v1/sandboxes", "{}", 201);
  EXPECT_EQ(call("POST", "/v1/sandboxes/sb-1/pause", std::nullopt, 501)["error"]["code"], "unsupported");
  EXPECT_GE(api_->metrics().rejections("invalid_argument"), 7u);
  auto c = unixClient();
  auto metrics = c.request("GET", "/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("space_api_rejections_total{reason=\"invalid_argument\"}"), std::string::npos);
  EXPECT_NE(metrics->body.find("route=\"/v1/sandboxes\",status=\"400\""), std::string::npos);
  EXPECT_NE(metrics->body.find("space_sandboxes 0"), std::string::npos);
}

TEST_F(ApiServerTest, LimitsOnHeadAndBody) {
  auto c = unixClient();
  std::string big(2 << 20, ' ');
  auto r = c.request("POST", "/v1/sandboxes", "{" + big + "}");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 413);
  r = c.request("GET", "/healthz?x=" + std::string(20000, 'a'));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 431);
  EXPECT_EQ(api_->metrics().rejections("header_too_large"), 1u);
  // The server is still there.
  EXPECT_EQ(call("GET", "/healthz", std::nullopt, 200)["status"], "ok");
}

TEST_F(ApiServerTest, TcpNeedsAKeyAndCannotManageKeys) {
  auto anon = tcpClient("");
  auto r = anon.request("GET", "/v1/sandboxes");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  // Liveness is public (probes carry no key); nothing else is, not even another method on its path.
  r = anon.request("GET", "/healthz");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  r = anon.request("POST", "/healthz", std::string("{}"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  r = anon.request("GET", "/metrics");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  auto key = call("POST", "/v1/keys", R"({"name":"ci"})", 201);
  EXPECT_EQ(key["secret"], "sk_test_secret_ci");
  auto authed = tcpClient("sk_test_secret_ci");
  r = authed.request("GET", "/v1/sandboxes");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  r = authed.request("POST", "/v1/keys", std::string(R"({"name":"more"})"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 403);
  call("DELETE", "/v1/keys/key-1", std::nullopt, 204);
  r = authed.request("GET", "/v1/sandboxes");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
}

TEST_F(ApiServerTest, ExecStreamsNdjson) {
  call("POST", "/v1/sandboxes", "{}", 201);
  auto c = unixClient();
  std::string out;
  auto r = c.stream("POST", "/v1/sandboxes/sb-1/exec",
                    std::string(R"({"shell":"echo hello","timeout_s":5,"stdin":"in"})"), [&](std::string_view d) {
                      out += d;
                      return ok();
                    });
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  std::vector<json> lines;
  size_t start = 0;
  for (size_t nl; (nl = out.find('\n', start)) != std::string::npos; start = nl + 1)
    lines.push_back(json::parse(out.substr(start, nl - start)));
  ASSERT_GE(lines.size(), 4u);
  EXPECT_EQ(lines.front()["type"], "started");
  EXPECT_EQ(lines.back()["type"], "exit");
  EXPECT_EQ(lines.back()["exit_code"], 3);
  std::string stdout_text;
  for (auto& l : lines) {
    if (l["type"] == "stdout") stdout_text += *http::base64Decode(l["data"].get<std::string>());
  }
  EXPECT_NE(stdout_text.find("hello\n"), std::string::npos);
  EXPECT_EQ(manager_.fake_agent->last_exec.argv, (std::vector<std::string>{"/bin/sh", "-c", "echo hello"}));
  EXPECT_TRUE(manager_.fake_agent->last_exec.stdin_open);
  call("POST", "/v1/sandboxes/sb-1/exec", R"({"cmd":["ls"],"shell":"ls"})", 400);
  call("POST", "/v1/sandboxes/sb-1/exec", R"({"cmd":[]})", 400);
  call("POST", "/v1/sandboxes/sb-404/exec", R"({"cmd":["ls"]})", 404);
}

TEST_F(ApiServerTest, FilesStreamBothWays) {
  call("POST", "/v1/sandboxes", "{}", 201);
  auto c = unixClient();
  const uint64_t size = 64ull << 20;
  uint64_t produced = 0;
  auto r = c.upload("PUT", "/v1/sandboxes/sb-1/files?path=/root/big&mode=0600", size,
                    [&](char* out, size_t max) -> Result<size_t> {
                      size_t n = static_cast<size_t>(std::min<uint64_t>(max, size - produced));
                      std::memset(out, 'x', n);
                      produced += n;
                      return n;
                    });
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->status, 201) << r->body;
  EXPECT_EQ(manager_.fake_agent->uploaded_bytes, size);
  EXPECT_EQ(manager_.fake_agent->last_mode, 0600u);

  manager_.fake_agent->download_size = 3 << 20;
  uint64_t got = 0;
  r = c.stream("GET", "/v1/sandboxes/sb-1/files?path=/root/big", std::nullopt, [&](std::string_view d) {
    got += d.size();
    return ok();
  });
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->headers["content-length"], std::to_string(3 << 20));
  EXPECT_EQ(got, 3u << 20);
  call("GET", "/v1/sandboxes/sb-1/files?path=/missing", std::nullopt, 404);
  call("GET", "/v1/sandboxes/sb-1/files?path=relative", std::nullopt, 400);
  EXPECT_EQ(call("GET", "/v1/sandboxes/sb-1/files/stat?path=/etc/hosts", std::nullopt, 200)["type"], "file");
  call("GET", "/v1/sandboxes/sb-1/files/list?path=/", std::nullopt, 200);
  call("POST", "/v1/sandboxes/sb-1/files/mkdir", R"({"path":"/a/b","parents":true})", 201);
  call("POST", "/v1/sandboxes/sb-1/files/move", R"({"from":"/a","to":"/c"})", 200);
  call("DELETE", "/v1/sandboxes/sb-1/files?path=/c&recursive=1", std::nullopt, 204);
}

TEST_F(ApiServerTest, ProcessesAndTemplates) {
  call("POST", "/v1/sandboxes", "{}", 201);
  EXPECT_EQ(call("POST", "/v1/sandboxes/sb-1/processes", R"({"cmd":["sleep","10"]})", 201)["id"], "p1");
  call("POST", "/v1/sandboxes/sb-1/processes", R"({"cmd":["sleep"],"timeout_s":1})", 400);
  call("POST", "/v1/sandboxes/sb-1/processes/p1/signal", R"({"signal":"KILL"})", 200);
  EXPECT_EQ(manager_.fake_agent->last_signal, 9);
  call("POST", "/v1/sandboxes/sb-1/processes/p1/signal", R"({"signal":"NOPE"})", 400);
  call("GET", "/v1/sandboxes/sb-1/processes/p1/logs?follow=1", std::nullopt, 501);

  auto c = unixClient();
  std::string out;
  auto r =
      c.stream("POST", "/v1/templates", std::string(R"({"name":"py","kind":"debootstrap","packages":["python3"]})"),
               [&](std::string_view d) {
                 out += d;
                 return ok();
               });
  ASSERT_TRUE(r);
  EXPECT_NE(out.find(R"("line":"step 2")"), std::string::npos);
  EXPECT_NE(out.find(R"("type":"done")"), std::string::npos);
  call("POST", "/v1/templates", R"({"name":"py","kind":"debootstrap","packages":["a;rm -rf /"]})", 400);
  call("POST", "/v1/templates", R"({"name":"py","kind":"dir"})", 400);
  call("DELETE", "/v1/templates/nope", std::nullopt, 404);
}

TEST_F(ApiServerTest, PtyOverWebSocket) {
  call("POST", "/v1/sandboxes", "{}", 201);
  auto c = unixClient();
  auto ws = c.websocket("/v1/sandboxes/sb-1/pty?cmd=/bin/bash&rows=30&cols=100");
  ASSERT_TRUE(ws) << ws.error().message;
  (*ws)->sendText(R"({"type":"resize","rows":40,"cols":120})");
  (*ws)->sendBinary("ls\n");
  std::string echoed;
  Status st = (*ws)->run([&](bool binary, std::string data) {
    if (binary) echoed += data;
    if (echoed == "ls\n") (*ws)->close();
  });
  EXPECT_TRUE(st) << st.error().message;
  EXPECT_EQ(echoed, "ls\n");
  EXPECT_EQ(manager_.fake_agent->last_exec.argv, std::vector<std::string>{"/bin/bash"});
  EXPECT_TRUE(manager_.fake_agent->last_exec.pty);
  EXPECT_EQ(manager_.fake_agent->last_exec.rows, 30);
  EXPECT_EQ(manager_.fake_agent->last_resize, (std::pair<int, int>{40, 120}));
  // A plain GET on the PTY route is refused, not crashed on.
  call("GET", "/v1/sandboxes/sb-1/pty", std::nullopt, 400);
}

TEST_F(ApiServerTest, TcpAuthFailureEndsTheConnection) {
  auto anon = connectTcp("127.0.0.1", server_->tcpPort());
  sendAll(anon.get(), "GET /v1/sandboxes HTTP/1.1\r\nHost: x\r\n\r\n");
  // Well before the 2 s head deadline: the server closes because of the 401, not because of idleness.
  auto r = receive(anon.get(), std::chrono::milliseconds(1000));
  EXPECT_TRUE(startsWith(r.data, "HTTP/1.1 401")) << r.data;
  EXPECT_NE(r.data.find("Connection: close"), std::string::npos) << r.data;
  EXPECT_TRUE(r.closed);

  // A request with a valid key keeps its connection.
  call("POST", "/v1/keys", R"({"name":"ci"})", 201);
  auto authed = connectTcp("127.0.0.1", server_->tcpPort());
  sendAll(authed.get(), "GET /v1/sandboxes HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk_test_secret_ci\r\n\r\n");
  r = receive(authed.get(), std::chrono::milliseconds(500));
  EXPECT_TRUE(startsWith(r.data, "HTTP/1.1 200")) << r.data;
  EXPECT_FALSE(r.closed);
}

// Short deadlines, default limits.
class ApiServerDeadlinesTest : public ApiServerTest {
 protected:
  http::ServerOptions serverOptions() override {
    http::ServerOptions opts;
    opts.head_timeout = std::chrono::milliseconds(1000);
    opts.body_timeout = std::chrono::milliseconds(1000);
    return opts;
  }
};

TEST_F(ApiServerDeadlinesTest, HeadThatStopsArrivingIs408) {
  auto partial = connectUnix(socket_);
  auto silent = connectUnix(socket_);
  auto t0 = std::chrono::steady_clock::now();
  sendAll(partial.get(), "GET /healthz HTTP/1.1\r\nHost: x\r\n");
  auto r = receive(partial.get(), std::chrono::milliseconds(4000));
  auto waited = std::chrono::steady_clock::now() - t0;
  EXPECT_TRUE(startsWith(r.data, "HTTP/1.1 408")) << r.data;
  EXPECT_NE(r.data.find("request_timeout"), std::string::npos) << r.data;
  EXPECT_TRUE(r.closed);
  EXPECT_GE(waited, std::chrono::milliseconds(900));
  // A connection that never said anything is closed without an answer.
  r = receive(silent.get(), std::chrono::milliseconds(2000));
  EXPECT_EQ(r.data, "");
  EXPECT_TRUE(r.closed);
  EXPECT_GE(api_->metrics().rejections("request_timeout"), 1u);
  EXPECT_GE(api_->metrics().rejections("idle_timeout"), 1u);
}

TEST_F(ApiServerDeadlinesTest, HeadDeadlineIsAbsolute) {
  // One byte every 200 ms never counts as progress: the head has 1 s from the start, all told.
  auto slow = connectUnix(socket_);
  std::string head = "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: " + std::string(40, 'a') + "\r\n\r\n";
  auto t0 = std::chrono::steady_clock::now();
  Received r;
  for (char c : head) {
    sendAll(slow.get(), std::string_view(&c, 1));
    r = receive(slow.get(), std::chrono::milliseconds(200));
    if (!r.data.empty() || r.closed) break;
  }
  if (!r.closed) {
    auto rest = receive(slow.get(), std::chrono::milliseconds(2000));
    r.data += rest.data;
    r.closed = rest.closed;
  }
  EXPECT_TRUE(startsWith(r.data, "HTTP/1.1 408")) << r.data;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(3000));
}

TEST_F(ApiServerDeadlinesTest, BodyThatStopsArrivingIs408) {
  auto stalled = connectUnix(socket_);
  sendAll(stalled.get(),
          "POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{");
  auto r = receive(stalled.get(), std::chrono::milliseconds(4000));
  EXPECT_TRUE(startsWith(r.data, "HTTP/1.1 408")) << r.data;
  EXPECT_NE(r.data.find("request body stopped arriving"), std::string::npos) << r.data;
  EXPECT_TRUE(r.closed);
  EXPECT_EQ(api_->metrics().rejections("request_timeout"), 1u);
  // Nothing was created from half a body.
  EXPECT_EQ(call("GET", "/v1/sandboxes", std::nullopt, 200)["sandboxes"].size(), 0u);
}

TEST_F(ApiServerDeadlinesTest, BodyDeadlineIsInactivityNotTotal) {
  // 10 bytes over about 3 s, never more than 300 ms apart: slower than the deadline in total, but
  // always progressing.
  auto slow = connectUnix(socket_);
  sendAll(slow.get(),
          "POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 10\r\n\r\n");
  std::string body = "{}        ";
  for (char c : body) {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    sendAll(slow.get(), std::string_view(&c, 1));
  }
  auto r = receive(slow.get(), std::chrono::milliseconds(2000));
  EXPECT_TRUE(startsWith(r.data, "HTTP/1.1 201")) << r.data;
}

// Small limits, deadlines long enough not to interfere.
class ApiServerLimitsTest : public ApiServerTest {
 protected:
  http::ServerOptions serverOptions() override {
    http::ServerOptions opts;
    opts.limits.max_connections = 8;
    opts.limits.unix_reserve = 2;
    opts.limits.max_per_source = 3;
    opts.limits.max_unauthenticated = 4;
    opts.head_timeout = std::chrono::seconds(5);
    opts.body_timeout = std::chrono::seconds(5);
    return opts;
  }
};

TEST_F(ApiServerLimitsTest, OneSourceCannotTakeEveryTcpSlot) {
  call("POST", "/v1/keys", R"({"name":"ci"})", 201);
  std::vector<UniqueFd> mine;
  for (int i = 0; i < 3; ++i) mine.push_back(connectTcp("127.0.0.1", server_->tcpPort()));
  auto fourth = connectTcp("127.0.0.1", server_->tcpPort());
  sendAll(fourth.get(), "GET /v1/sandboxes HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk_test_secret_ci\r\n\r\n");
  auto r = receive(fourth.get(), std::chrono::milliseconds(2000));
  EXPECT_TRUE(startsWith(r.data, "HTTP/1.1 503")) << r.data;
  EXPECT_NE(r.data.find("too many connections from this address"), std::string::npos) << r.data;
  EXPECT_EQ(api_->metrics().rejections("source_connection_limit"), 1u);
  // Another address and the unix socket are served.
  auto other = connectTcp("127.0.0.2", server_->tcpPort());
  sendAll(other.get(), "GET /v1/sandboxes HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk_test_secret_ci\r\n\r\n");
  r = receive(other.get(), std::chrono::milliseconds(2000));
  EXPECT_TRUE(startsWith(r.data, "HTTP/1.1 200")) << r.data;
  EXPECT_EQ(call("GET", "/healthz", std::nullopt, 200)["status"], "ok");
  // The source's connections were not displaced for it.
  for (auto& fd : mine) EXPECT_FALSE(receive(fd.get(), std::chrono::milliseconds(0)).closed);
}

TEST_F(ApiServerLimitsTest, UnauthenticatedPoolMakesRoomFromTheLongestWaiting) {
  call("POST", "/v1/keys", R"({"name":"ci"})", 201);
  // Four silent connections fill the unauthenticated pool (two sources, within their shares).
  std::vector<UniqueFd> silent;
  for (const char* source : {"127.0.0.1", "127.0.0.1", "127.0.0.2", "127.0.0.2"}) {
    silent.push_back(connectTcp(source, server_->tcpPort()));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  auto client = connectTcp("127.0.0.3", server_->tcpPort());
  sendAll(client.get(), "GET /v1/sandboxes HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk_test_secret_ci\r\n\r\n");
  auto r = receive(client.get(), std::chrono::milliseconds(2000));
  EXPECT_TRUE(startsWith(r.data, "HTTP/1.1 200")) << r.data;
  // The first silent one made room, without an answer (it had sent nothing); the others still wait.
  r = receive(silent[0].get(), std::chrono::milliseconds(1000));
  EXPECT_TRUE(r.closed);
  EXPECT_EQ(r.data, "");
  for (size_t i = 1; i < silent.size(); ++i)
    EXPECT_FALSE(receive(silent[i].get(), std::chrono::milliseconds(0)).closed) << i;
  EXPECT_EQ(api_->metrics().rejections("evicted"), 1u);
  // The client showed a key and left the pool (its keep-alive connection stays open): one more silent
  // connection fits without displacing anyone.
  auto late = connectTcp("127.0.0.3", server_->tcpPort());
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(api_->metrics().rejections("evicted"), 1u);
  EXPECT_FALSE(receive(client.get(), std::chrono::milliseconds(0)).closed);
}

TEST_F(ApiServerLimitsTest, UnixSocketAnswersWhenEverySlotIsHeld) {
  // Eight unix connections, each stalled in a body that never comes, hold every slot.
  std::vector<UniqueFd> stalled;
  for (int i = 0; i < 8; ++i) {
    stalled.push_back(connectUnix(socket_));
    sendAll(stalled.back().get(),
            "POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{");
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(server_->activeConnections(), 8u);
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(call("GET", "/healthz", std::nullopt, 200)["status"], "ok");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(1000));
  // The one stalled longest was answered 408 to make room; the others still wait for their bodies.
  auto r = receive(stalled[0].get(), std::chrono::milliseconds(1000));
  EXPECT_TRUE(startsWith(r.data, "HTTP/1.1 408")) << r.data;
  EXPECT_TRUE(r.closed);
  for (size_t i = 1; i < stalled.size(); ++i)
    EXPECT_FALSE(receive(stalled[i].get(), std::chrono::milliseconds(0)).closed) << i;
  EXPECT_EQ(api_->metrics().rejections("evicted"), 1u);
}

}  // namespace
}  // namespace space::api
