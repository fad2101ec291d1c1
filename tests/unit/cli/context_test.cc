// CLI argument helpers: sizes, durations, pairs, exit codes, cp argument splitting; failure hints.
#include "cli/context.h"

#include <gtest/gtest.h>

#include "cli/commands.h"

namespace space::cli {
namespace {

TEST(CliParse, Sizes) {
  EXPECT_EQ(*parseSizeMiB("512M"), 512u);
  EXPECT_EQ(*parseSizeMiB("1G"), 1024u);
  EXPECT_EQ(*parseSizeMiB("1.5G"), 1536u);
  EXPECT_EQ(*parseSizeMiB("2Gi"), 2048u);
  EXPECT_EQ(*parseSizeMiB("256"), 256u);
  EXPECT_FALSE(parseSizeMiB("lots"));
  EXPECT_FALSE(parseSizeMiB("-1G"));
  EXPECT_FALSE(parseSizeMiB("1X"));
}

TEST(CliParse, ExitCodes) {
  EXPECT_EQ(exitCodeOf({{"exit_code", 3}, {"signal", 0}, {"timed_out", false}}), 3);
  EXPECT_EQ(exitCodeOf({{"exit_code", -1}, {"signal", 9}, {"timed_out", false}}), 137);
  EXPECT_EQ(exitCodeOf({{"exit_code", -1}, {"signal", 9}, {"timed_out", true}}), 124);
}

TEST(CliParse, CreateAndExecBodies) {
  CreateOptions o;
  o.memory = "1G";
  o.cpus = "0.5";
  o.ttl = "30m";
  o.labels = {"team=ml"};
  auto body = createBody(o);
  ASSERT_TRUE(body);
  EXPECT_EQ((*body)["memory_mib"], 1024);
  EXPECT_EQ((*body)["ttl_s"], 1800);
  EXPECT_EQ((*body)["labels"]["team"], "ml");
  o.labels = {"novalue"};
  EXPECT_FALSE(createBody(o));
  ExecOptions e;
  EXPECT_FALSE(execBody(e));
  e.argv = {"ls", "-l"};
  e.timeout = "10s";
  auto eb = execBody(e);
  ASSERT_TRUE(eb);
  EXPECT_EQ((*eb)["cmd"][1], "-l");
  EXPECT_EQ((*eb)["timeout_s"], 10);
}

TEST(CliParse, CpArguments) {
  EXPECT_EQ(splitRemote("sb-1:/root/x"), (std::pair<std::string, std::string>{"sb-1", "/root/x"}));
  EXPECT_EQ(splitRemote("./a:b"), (std::pair<std::string, std::string>{"", "./a:b"}));
  EXPECT_EQ(splitRemote("file.txt"), (std::pair<std::string, std::string>{"", "file.txt"}));
}

TEST(FailureHint, UnsupportedPointsAtSpaceNode) {
  std::string hint = failureHint(Error{ErrorKind::kUnsupported, 0, "egress is off on this node"});
  EXPECT_NE(hint.find("space node"), std::string::npos) << hint;
  EXPECT_EQ(hint.find("yet"), std::string::npos) << hint;
}

TEST(FailureHint, NotFoundHintNamesWhatIsMissing) {
  auto hint = [](const char* resource) { return failureHint(Error{ErrorKind::kNotFound, 0, "missing", resource}); };
  EXPECT_NE(hint("sandbox").find("space ls"), std::string::npos);
  EXPECT_NE(hint("file").find("space files ls"), std::string::npos);
  EXPECT_NE(hint("snapshot").find("space history"), std::string::npos);
  EXPECT_NE(hint("process").find("space ps"), std::string::npos);
  EXPECT_NE(hint("template").find("space template ls"), std::string::npos);
  EXPECT_EQ(hint("file").find("'space ls'"), std::string::npos);
  EXPECT_EQ(hint(""), "");  // a local file or an unnamed thing: the message says enough
}

TEST(FailureHint, MissingKekIsNotARuntimeLimit) {
  EXPECT_EQ(
      failureHint(Error{ErrorKind::kUnsupported, 0, "snapshot export needs the customer's key: set snapshot_kek"}), "");
}

TEST(FailureHint, UnavailableTierPointsAtSpaceNode) {
  EXPECT_NE(failureHint(Error{ErrorKind::kUnavailable, 0, "the vm tier is not available right now: KVM probe"})
                .find("space node"),
            std::string::npos);
  EXPECT_EQ(failureHint(Error{ErrorKind::kUnavailable, 0, "sandbox sb-1 does not answer: closed"}).find("space node"),
            std::string::npos);
}

}  // namespace
}  // namespace space::cli
