// The request parsers alone: request in, command or 400 message out.
#include <gtest/gtest.h>

#include <csignal>

#include "api/routes/routes.h"
#include "api/validate.h"
#include "core/config.h"

namespace space::api {
namespace {

TEST(Parse, CreateSandboxLimits) {
  const uint64_t host = 4ull << 30;
  EXPECT_TRUE(parseCreateSandbox("", host));
  EXPECT_FALSE(parseCreateSandbox(R"({"memory_mib": 8192})", host));  // more than the host
  EXPECT_FALSE(parseCreateSandbox(R"({"memory_mib": 15})", host));
  EXPECT_FALSE(parseCreateSandbox(R"({"cpus": 0})", host));
  EXPECT_FALSE(parseCreateSandbox(R"({"cpus": 65})", host));
  EXPECT_FALSE(parseCreateSandbox(R"({"disk_mib": 1})", host));
  EXPECT_FALSE(parseCreateSandbox(R"({"ttl_s": -1})", host));
  EXPECT_FALSE(parseCreateSandbox(R"({"isolation": "docker"})", host));
  EXPECT_FALSE(parseCreateSandbox(R"({"env": {"1A": "x"}})", host));
  EXPECT_FALSE(parseCreateSandbox(R"({"labels": {"a": 1}})", host));
  EXPECT_FALSE(parseCreateSandbox(R"({"template": "../etc"})", host));
  EXPECT_FALSE(parseCreateSandbox(R"({"memory_mib": 1e300})", host));
  EXPECT_FALSE(parseCreateSandbox(R"({"pids": 18446744073709551615})", host));
  auto c = parseCreateSandbox(R"({"cpus": 1.5, "memory_mib": 512.0, "isolation": "jail"})", host);
  ASSERT_TRUE(c);
  EXPECT_EQ(*c->cpu_millis, 1500u);
  EXPECT_EQ(*c->memory_bytes, 512ull << 20);
  EXPECT_EQ(c->isolation, "jail");
}

TEST(Parse, Signals) {
  EXPECT_EQ(*parseSignal("TERM"), 15);
  EXPECT_EQ(*parseSignal("SIGKILL"), 9);
  EXPECT_EQ(*parseSignal("int"), 2);
  EXPECT_EQ(*parseSignal("10"), 10);
  EXPECT_FALSE(parseSignal("0"));
  EXPECT_FALSE(parseSignal("65"));
  EXPECT_FALSE(parseSignal("BOGUS"));
  EXPECT_EQ(*parseSignalBody(R"({"signal":15})"), 15);
  EXPECT_EQ(*parseSignalBody(""), 15);
  EXPECT_FALSE(parseSignalBody(R"({"signal":1.5})"));
}

// What a fork or rollback does to the processes a VM's memory brings back (docs/snapshots.md "Generations").
TEST(Parse, RestoreOptionsOfForkAndRollback) {
  auto fork = parseForkBody(R"({"count": 2})");
  ASSERT_TRUE(fork);
  EXPECT_EQ(fork->after_restore.processes, "signal");  // the default
  EXPECT_EQ(fork->after_restore.signal, SIGURG);
  fork = parseForkBody(R"({"on_restore": "kill"})");
  ASSERT_TRUE(fork);
  EXPECT_EQ(fork->after_restore.processes, "kill");
  fork = parseForkBody(R"({"on_restore": "signal", "restore_signal": "USR2"})");
  ASSERT_TRUE(fork);
  EXPECT_EQ(fork->after_restore.signal, SIGUSR2);
  auto back = parseRollbackBody(R"({"snapshot": "s1", "restore_signal": 10})");
  ASSERT_TRUE(back);
  EXPECT_EQ(back->snapshot, "s1");
  EXPECT_EQ(back->after_restore.signal, 10);
  back = parseRollbackBody(R"({"snapshot": "s1", "on_restore": "none"})");
  ASSERT_TRUE(back);
  EXPECT_EQ(back->after_restore.processes, "none");
  EXPECT_EQ(parseSignal("URG").value_or(0), SIGURG);
  for (const char* bad : {R"({"snapshot": "s", "on_restore": "restart"})", R"({"snapshot": "s", "on_restore": 1})",
                          R"({"snapshot": "s", "restore_signal": 0})", R"({"snapshot": "s", "restore_signal": "NOPE"})",
                          R"({"snapshot": "s", "on_restore": "kill", "restore_signal": "URG"})"}) {
    auto r = parseRollbackBody(bad);
    ASSERT_FALSE(r) << bad;
    EXPECT_EQ(r.error().kind, ErrorKind::kInvalidArgument) << bad;
  }
  EXPECT_FALSE(parseForkBody(R"({"on_restore": "reboot"})"));
}

TEST(Parse, ModesNamesPaths) {
  EXPECT_EQ(*parseMode("0644"), 0644u);
  EXPECT_EQ(*parseMode("755"), 0755u);
  EXPECT_FALSE(parseMode("0999"));
  EXPECT_FALSE(parseMode("77777"));
  EXPECT_TRUE(checkName("id", "sb-1a2b"));
  EXPECT_FALSE(checkName("id", ""));
  EXPECT_FALSE(checkName("id", ".."));
  EXPECT_FALSE(checkName("id", "a/b"));
  EXPECT_FALSE(checkName("id", std::string(65, 'a')));
  EXPECT_FALSE(checkSandboxPath("path", "rel"));
  EXPECT_FALSE(checkSandboxPath("path", std::string("/a\0b", 4)));
}

TEST(Parse, PtyQueryAndControl) {
  http::Request req;
  req.query = {{"cmd", "/bin/bash"}, {"rows", "50"}, {"cols", "200"}};
  auto p = parsePtyQuery(req);
  ASSERT_TRUE(p);
  EXPECT_TRUE(p->pty);
  EXPECT_EQ(p->rows, 50);
  req.query = {{"rows", "0"}};
  EXPECT_FALSE(parsePtyQuery(req));
  req.query = {{"bogus", "1"}};
  EXPECT_FALSE(parsePtyQuery(req));
  EXPECT_TRUE(parsePtyControl(R"({"type":"resize","rows":10,"cols":20})"));
  EXPECT_FALSE(parsePtyControl(R"({"type":"resize","rows":-1,"cols":20})"));
  EXPECT_FALSE(parsePtyControl("garbage"));
}

TEST(Parse, ListFilters) {
  http::Request req;
  req.query = {{"label", "team=ml"}, {"state", "running"}};
  auto l = parseListSandboxes(req);
  ASSERT_TRUE(l);
  EXPECT_EQ(l->labels.at("team"), "ml");
  req.query = {{"label", "noequals"}};
  EXPECT_FALSE(parseListSandboxes(req));
  req.query = {{"state", "zombie"}};
  EXPECT_FALSE(parseListSandboxes(req));
}

TEST(Config, RoundTripAndStrictness) {
  core::DaemonConfig base;
  auto c = core::DaemonConfig::fromJson(
      nlohmann::json::parse(R"({"socket":"/tmp/s.sock","pool_size":2,"default_limits":{"cpus":0.5,"memory_mib":256}})"),
      base);
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->socket_path, "/tmp/s.sock");
  EXPECT_EQ(c->default_limits.cpu_millis, 500u);
  auto again = core::DaemonConfig::fromJson(c->toJson(), core::DaemonConfig{});
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_EQ(again->toJson(), c->toJson());
  EXPECT_FALSE(core::DaemonConfig::fromJson(nlohmann::json::parse(R"({"pool_sise":2})"), base));
  EXPECT_FALSE(core::DaemonConfig::fromJson(nlohmann::json::parse(R"({"pool_size":"2"})"), base));
  EXPECT_FALSE(core::DaemonConfig::fromJson(nlohmann::json::parse(R"({"log_level":"loud"})"), base));
}

}  // namespace
}  // namespace space::api
