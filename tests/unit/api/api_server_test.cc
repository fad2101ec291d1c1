// The API end to end over real sockets (unix and TCP), against an in-memory manager.
#include "api/api_server.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <thread>

#include "http/base64.h"
#include "http/client.h"
#include "http/server.h"
#include "fake_manager.h"

namespace space::api {
namespace {

using nlohmann::json;

class ApiServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("space-api-test-" + std::to_string(getpid()) + "-" + std::to_string(counter_++));
    std::filesystem::create_directories(dir_);
    socket_ = (dir_ / "run" / "spaced.sock").string();
    api_ = std::make_unique<ApiServer>(manager_, ApiOptions{1 << 20, 8ull << 30});
    http::ServerOptions opts;
    opts.header_timeout = std::chrono::seconds(2);
    server_ = std::make_unique<http::Server>(
        [this](http::Request& rq, http::BodyReader& b, http::ResponseWriter& rs) { api_->handle(rq, b, rs); }, opts,
        [this](const std::string& reason) { api_->metrics().countRejection(reason); });
    ASSERT_TRUE(server_->listenUnix(socket_));
    ASSERT_TRUE(server_->listenTcp("127.0.0.1:0"));
    thread_ = std::thread([this] { server_->run(std::chrono::seconds(2)); });
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
  json call(const std::string& method, const std::string& target, const std::optional<std::string>& body, int want_status) {
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
            std::filesystem::perms::owner_read | std::filesystem::perms::owner_write | std::filesystem::perms::group_read |
                std::filesystem::perms::group_write);
}

TEST_F(ApiServerTest, CreateParsesIntoCommand) {
  auto j = call("POST", "/v1/sandboxes",
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
  auto r = c.stream("POST", "/v1/sandboxes/sb-1/exec", std::string(R"({"shell":"echo hello","timeout_s":5,"stdin":"in"})"),
                    [&](std::string_view d) {
                      out += d;
                      return ok();
                    });
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  std::vector<json> lines;
  size_t start = 0;
  for (size_t nl; (nl = out.find('\n', start)) != std::string::npos; start = nl + 1) lines.push_back(json::parse(out.substr(start, nl - start)));
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
  auto r = c.upload("PUT", "/v1/sandboxes/sb-1/files?path=/root/big&mode=0600", size, [&](char* out, size_t max) -> Result<size_t> {
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
  auto r = c.stream("POST", "/v1/templates", std::string(R"({"name":"py","kind":"debootstrap","packages":["python3"]})"),
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

}  // namespace
}  // namespace space::api
