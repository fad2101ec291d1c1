#include "store/templates.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "store/tree_hash.h"
#include "sys/host_command.h"

namespace space::store {
namespace {

namespace fs = std::filesystem;

std::string makeTempDir(const char* what) {
  std::string tmpl = fmt::format("/tmp/space-{}-XXXXXX", what);
  if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp");
  return tmpl;
}

void run(const std::vector<std::string>& argv) {
  auto r = sys::runCommand(argv, nullptr);
  ASSERT_TRUE(r) << r.error().message;
}

void writeFile(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

// The busybox tree is built once per test binary: scripts/make-busybox-rootfs forks once per applet.
class TemplatesTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    busybox_dir_ = new std::string(makeTempDir("busybox") + "/rootfs");
    auto r = sys::runCommand({"bash", std::string(SPACE_SOURCE_DIR) + "/scripts/make-busybox-rootfs", *busybox_dir_},
                             nullptr);
    ASSERT_TRUE(r) << r.error().message;
  }
  static void TearDownTestSuite() {
    fs::remove_all(fs::path(*busybox_dir_).parent_path());
    delete busybox_dir_;
  }

  void SetUp() override {
    state_ = makeTempDir("templates-test");
    work_ = makeTempDir("templates-work");
    auto s = Store::open(state_);
    ASSERT_TRUE(s) << s.error().message;
    store_ = std::move(*s);
    builder_ = std::make_unique<TemplateBuilder>(state_, *store_);
  }
  void TearDown() override {
    builder_.reset();
    store_.reset();
    fs::remove_all(state_);
    fs::remove_all(work_);
  }

  Result<TemplateRecord> build(const std::string& name, const std::string& kind, const std::string& path) {
    TemplateBuildSpec spec;
    spec.name = name;
    spec.kind = kind;
    spec.path = path;
    return builder_->build(spec, [&](const std::string& line) { progress_.push_back(line); });
  }

  // Entries of the template store: hash directories and leftovers.
  std::vector<std::string> storeEntries() {
    std::vector<std::string> out;
    for (auto& e : fs::directory_iterator(state_ + "/templates")) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }

  static std::string* busybox_dir_;
  std::string state_, work_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<TemplateBuilder> builder_;
  std::vector<std::string> progress_;
};
std::string* TemplatesTest::busybox_dir_ = nullptr;

TEST(TemplateNameTest, Validation) {
  for (std::string ok : std::vector<std::string>{"a", "base", "py3.11", "debian-12_slim", "0", std::string(63, 'a')}) {
    EXPECT_TRUE(validateTemplateName(ok)) << ok;
  }
  for (std::string bad :
       std::vector<std::string>{"", "-a", ".a", "_a", "A", "a/b", "a b", "..", "a\n", std::string(64, 'a'), "é"}) {
    auto r = validateTemplateName(bad);
    ASSERT_FALSE(r) << bad;
    EXPECT_EQ(r.error().kind, ErrorKind::kInvalidArgument);
  }
}

TEST_F(TemplatesTest, BuildFromDirectory) {
  auto t = build("busybox", "dir", *busybox_dir_);
  ASSERT_TRUE(t) << t.error().message;
  EXPECT_EQ(t->name, "busybox");
  ASSERT_TRUE(t->id.starts_with("sha256:"));
  EXPECT_EQ(t->id.size(), 7u + 64u);
  EXPECT_EQ(t->rootfs, fmt::format("{}/templates/{}/rootfs", state_, t->id.substr(7)));
  EXPECT_EQ(t->source["kind"], "dir");
  EXPECT_GT(t->size_bytes, 1000000u);  // busybox itself
  EXPECT_FALSE(progress_.empty());

  EXPECT_EQ(fs::read_symlink(t->rootfs + "/bin/sh"), "busybox");
  struct stat st;
  ASSERT_EQ(::stat((t->rootfs + "/tmp").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 01777);
  ASSERT_EQ(::stat((t->rootfs + "/home/user").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, ::geteuid() == 0 ? 1000u : ::geteuid());
  for (const char* d : {"proc", "dev", "sys", "run", "root", "etc"})
    EXPECT_TRUE(fs::is_directory(t->rootfs + "/" + d)) << d;

  auto stored = store_->getTemplate("busybox");
  ASSERT_TRUE(stored);
  EXPECT_EQ(stored->id, t->id);
  EXPECT_EQ(storeEntries(), std::vector<std::string>{t->id.substr(7)});  // no tmp- left
  auto rehash = hashTree(t->rootfs);
  ASSERT_TRUE(rehash);
  EXPECT_EQ("sha256:" + rehash->hex, t->id);
}

TEST_F(TemplatesTest, AddsMissingSandboxDirectoriesBeforeHashing) {
  std::string src = work_ + "/bare";
  fs::create_directories(src + "/bin");
  writeFile(src + "/bin/hello", "hi\n");
  auto t = build("bare", "dir", src);
  ASSERT_TRUE(t) << t.error().message;
  for (const char* d : {"proc", "dev", "sys", "tmp", "root", "etc"}) EXPECT_TRUE(fs::is_directory(t->rootfs + "/" + d));
  struct stat st;
  ASSERT_EQ(::stat((t->rootfs + "/root").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700);
  EXPECT_EQ("sha256:" + hashTree(t->rootfs)->hex, t->id);
  EXPECT_FALSE(fs::exists(src + "/proc"));  // the source is never touched
}

TEST_F(TemplatesTest, WarnsWhenTheTreeHasNoShell) {
  auto busybox = build("busybox", "dir", *busybox_dir_);  // /bin/sh -> busybox
  ASSERT_TRUE(busybox) << busybox.error().message;
  EXPECT_TRUE(busybox->warnings.empty()) << busybox->warnings.front();

  std::string src = work_ + "/no-shell";
  fs::create_directories(src + "/bin");
  writeFile(src + "/bin/app", "#!/app\n");
  ::chmod((src + "/bin/app").c_str(), 0755);
  auto t = build("no-shell", "dir", src);
  ASSERT_TRUE(t) << t.error().message;  // argv execs work without a shell: built, with a warning
  ASSERT_EQ(t->warnings.size(), 1u);
  for (const char* said : {"/bin/sh", "\"shell\"", "space shell", "sh -c", "\"cmd\"", "busybox"})
    EXPECT_NE(t->warnings[0].find(said), std::string::npos) << said << " in: " << t->warnings[0];

  // A shell that is a plain file without an execute bit is no shell either.
  writeFile(src + "/bin/sh", "not executable");
  ::chmod((src + "/bin/sh").c_str(), 0644);
  auto plain = build("plain-sh", "dir", src);
  ASSERT_TRUE(plain) << plain.error().message;
  EXPECT_EQ(plain->warnings.size(), 1u);
}

TEST_F(TemplatesTest, ShellSymlinksAreFollowedInsideTheTreeOnly) {
  // /bin/sh -> /usr/bin/dash resolves in the tree: there it is a real shell.
  std::string inside = work_ + "/abs-inside";
  fs::create_directories(inside + "/bin");
  fs::create_directories(inside + "/usr/bin");
  fs::copy_file(*busybox_dir_ + "/bin/busybox", inside + "/usr/bin/dash");
  fs::create_symlink("/usr/bin/dash", inside + "/bin/sh");
  auto in_tree = build("abs-inside", "dir", inside);
  ASSERT_TRUE(in_tree) << in_tree.error().message;
  EXPECT_TRUE(in_tree->warnings.empty());

  // A link to a shell only the host has, by absolute path or by climbing out with "..", leads nowhere
  // inside the tree (followed on the host, both would find the host's bash).
  ASSERT_TRUE(fs::exists("/usr/bin/bash"));
  for (std::string target : {"/usr/bin/bash", "../../../../../../../../usr/bin/bash"}) {
    std::string src = work_ + "/abs-outside";
    fs::remove_all(src);
    fs::create_directories(src + "/bin");
    fs::create_symlink(target, src + "/bin/sh");
    auto t = build("abs-outside", "dir", src);
    ASSERT_TRUE(t) << t.error().message;
    EXPECT_EQ(t->warnings.size(), 1u) << target;
  }
}

TEST_F(TemplatesTest, RefusesSymlinkWhereSandboxMountsGo) {
  std::string src = work_ + "/evil";
  fs::create_directories(src);
  fs::create_symlink("/etc", src + "/tmp");
  auto t = build("evil", "dir", src);
  ASSERT_FALSE(t);
  EXPECT_EQ(t.error().kind, ErrorKind::kInvalidArgument);
  EXPECT_NE(t.error().message.find("/tmp must be a directory"), std::string::npos) << t.error().message;
  EXPECT_TRUE(storeEntries().empty());
}

TEST_F(TemplatesTest, IdenticalTreesShareOneCopy) {
  auto a = build("a", "dir", *busybox_dir_);
  ASSERT_TRUE(a) << a.error().message;
  auto b = build("b", "dir", *busybox_dir_);
  ASSERT_TRUE(b) << b.error().message;
  EXPECT_EQ(a->id, b->id);
  EXPECT_EQ(a->rootfs, b->rootfs);
  EXPECT_EQ(storeEntries().size(), 1u);
  EXPECT_EQ(store_->listTemplates()->size(), 2u);

  // Removing one name keeps the tree for the other; removing the last deletes it.
  ASSERT_TRUE(builder_->remove("a"));
  EXPECT_TRUE(fs::exists(b->rootfs));
  ASSERT_TRUE(builder_->remove("b"));
  EXPECT_FALSE(fs::exists(b->rootfs));
  EXPECT_TRUE(storeEntries().empty());
  EXPECT_EQ(builder_->remove("b").error().kind, ErrorKind::kNotFound);
}

TEST_F(TemplatesTest, CompressedTarballHashesLikeTheDirectory) {
  std::string tarball = work_ + "/rootfs.tar.gz";
  run({"tar", "-C", *busybox_dir_, "--numeric-owner", "-czf", tarball, "."});
  auto from_tar = build("from-tar", "tar", tarball);
  ASSERT_TRUE(from_tar) << from_tar.error().message;
  EXPECT_EQ(from_tar->source["kind"], "tar");
  EXPECT_EQ(fs::read_symlink(from_tar->rootfs + "/bin/ls"), "busybox");
  auto from_dir = build("from-dir", "dir", *busybox_dir_);
  ASSERT_TRUE(from_dir) << from_dir.error().message;
  EXPECT_EQ(from_tar->id, from_dir->id);  // timestamps differ, content does not
  EXPECT_EQ(storeEntries().size(), 1u);
}

TEST_F(TemplatesTest, PreservesLinksOwnersAndXattrs) {
  std::string src = work_ + "/links";
  fs::create_directories(src + "/data");
  writeFile(src + "/data/file", "content");
  fs::create_hard_link(src + "/data/file", src + "/data/hard");
  fs::create_symlink("file", src + "/data/rel");
  fs::create_symlink("/data/file", src + "/data/abs");
  ::chmod((src + "/data/file").c_str(), 04750);
  bool root = ::geteuid() == 0;
  if (root) {
    ASSERT_EQ(::lchown((src + "/data/rel").c_str(), 1234, 5678), 0);
  }
  bool xattrs = ::setxattr((src + "/data/file").c_str(), "user.space", "v1", 2, 0) == 0;

  auto check = [&](const TemplateRecord& t) {
    std::string d = t.rootfs + "/data";
    struct stat a, b, l;
    ASSERT_EQ(::stat((d + "/file").c_str(), &a), 0);
    ASSERT_EQ(::stat((d + "/hard").c_str(), &b), 0);
    EXPECT_EQ(a.st_ino, b.st_ino) << "hard link became a copy";
    EXPECT_EQ(a.st_mode & 07777, 04750);
    EXPECT_EQ(fs::read_symlink(d + "/rel"), "file");
    EXPECT_EQ(fs::read_symlink(d + "/abs"), "/data/file");
    ASSERT_EQ(::lstat((d + "/rel").c_str(), &l), 0);
    if (root) {
      EXPECT_EQ(l.st_uid, 1234u);
      EXPECT_EQ(l.st_gid, 5678u);
    }
    if (xattrs) {
      char value[8] = {};
      EXPECT_EQ(::getxattr((d + "/file").c_str(), "user.space", value, sizeof value), 2);
      EXPECT_STREQ(value, "v1");
    }
  };
  auto from_dir = build("links-dir", "dir", src);
  ASSERT_TRUE(from_dir) << from_dir.error().message;
  check(*from_dir);

  std::string tarball = work_ + "/links.tar";
  run({"tar", "-C", src, "--numeric-owner", "--xattrs", "--xattrs-include=*", "-cf", tarball, "."});
  auto from_tar = build("links-tar", "tar", tarball);
  ASSERT_TRUE(from_tar) << from_tar.error().message;
  check(*from_tar);
  EXPECT_EQ(from_tar->id, from_dir->id);
}

TEST_F(TemplatesTest, TarWithParentOrAbsoluteMembersIsRejectedAndLeavesNothing) {
  fs::create_directories(work_ + "/a/b");
  writeFile(work_ + "/a/escape", "x");
  writeFile(work_ + "/a/b/inside", "x");
  // -P keeps "../" and leading "/" in member names, as a hostile archive would have them.
  std::string dotdot = work_ + "/dotdot.tar";
  run({"tar", "-C", work_ + "/a/b", "-P", "-cf", dotdot, "inside", "../escape"});
  std::string absolute = work_ + "/absolute.tar";
  run({"tar", "-P", "-cf", absolute, work_ + "/a/escape"});

  for (const auto& tarball : {dotdot, absolute}) {
    auto t = build("evil", "tar", tarball);
    ASSERT_FALSE(t) << tarball;
    EXPECT_EQ(t.error().kind, ErrorKind::kInvalidArgument);
    EXPECT_NE(t.error().message.find("absolute or contains '..'"), std::string::npos) << t.error().message;
    EXPECT_TRUE(storeEntries().empty());
    EXPECT_EQ(store_->getTemplate("evil").error().kind, ErrorKind::kNotFound);
  }
  EXPECT_FALSE(fs::exists(state_ + "/escape"));
  EXPECT_FALSE(fs::exists(state_ + "/templates/escape"));
}

TEST_F(TemplatesTest, CorruptTarballFailsCleanly) {
  std::string tarball = work_ + "/junk.tar.gz";
  writeFile(tarball, "this is not a tarball");
  auto t = build("junk", "tar", tarball);
  ASSERT_FALSE(t);
  EXPECT_EQ(t.error().kind, ErrorKind::kInvalidArgument);
  EXPECT_TRUE(storeEntries().empty());
}

TEST_F(TemplatesTest, RejectsBadRequestsBeforeDoingAnything) {
  EXPECT_EQ(build("Bad Name", "dir", *busybox_dir_).error().kind, ErrorKind::kInvalidArgument);
  EXPECT_EQ(build("x", "oci", *busybox_dir_).error().kind, ErrorKind::kInvalidArgument);
  EXPECT_EQ(build("x", "dir", "relative/path").error().kind, ErrorKind::kInvalidArgument);
  EXPECT_EQ(build("x", "dir", work_ + "/missing").error().kind, ErrorKind::kNotFound);
  EXPECT_EQ(build("x", "tar", work_).error().kind, ErrorKind::kInvalidArgument);  // a directory
  EXPECT_EQ(build("x", "dir", state_ + "/templates").error().kind, ErrorKind::kInvalidArgument);

  // debootstrap arguments that could be read as options never reach its argv.
  TemplateBuildSpec spec{.name = "deb", .kind = "debootstrap"};
  spec.suite = "--foreign";
  EXPECT_EQ(builder_->build(spec, nullptr).error().kind, ErrorKind::kInvalidArgument);
  spec.suite = "bookworm";
  spec.packages = {"python3", "--keyring=/x"};
  EXPECT_EQ(builder_->build(spec, nullptr).error().kind, ErrorKind::kInvalidArgument);
  spec.packages = {"python3"};
  spec.mirror = "--no-check-gpg";
  EXPECT_EQ(builder_->build(spec, nullptr).error().kind, ErrorKind::kInvalidArgument);
  spec.mirror = "";
  spec.variant = "--unpack-tarball=/x";
  EXPECT_EQ(builder_->build(spec, nullptr).error().kind, ErrorKind::kInvalidArgument);
  EXPECT_TRUE(storeEntries().empty());
}

TEST_F(TemplatesTest, RemoveRefusedWhileSandboxesUseTheTree) {
  auto t = build("busybox", "dir", *busybox_dir_);
  ASSERT_TRUE(t) << t.error().message;
  SandboxRecord sb;
  sb.id = "sb-1";
  sb.template_name = t->name;
  sb.template_id = t->id;
  sb.state = SandboxState::kRunning;
  sb.runtime = "jail";
  ASSERT_TRUE(store_->insertSandbox(sb));
  auto refused = builder_->remove("busybox");
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().kind, ErrorKind::kConflict);
  EXPECT_TRUE(fs::exists(t->rootfs));
  EXPECT_TRUE(store_->getTemplate("busybox"));

  ASSERT_TRUE(store_->deleteSandbox("sb-1"));
  ASSERT_TRUE(builder_->remove("busybox"));
  EXPECT_FALSE(fs::exists(t->rootfs));
  EXPECT_TRUE(storeEntries().empty());
}

TEST_F(TemplatesTest, RebuildUnderSameNameDropsTheOrphanedTree) {
  std::string src = work_ + "/v";
  fs::create_directories(src);
  writeFile(src + "/version", "1");
  auto v1 = build("app", "dir", src);
  ASSERT_TRUE(v1) << v1.error().message;
  writeFile(src + "/version", "2");
  auto v2 = build("app", "dir", src);
  ASSERT_TRUE(v2) << v2.error().message;
  EXPECT_NE(v1->id, v2->id);
  EXPECT_FALSE(fs::exists(v1->rootfs));
  EXPECT_EQ(storeEntries(), std::vector<std::string>{v2->id.substr(7)});
  EXPECT_EQ(store_->getTemplate("app")->id, v2->id);
}

TEST_F(TemplatesTest, InterruptedBuildsAreRemovedAtStartUp) {
  fs::create_directories(state_ + "/templates/tmp-deadbeef/rootfs/bin");
  fs::create_directories(state_ + "/templates/" + std::string(64, 'a') + "/rootfs");  // published, no row
  fs::create_directories(state_ + "/templates/" + std::string(64, 'b') + "/rootfs");  // a sandbox still uses it
  SandboxRecord sb;
  sb.id = "sb-1";
  sb.template_id = "sha256:" + std::string(64, 'b');
  ASSERT_TRUE(store_->insertSandbox(sb));
  auto t = build("busybox", "dir", *busybox_dir_);
  ASSERT_TRUE(t);
  ASSERT_TRUE(builder_->removeInterruptedBuilds());
  std::vector<std::string> expected = {std::string(64, 'b'), t->id.substr(7)};
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(storeEntries(), expected);
}

TEST_F(TemplatesTest, NothingToCleanInAFreshStateDirectory) { EXPECT_TRUE(builder_->removeInterruptedBuilds()); }

// ---- the tree hash on its own

class TreeHashTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = makeTempDir("treehash");
    fs::create_directories(dir_ + "/t/sub");
    writeFile(dir_ + "/t/sub/f", "hello");
    fs::create_symlink("sub/f", dir_ + "/t/link");
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string hash() {
    auto d = hashTree(dir_ + "/t");
    EXPECT_TRUE(d) << d.error().message;
    return d ? d->hex : "";
  }
  std::string dir_;
};

TEST_F(TreeHashTest, IgnoresTimestampsOnly) {
  std::string before = hash();
  EXPECT_EQ(before.size(), 64u);
  const struct timespec long_ago[2] = {{1000, 0}, {1000, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, (dir_ + "/t/sub/f").c_str(), long_ago, 0), 0);
  ASSERT_EQ(::utimensat(AT_FDCWD, (dir_ + "/t/sub").c_str(), long_ago, 0), 0);
  EXPECT_EQ(hash(), before);
}

TEST_F(TreeHashTest, SeesEveryKindOfChange) {
  std::string h0 = hash();
  ::chmod((dir_ + "/t/sub/f").c_str(), 0600);
  std::string h1 = hash();
  EXPECT_NE(h1, h0);
  writeFile(dir_ + "/t/sub/f", "hellO");
  std::string h2 = hash();
  EXPECT_NE(h2, h1);
  fs::remove(dir_ + "/t/link");
  fs::create_symlink("sub/g", dir_ + "/t/link");
  std::string h3 = hash();
  EXPECT_NE(h3, h2);
  // Same contents, but a hard link instead of a second copy: a different tree.
  writeFile(dir_ + "/t/copy", "hellO");
  ::chmod((dir_ + "/t/copy").c_str(), 0600);
  std::string with_copy = hash();
  fs::remove(dir_ + "/t/copy");
  fs::create_hard_link(dir_ + "/t/sub/f", dir_ + "/t/copy");
  EXPECT_NE(hash(), with_copy);
  fs::rename(dir_ + "/t/copy", dir_ + "/t/copz");
  EXPECT_NE(hash(), with_copy);
}

TEST_F(TreeHashTest, CountsHardLinkedBytesOnce) {
  fs::create_hard_link(dir_ + "/t/sub/f", dir_ + "/t/again");
  auto d = hashTree(dir_ + "/t");
  ASSERT_TRUE(d);
  EXPECT_EQ(d->size_bytes, 5u);
  EXPECT_EQ(d->entries, 5u);  // ., again, link, sub, sub/f
}

// ---- host commands

TEST(HostCommandTest, StreamsLinesAndReportsExitStatus) {
  std::vector<std::string> lines;
  auto r = sys::runCommand({"sh", "-c", "echo one; echo two >&2; printf three; exit 3"},
                           [&](const std::string& l) { lines.push_back(l); });
  ASSERT_FALSE(r);
  EXPECT_EQ(lines, (std::vector<std::string>{"one", "two", "three"}));
  EXPECT_NE(r.error().message.find("exit status 3"), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("three"), std::string::npos);
  EXPECT_TRUE(sys::runCommand({"true"}, nullptr));
  auto missing = sys::runCommand({"/nonexistent/tool"}, nullptr);
  ASSERT_FALSE(missing);
  // A tool missing on the host is the node's problem, not the client's: never a 404.
  EXPECT_EQ(missing.error().kind, ErrorKind::kInternal);
  EXPECT_NE(missing.error().message.find("/nonexistent/tool"), std::string::npos) << missing.error().message;
}

}  // namespace
}  // namespace space::store
