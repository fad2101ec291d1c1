// The exec WebSocket's messages and the PTY's eof control, parsed as the routes parse them.
#include <gtest/gtest.h>

#include <csignal>

#include "api/routes/routes.h"

namespace space::api {
namespace {

TEST(ExecSessionParse, RequestIsTheExecBodyWithStdinAsAFlag) {
  auto req = parseExecSessionRequest(R"({"cmd":["sh","-c","cat"],"env":{"A":"1"},"stdin":true,"timeout_s":1.5})");
  ASSERT_TRUE(req) << req.error().message;
  EXPECT_EQ(req->argv, (std::vector<std::string>{"sh", "-c", "cat"}));
  EXPECT_EQ(req->env.at("A"), "1");
  EXPECT_TRUE(req->stdin_open);
  EXPECT_DOUBLE_EQ(req->timeout_s, 1.5);
  auto closed = parseExecSessionRequest(R"({"shell":"echo hi"})");
  ASSERT_TRUE(closed);
  EXPECT_FALSE(closed->stdin_open);
  EXPECT_EQ(closed->argv, (std::vector<std::string>{"/bin/sh", "-c", "echo hi"}));
}

TEST(ExecSessionParse, RequestRefusesWhatPostRefuses) {
  EXPECT_FALSE(parseExecSessionRequest(R"({"stdin":"data"})"));  // stdin is a flag here
  EXPECT_FALSE(parseExecSessionRequest(R"({"cmd":["x"],"stdin":"x"})"));
  EXPECT_FALSE(parseExecSessionRequest(R"({"cmd":[]})"));
  EXPECT_FALSE(parseExecSessionRequest(R"({"cmd":["x"],"timeout_s":-1})"));
  EXPECT_FALSE(parseExecSessionRequest(R"({"cmd":["x"],"unknown":1})"));
  EXPECT_FALSE(parseExecSessionRequest("garbage"));
}

TEST(ExecSessionParse, Controls) {
  auto eof = parseExecControl(R"({"type":"eof"})");
  ASSERT_TRUE(eof);
  EXPECT_EQ(eof->kind, ExecControl::Kind::kEof);
  auto sig = parseExecControl(R"({"type":"signal","signal":"INT"})");
  ASSERT_TRUE(sig) << sig.error().message;
  EXPECT_EQ(sig->kind, ExecControl::Kind::kSignal);
  EXPECT_EQ(sig->signal, SIGINT);
  auto num = parseExecControl(R"({"type":"signal","signal":15})");
  ASSERT_TRUE(num);
  EXPECT_EQ(num->signal, SIGTERM);
  EXPECT_FALSE(parseExecControl(R"({"type":"signal"})"));
  EXPECT_FALSE(parseExecControl(R"({"type":"signal","signal":0})"));
  EXPECT_FALSE(parseExecControl(R"({"type":"signal","signal":"NOPE"})"));
  EXPECT_FALSE(parseExecControl(R"({"type":"resize","rows":1,"cols":1})"));
  EXPECT_FALSE(parseExecControl("garbage"));
}

TEST(ExecSessionParse, PtyEof) {
  auto eof = parsePtyControl(R"({"type":"eof"})");
  ASSERT_TRUE(eof);
  EXPECT_EQ(eof->kind, PtyControl::Kind::kEof);
  auto resize = parsePtyControl(R"({"type":"resize","rows":10,"cols":20})");
  ASSERT_TRUE(resize);
  EXPECT_EQ(resize->kind, PtyControl::Kind::kResize);
  EXPECT_EQ(resize->rows, 10);
  EXPECT_FALSE(parsePtyControl(R"({"type":"eof","extra":1})"));
}

}  // namespace
}  // namespace space::api
