// The flags of exec, run, start and shell, parsed by the same CLI11 definitions the space binary uses.
#include "cli/options.h"

#include <gtest/gtest.h>

namespace space::cli {
namespace {

// Parses `space ARGS...` with only the process commands defined; the error text on failure.
std::string parse(CLI::App& app, std::vector<std::string> args) {
  std::vector<const char*> argv = {"space"};
  for (const auto& a : args) argv.push_back(a.c_str());
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::ParseError& e) {
    return e.what();
  }
  return "";
}

using Args = std::vector<std::string>;

TEST(CliOptions, RepeatableFlagBeforeDoubleDashEndsOptions) {
  CLI::App app;
  std::string id;
  ExecOptions o;
  addExecCommand(app, id, o);
  ASSERT_EQ(parse(app, {"exec", "sb-1", "-e", "A=1", "--", "sh", "-c", "echo $A"}), "");
  EXPECT_EQ(id, "sb-1");
  EXPECT_EQ(o.env, Args{"A=1"});
  EXPECT_EQ(o.argv, (Args{"sh", "-c", "echo $A"}));
}

TEST(CliOptions, RepeatableFlagTakesOneValueEachTime) {
  CLI::App app;
  std::string id;
  ExecOptions o;
  addExecCommand(app, id, o);
  ASSERT_EQ(parse(app, {"exec", "-e", "A=1", "sb-1", "-e", "B=2", "--env", "C=3", "--", "env"}), "");
  EXPECT_EQ(id, "sb-1");
  EXPECT_EQ(o.env, (Args{"A=1", "B=2", "C=3"}));
  EXPECT_EQ(o.argv, Args{"env"});
}

TEST(CliOptions, EverythingAfterDoubleDashIsTheCommand) {
  CLI::App app;
  std::string id;
  ExecOptions o;
  addExecCommand(app, id, o);
  ASSERT_EQ(parse(app, {"exec", "sb-1", "-i", "--timeout", "1500ms", "--", "python3", "-i", "--timeout", "-e", "x"}),
            "");
  EXPECT_TRUE(o.interactive);
  EXPECT_EQ(o.timeout, "1500ms");
  EXPECT_TRUE(o.env.empty());
  EXPECT_EQ(o.argv, (Args{"python3", "-i", "--timeout", "-e", "x"}));
}

TEST(CliOptions, RunTakesLabelsSecretsAndNetRulesBeforeTheCommand) {
  CLI::App app;
  CreateOptions c;
  ExecOptions o;
  addRunCommand(app, c, o);
  ASSERT_EQ(parse(app, {"run", "-l", "k=v", "--secret", "S", "--net-allow", "a.example", "--net-deny", "b.example",
                        "-l", "k2=v2", "-e", "A=1", "--", "sh", "-c", "echo hi"}),
            "");
  EXPECT_EQ(c.labels, (Args{"k=v", "k2=v2"}));
  EXPECT_EQ(c.secrets, Args{"S"});
  EXPECT_EQ(c.net_allow, Args{"a.example"});
  EXPECT_EQ(c.net_deny, Args{"b.example"});
  EXPECT_EQ(c.env, Args{"A=1"});
  EXPECT_EQ(o.argv, (Args{"sh", "-c", "echo hi"}));
}

TEST(CliOptions, StartLikeExec) {
  CLI::App app;
  std::string id;
  ExecOptions o;
  addStartCommand(app, id, o);
  ASSERT_EQ(parse(app, {"start", "sb-1", "-e", "A=1", "--", "sh", "-c", "sleep 1"}), "");
  EXPECT_EQ(o.env, Args{"A=1"});
  EXPECT_EQ(o.argv, (Args{"sh", "-c", "sleep 1"}));
}

TEST(CliOptions, ShellProgramAndArguments) {
  {
    CLI::App app;
    std::string id;
    ShellOptions o;
    addShellCommand(app, id, o);
    ASSERT_EQ(parse(app, {"shell", "sb-1", "--", "python3", "-q"}), "");
    EXPECT_EQ(*shellTarget(id, o, 24, 80), "/v1/sandboxes/sb-1/pty?cmd=python3&arg=-q&rows=24&cols=80");
  }
  {
    CLI::App app;
    std::string id;
    ShellOptions o;
    addShellCommand(app, id, o);
    ASSERT_EQ(parse(app, {"shell", "sb-1", "--cmd", "/bin/bash"}), "");
    EXPECT_EQ(*shellTarget(id, o, 30, 100), "/v1/sandboxes/sb-1/pty?cmd=/bin/bash&rows=30&cols=100");
  }
  {
    CLI::App app;
    std::string id;
    ShellOptions o;
    addShellCommand(app, id, o);
    ASSERT_EQ(parse(app, {"shell", "sb-1", "--cmd", "python3 -q"}), "");
    auto t = shellTarget(id, o, 24, 80);
    ASSERT_FALSE(t);
    EXPECT_NE(t.error().message.find("-- python3 -q"), std::string::npos) << t.error().message;
  }
}

}  // namespace
}  // namespace space::cli
