#include "archive/kek.h"

#include <cstdlib>

#include "archive/key_store.h"
#include "archive_test_util.h"
#include "common/hex.h"

namespace space::archive {
namespace {

using namespace testing;

// The KMS hook as an operator would write it: a shell script around openssl, holding its own key file,
// binding the wrap to SPACE_KEK_CONTEXT (prepended as the first line, checked on unwrap).
std::string writeOpensslKekScript(const TempDir& dir, const std::string& secret) {
  writeFile(dir / "kms.secret", secret, 0600);
  std::string script = dir / "kms.sh";
  writeFile(script, R"SH(#!/bin/sh
set -eu
secret="$(dirname "$0")/kms.secret"
case "$1" in
  wrap)
    { printf 'space-test-kms\n%s\n' "$SPACE_KEK_CONTEXT"; cat; } | openssl enc -aes-256-cbc -pbkdf2 -salt -pass "file:$secret" ;;
  unwrap)
    tmp=$(mktemp)
    trap 'rm -f "$tmp"' EXIT
    # CBC padding alone passes a wrong key one time in 256: the marker line tells a wrong key for sure.
    openssl enc -d -aes-256-cbc -pbkdf2 -pass "file:$secret" > "$tmp" 2>/dev/null || { echo "kms: unwrap refused" >&2; exit 3; }
    [ "$(head -n 1 "$tmp")" = "space-test-kms" ] || { echo "kms: unwrap refused" >&2; exit 3; }
    [ "$(sed -n 2p "$tmp")" = "$SPACE_KEK_CONTEXT" ] || { echo "kms: context mismatch" >&2; exit 4; }
    tail -c 32 "$tmp" ;;
  *) echo "kms: unknown operation $1" >&2; exit 2 ;;
esac
)SH",
            0700);
  return script;
}

bool haveOpenssl() { return std::system("command -v openssl >/dev/null 2>&1") == 0; }

TEST(Kek, KeyFileInRawOrHexFormIsTheSameKey) {
  TempDir dir;
  std::string key = randomBytes(32, 1);
  writeFile(dir / "raw.key", key, 0600);
  writeFile(dir / "hex.key", toHex(key) + "\n", 0400);
  auto raw = kekFromFile(dir / "raw.key");
  auto hex = kekFromFile(dir / "hex.key");
  ASSERT_TRUE(raw) << raw.error().message;
  ASSERT_TRUE(hex) << hex.error().message;
  EXPECT_EQ((*raw)->id(), (*hex)->id());
  EXPECT_TRUE((*raw)->id().starts_with("local:"));
  auto wrapped = (*raw)->wrap(std::string(32, 'd'), "ctx");
  ASSERT_TRUE(wrapped);
  auto unwrapped = (*hex)->unwrap(*wrapped, "ctx");
  ASSERT_TRUE(unwrapped);
  EXPECT_EQ(*unwrapped, std::string(32, 'd'));
  // The context is bound: a wrapped key moved to another use does not unwrap.
  EXPECT_FALSE((*hex)->unwrap(*wrapped, "other"));
}

TEST(Kek, KeyFileReadableByOthersIsRefused) {
  TempDir dir;
  for (mode_t mode : {0644, 0640, 0604, 0660}) {
    writeFile(dir / "k.key", randomBytes(32, 2), mode);
    auto kek = kekFromFile(dir / "k.key");
    ASSERT_FALSE(kek) << std::oct << mode;
    EXPECT_NE(kek.error().message.find("chmod 600"), std::string::npos) << kek.error().message;
  }
  writeFile(dir / "short.key", "abc", 0600);
  EXPECT_FALSE(kekFromFile(dir / "short.key"));
  writeFile(dir / "upper.key", std::string(64, 'A'), 0600);
  EXPECT_FALSE(kekFromFile(dir / "upper.key"));
  writeFile(dir / "good.key", randomBytes(32, 3), 0600);
  std::filesystem::create_symlink(dir / "good.key", dir / "link.key");
  EXPECT_FALSE(kekFromFile(dir / "link.key"));  // a link could be swapped to point elsewhere
  EXPECT_FALSE(kekFromFile(dir / "missing.key"));
}

TEST(Kek, EnvironmentVariableHoldsTheKeyInHex) {
  std::string key = randomBytes(32, 4);
  setenv("SPACE_TEST_KEK", toHex(key).c_str(), 1);
  auto env = kekFromEnv("SPACE_TEST_KEK");
  ASSERT_TRUE(env) << env.error().message;
  auto bytes = kekFromBytes(key);
  EXPECT_EQ((*env)->id(), (*bytes)->id());
  auto spec = kekFromSpec("env:SPACE_TEST_KEK");
  ASSERT_TRUE(spec);
  EXPECT_EQ((*spec)->id(), (*env)->id());
  setenv("SPACE_TEST_KEK", "not-hex", 1);
  EXPECT_FALSE(kekFromEnv("SPACE_TEST_KEK"));
  unsetenv("SPACE_TEST_KEK");
  auto unset = kekFromEnv("SPACE_TEST_KEK");
  ASSERT_FALSE(unset);
  EXPECT_EQ(unset.error().kind, ErrorKind::kNotFound);
}

TEST(Kek, ExternalCommandWrapsThroughOpenssl) {
  if (!haveOpenssl()) GTEST_SKIP() << "openssl command not installed";
  TempDir dir;
  std::string script = writeOpensslKekScript(dir, "kms-master-secret");
  auto kek = kekFromCommand({script}, "kms:tenant-acme/v1");
  ASSERT_TRUE(kek) << kek.error().message;
  EXPECT_EQ((*kek)->id(), "kms:tenant-acme/v1");
  auto key = newDataKey("acme", **kek);
  ASSERT_TRUE(key) << key.error().message;
  EXPECT_EQ(key->slots[0].wrapped.find(key->key), std::string::npos);
  auto unwrapped = unwrapDataKey("acme", key->id, key->slots, **kek);
  ASSERT_TRUE(unwrapped) << unwrapped.error().message;
  EXPECT_EQ(*unwrapped, key->key);

  // Bound to its tenant and DEK id: the script refuses another context.
  auto moved = unwrapDataKey("other", key->id, key->slots, **kek);
  ASSERT_FALSE(moved);
  EXPECT_NE(moved.error().message.find("context mismatch"), std::string::npos) << moved.error().message;

  // The same id with another master secret: the KMS refuses, and says so.
  writeFile(dir / "kms.secret", "another-secret", 0600);
  auto refused = unwrapDataKey("acme", key->id, key->slots, **kek);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().kind, ErrorKind::kUnauthenticated);
  EXPECT_NE(refused.error().message.find("kms: unwrap refused"), std::string::npos) << refused.error().message;
}

TEST(Kek, ExternalCommandFailuresAreClearErrors) {
  TempDir dir;
  writeFile(dir / "liar.sh", "#!/bin/sh\n[ \"$1\" = wrap ] && { printf wrapped; exit 0; }\nprintf 'short'\n", 0700);
  auto liar = kekFromCommand({dir / "liar.sh"}, "liar");
  ASSERT_TRUE(liar);
  auto key = newDataKey("acme", **liar);
  ASSERT_TRUE(key);
  auto bad = unwrapDataKey("acme", key->id, key->slots, **liar);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("not a 32-byte key"), std::string::npos) << bad.error().message;

  // Returns 32 bytes, but not the data key: caught by the key's id.
  writeFile(dir / "wrongkey.sh", "#!/bin/sh\ncat >/dev/null\nprintf '%032d' 0\n", 0700);
  auto wrong = kekFromCommand({dir / "wrongkey.sh"}, "liar");
  auto caught = unwrapDataKey("acme", key->id, key->slots, **wrong);
  ASSERT_FALSE(caught);
  EXPECT_NE(caught.error().message.find("not data key"), std::string::npos) << caught.error().message;

  auto missing = kekFromCommand({dir / "no-such-program"}, "x");
  ASSERT_TRUE(missing);
  EXPECT_FALSE((*missing)->wrap(std::string(32, 'k'), "c"));
  EXPECT_FALSE(kekFromCommand({}, "x"));
  EXPECT_FALSE(kekFromCommand({"/bin/true"}, "bad id with spaces"));
  EXPECT_FALSE(kekFromSpec("command:only-an-id"));
  EXPECT_FALSE(kekFromSpec("vault:x"));
}

}  // namespace
}  // namespace space::archive
