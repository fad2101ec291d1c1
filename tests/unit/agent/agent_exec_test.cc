// End-to-end: exec, pty, background processes and connection handling against the real space-agent.
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "agent/protocol/frame.h"
#include "agent_harness.h"

namespace space::agent::testing {
namespace {

class AgentExecTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SPACE_START_AGENT(agent_);
    client_ = agent_.connect();
    ASSERT_TRUE(client_);
  }
  AgentProcess agent_;
  std::shared_ptr<AgentClient> client_;
};

TEST_F(AgentExecTest, HelloCarriesVersionPidFeatures) {
  auto info = client_->agentInfo();
  EXPECT_EQ(info["version"], 1);
  EXPECT_EQ(info["pid"], agent_.pid());
  auto features = info["features"].get<std::vector<std::string>>();
  EXPECT_NE(std::find(features.begin(), features.end(), "exec"), features.end());
}

TEST_F(AgentExecTest, StdoutStderrExitCode) {
  auto s = client_->exec(sh("echo out; echo err >&2; exit 3"));
  ASSERT_TRUE(s.has_value()) << s.error().message;
  EXPECT_GT((*s)->pid(), 0);
  auto c = collect(**s);
  EXPECT_EQ(c.out, "out\n");
  EXPECT_EQ(c.err, "err\n");
  EXPECT_EQ(c.exit.exit_code, 3);
  EXPECT_EQ(c.exit.signal, 0);
  EXPECT_FALSE(c.exit.timed_out);
  auto after = (*s)->next(Duration(100));
  ASSERT_FALSE(after.has_value());
  EXPECT_EQ(after.error().kind, ErrorKind::kConflict);
}

TEST_F(AgentExecTest, KilledBySignal) {
  auto s = client_->exec(sh("kill -SEGV $$"));
  ASSERT_TRUE(s.has_value());
  auto c = collect(**s);
  EXPECT_EQ(c.exit.exit_code, -1);
  EXPECT_EQ(c.exit.signal, SIGSEGV);
}

TEST_F(AgentExecTest, TimeoutKillsTheWholeGroup) {
  auto req = sh("sleep 30 & echo $!; wait");
  req.timeout_s = 0.3;
  auto s = client_->exec(req);
  ASSERT_TRUE(s.has_value());
  auto c = collect(**s);
  EXPECT_TRUE(c.exit.timed_out);
  EXPECT_EQ(c.exit.signal, SIGKILL);
  int child = std::atoi(c.out.c_str());
  ASSERT_GT(child, 0);
  // The background sleep was in the same group: it is gone too (reaped by the agent as subreaper).
  bool gone = false;
  for (int i = 0; i < 200 && !gone; ++i) {
    gone = kill(child, 0) != 0;
    if (!gone) usleep(10000);
  }
  EXPECT_TRUE(gone);
}

TEST_F(AgentExecTest, StdinEnvCwd) {
  auto req = sh("cat; echo \"$FOO\"; pwd");
  req.stdin_open = true;
  req.env["FOO"] = "bar baz";
  req.cwd = "/tmp";
  auto s = client_->exec(req);
  ASSERT_TRUE(s.has_value());
  ASSERT_TRUE((*s)->writeStdin("hello ").has_value());
  ASSERT_TRUE((*s)->writeStdin("world\n").has_value());
  ASSERT_TRUE((*s)->closeStdin().has_value());
  auto c = collect(**s);
  EXPECT_EQ(c.out, "hello world\nbar baz\n/tmp\n");
  EXPECT_EQ(c.exit.exit_code, 0);
}

TEST_F(AgentExecTest, StdinClosedByDefaultAndWriteRefused) {
  auto s = client_->exec(cmd({"cat"}));
  ASSERT_TRUE(s.has_value());
  EXPECT_FALSE((*s)->writeStdin("x").has_value());
  auto c = collect(**s);
  EXPECT_EQ(c.out, "");
  EXPECT_EQ(c.exit.exit_code, 0);
}

TEST_F(AgentExecTest, LargeStdinIsFlowControlled) {
  auto req = cmd({"wc", "-c"});
  req.stdin_open = true;
  auto s = client_->exec(req);
  ASSERT_TRUE(s.has_value());
  std::string block(1 << 20, 'z');
  for (int i = 0; i < 20; ++i) ASSERT_TRUE((*s)->writeStdin(block).has_value());
  ASSERT_TRUE((*s)->closeStdin().has_value());
  auto c = collect(**s);
  EXPECT_EQ(std::atol(c.out.c_str()), 20L << 20);
}

TEST_F(AgentExecTest, AllOutputArrivesBeforeExit) {
  auto s = client_->exec(sh("head -c 52428800 /dev/zero; echo tail >&2"));
  ASSERT_TRUE(s.has_value());
  auto c = collect(**s);
  EXPECT_EQ(c.out.size(), 52428800u);
  EXPECT_EQ(c.err, "tail\n");
  EXPECT_EQ(c.exit.exit_code, 0);
}

TEST_F(AgentExecTest, ChattyProcessDoesNotStarveOthers) {
  // A consumer that never reads: the agent stops reading that pipe once credit is gone.
  auto chatty = client_->exec(cmd({"yes"}));
  ASSERT_TRUE(chatty.has_value());
  for (int i = 0; i < 5; ++i) {
    auto s = client_->exec(cmd({"echo", "ok"}));
    ASSERT_TRUE(s.has_value());
    EXPECT_EQ(collect(**s).out, "ok\n");
  }
  chatty->reset();  // cancel: the agent kills it
}

TEST_F(AgentExecTest, MissingExecutableIsNotFound) {
  auto s = client_->exec(cmd({"no-such-binary-for-space"}));
  ASSERT_FALSE(s.has_value());
  EXPECT_EQ(s.error().kind, ErrorKind::kNotFound);
  EXPECT_EQ(s.error().reason, "executable_not_found");
  auto bad_cwd = sh("true");
  bad_cwd.cwd = "/no/such/dir";
  auto s2 = client_->exec(bad_cwd);
  ASSERT_FALSE(s2.has_value());
  EXPECT_EQ(s2.error().kind, ErrorKind::kNotFound);
  EXPECT_EQ(s2.error().reason, "") << "a missing cwd is not a missing program";
  auto bad_user = sh("true");
  bad_user.user = "nosuchuser";
  EXPECT_EQ(client_->exec(bad_user).error().kind, ErrorKind::kNotFound);
}

TEST_F(AgentExecTest, NonExecutableFileIsToldApart) {
  char dir[] = "/tmp/space-agent-noexec-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  std::string file = std::string(dir) + "/script";
  { std::ofstream(file) << "echo never\n"; }  // mode 0644: present, not executable
  auto s = client_->exec(cmd({file}));
  ASSERT_FALSE(s.has_value());
  EXPECT_EQ(s.error().kind, ErrorKind::kInvalidArgument);
  EXPECT_EQ(s.error().reason, "not_executable");
  EXPECT_NE(s.error().message.find("cannot execute"), std::string::npos) << s.error().message;
  std::remove(file.c_str());
  rmdir(dir);
}

TEST_F(AgentExecTest, ChildGetsOnlyStandardFdsAndDefaultSignals) {
  auto s = client_->exec(sh("ls /proc/self/fd; grep -E 'SigIgn|SigBlk' /proc/self/status"));
  ASSERT_TRUE(s.has_value());
  auto c = collect(**s);
  // ls itself opens one directory fd (3) to read /proc/self/fd.
  EXPECT_EQ(c.out.substr(0, 8), "0\n1\n2\n3\n");
  EXPECT_EQ(c.out.find("4\n"), std::string::npos) << c.out;
  EXPECT_NE(c.out.find("SigIgn:\t0000000000000000"), std::string::npos) << c.out;
  EXPECT_NE(c.out.find("SigBlk:\t0000000000000000"), std::string::npos) << c.out;
}

TEST_F(AgentExecTest, RunsAsNumericUser) {
  auto req = cmd({"id", "-u"});
  req.user = "65534";
  auto s = client_->exec(req);
  ASSERT_TRUE(s.has_value()) << s.error().message;
  auto c = collect(**s);
  EXPECT_EQ(c.out, "65534\n");
}

TEST_F(AgentExecTest, UserNameFromRootPasswd) {
  fs::create_directories(agent_.root() / "etc");
  writeHostFile(agent_.root() / "etc/passwd", "root:x:0:0:root:/root:/bin/sh\nsandy:x:4242:4343::/tmp:/bin/sh\n");
  writeHostFile(agent_.root() / "etc/group", "root:x:0:\nextra:x:4444:sandy,other\n");
  auto req = sh("id -u; id -g; id -G; pwd; echo $HOME");
  req.user = "sandy";
  auto s = client_->exec(req);
  ASSERT_TRUE(s.has_value()) << s.error().message;
  auto c = collect(**s);
  EXPECT_EQ(c.out, "4242\n4343\n4343 4444\n/tmp\n/tmp\n");
}

TEST_F(AgentExecTest, SignalAndCancelForeground) {
  auto s = client_->exec(cmd({"sleep", "30"}));
  ASSERT_TRUE(s.has_value());
  ASSERT_TRUE((*s)->signal(SIGTERM).has_value());
  auto c = collect(**s);
  EXPECT_EQ(c.exit.signal, SIGTERM);
}

TEST_F(AgentExecTest, PtyWithSizeAndResize) {
  auto req = sh("tty; stty size; read x; stty size");
  req.pty = true;
  req.rows = 30;
  req.cols = 100;
  auto s = client_->exec(req);
  ASSERT_TRUE(s.has_value());
  std::string out;
  while (out.find("30 100") == std::string::npos) {
    auto ev = (*s)->next(Duration(10000));
    ASSERT_TRUE(ev.has_value());
    ASSERT_EQ(ev->kind, ExecEvent::Kind::kStdout);
    out += ev->data;
  }
  EXPECT_NE(out.find("/dev/pts/"), std::string::npos) << out;
  ASSERT_TRUE((*s)->resize(40, 120).has_value());
  ASSERT_TRUE((*s)->writeStdin("go\n").has_value());
  auto c = collect(**s);
  EXPECT_NE(c.out.find("40 120"), std::string::npos) << c.out;
  EXPECT_EQ(c.exit.exit_code, 0);
}

TEST_F(AgentExecTest, BackgroundProcesses) {
  std::vector<std::string> ids;
  for (int i = 0; i < 6; ++i) {
    auto p = client_->startBackground(
        sh("echo start-" + std::to_string(i) + "; sleep 0.2; echo end-" + std::to_string(i) + " >&2"));
    ASSERT_TRUE(p.has_value()) << p.error().message;
    EXPECT_EQ(p->id, "p" + std::to_string(i + 1));
    EXPECT_GT(p->pid, 0);
    ids.push_back(p->id);
  }
  auto list = client_->listProcesses();
  ASSERT_TRUE(list.has_value());
  EXPECT_EQ(list->size(), 6u);
  for (int i = 0; i < 6; ++i) {
    auto r = client_->readOutput(ids[i], /*follow=*/true);
    ASSERT_TRUE(r.has_value());
    auto c = collect(**r);
    EXPECT_EQ(c.out, "start-" + std::to_string(i) + "\n");
    EXPECT_EQ(c.err, "end-" + std::to_string(i) + "\n");
    EXPECT_EQ(c.exit.exit_code, 0);
  }
  // Non-follow read of a finished process: the buffer, then the end marker.
  auto r = client_->readOutput(ids[0], false);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(collect(**r).out, "start-0\n");
  list = client_->listProcesses();
  ASSERT_TRUE(list.has_value());
  for (const auto& p : *list) EXPECT_FALSE(p.running) << p.id;
  EXPECT_EQ(client_->readOutput("p999", false).error().kind, ErrorKind::kNotFound);
  EXPECT_EQ(client_->signalProcess("p999", SIGTERM).error().kind, ErrorKind::kNotFound);
}

TEST_F(AgentExecTest, BackgroundSignalAndNonFollowWhileRunning) {
  auto p = client_->startBackground(sh("echo ready; exec sleep 30"));
  ASSERT_TRUE(p.has_value());
  for (int i = 0; i < 500; ++i) {
    auto l = client_->listProcesses();
    if (l && !l->empty() && l->front().output_bytes > 0) break;
    usleep(10000);
  }
  auto r = client_->readOutput(p->id, false);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(collect(**r).out, "ready\n");
  ASSERT_TRUE(client_->signalProcess(p->id, SIGTERM).has_value());
  auto f = client_->readOutput(p->id, true);
  ASSERT_TRUE(f.has_value());
  auto c = collect(**f);
  EXPECT_EQ(c.exit.signal, SIGTERM);
}

TEST_F(AgentExecTest, BackgroundRingKeepsNewestMiB) {
  auto p = client_->startBackground(sh("head -c 3145728 /dev/zero; echo END"));
  ASSERT_TRUE(p.has_value());
  auto f = client_->readOutput(p->id, true);
  ASSERT_TRUE(f.has_value());
  (void)collect(**f);
  auto r = client_->readOutput(p->id, false);
  ASSERT_TRUE(r.has_value());
  auto c = collect(**r);
  EXPECT_LE(c.out.size(), 1u << 20);
  EXPECT_GT(c.out.size(), 900u << 10);
  EXPECT_EQ(c.out.substr(c.out.size() - 4), "END\n");
}

TEST_F(AgentExecTest, ReconnectKeepsBackgroundKillsForeground) {
  auto bg = client_->startBackground(cmd({"sleep", "30"}));
  ASSERT_TRUE(bg.has_value());
  auto fg = client_->exec(cmd({"sleep", "30"}));
  ASSERT_TRUE(fg.has_value());
  int fg_pid = (*fg)->pid();
  auto second = agent_.connect();
  ASSERT_TRUE(second);
  // The old connection is dropped by the agent; its pending stream fails.
  auto ev = (*fg)->next(Duration(10000));
  EXPECT_FALSE(ev.has_value());
  EXPECT_FALSE(client_->alive());
  bool gone = false;
  for (int i = 0; i < 500 && !gone; ++i) {
    gone = kill(fg_pid, 0) != 0;
    if (!gone) usleep(10000);
  }
  EXPECT_TRUE(gone);
  auto list = second->listProcesses();
  ASSERT_TRUE(list.has_value());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_TRUE(list->front().running);
  EXPECT_EQ(kill(bg->pid, 0), 0);
  EXPECT_TRUE(second->signalProcess(bg->id, SIGKILL).has_value());
}

TEST_F(AgentExecTest, GarbageDropsOnlyThatConnection) {
  auto send_raw = [&](const std::string& bytes) {
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strcpy(addr.sun_path, agent_.socketPath().c_str());
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    (void)!write(fd, bytes.data(), bytes.size());
    char buf[4096];
    while (read(fd, buf, sizeof buf) > 0) {
    }  // the agent closes it
    close(fd);
  };
  send_raw(std::string("\xde\xad\xbe\xef garbage garbage garbage", 27));
  std::string hello = protocol::encodeFrame({protocol::FrameType::kHello, 0, R"({"version":1,"role":"host"})"});
  send_raw(hello + protocol::encodeFrame({protocol::FrameType::kControl, 1, "{not json"}));
  send_raw(hello + std::string("\xff\xff\xff\x7f\x02\x01\x00\x00\x00", 9));
  send_raw(protocol::encodeFrame({protocol::FrameType::kHello, 0, R"({"version":99})"}));
  send_raw(hello + protocol::encodeFrame({protocol::FrameType::kDataIn, 1, std::string(100, 'x')}) +
           protocol::encodeFrame({protocol::FrameType::kControl, 0, R"({"op":"ping"})"}));
  EXPECT_TRUE(agent_.running());
  auto c = agent_.connect();
  ASSERT_TRUE(c);
  auto s = c->exec(cmd({"echo", "alive"}));
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(collect(**s).out, "alive\n");
}

TEST_F(AgentExecTest, WrongTypedRequestIsRefusedConnectionKept) {
  ExecRequest empty;
  auto s = client_->exec(empty);
  ASSERT_FALSE(s.has_value());
  EXPECT_EQ(s.error().kind, ErrorKind::kInvalidArgument);
  EXPECT_TRUE(client_->ping(Duration(5000)).has_value());
}

TEST_F(AgentExecTest, AgentDeathFailsPendingCalls) {
  auto s = client_->exec(cmd({"sleep", "30"}));
  ASSERT_TRUE(s.has_value());
  agent_.stop();
  auto ev = (*s)->next(Duration(10000));
  ASSERT_FALSE(ev.has_value());
  EXPECT_EQ(ev.error().kind, ErrorKind::kUnavailable);
  EXPECT_FALSE(client_->alive());
  EXPECT_EQ(client_->stat("/").error().kind, ErrorKind::kUnavailable);
}

TEST_F(AgentExecTest, SetIdentityEnvReachesLaterExecs) {
  Identity id;
  id.env["SPACE_SANDBOX_ID"] = "sb-123";
  id.rng_seed_hex = "00112233445566778899aabbccddeeff";
  ASSERT_TRUE(client_->setIdentity(id).has_value());
  auto s = client_->exec(sh("echo $SPACE_SANDBOX_ID"));
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(collect(**s).out, "sb-123\n");
  Identity bad;
  bad.rng_seed_hex = "xyz";
  EXPECT_EQ(client_->setIdentity(bad).error().kind, ErrorKind::kInvalidArgument);
}

TEST_F(AgentExecTest, ExecRoundTripMeasurement) {
  std::vector<double> us, started_us;
  for (int i = 0; i < 200; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    auto s = client_->exec(cmd({"/bin/true"}));
    ASSERT_TRUE(s.has_value());
    started_us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    auto c = collect(**s);
    ASSERT_EQ(c.exit.exit_code, 0);
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(us.begin(), us.end());
  std::sort(started_us.begin(), started_us.end());
  std::printf("exec request to started event (spawn cost): p50 %.0f us\n", started_us[started_us.size() / 2]);
  std::printf("exec round trip (/bin/true, request to exit event): p50 %.0f us, p90 %.0f us\n", us[us.size() / 2],
              us[us.size() * 9 / 10]);
}

}  // namespace
}  // namespace space::agent::testing
