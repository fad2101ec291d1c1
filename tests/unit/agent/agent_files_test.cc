// End-to-end: the file API against the real space-agent, including symlink escapes (SECURITY.md J20)
// judged from the host: outside files unchanged and their content never returned.
#include <sys/stat.h>

#include <random>

#include "agent_harness.h"

namespace space::agent::testing {
namespace {

constexpr const char* kSecret = "TOP-SECRET-HOST-CONTENT";

class AgentFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SPACE_START_AGENT(agent_);
    client_ = agent_.connect();
    ASSERT_TRUE(client_);
    outside_ = agent_.dir() / "outside";
    fs::create_directories(outside_);
    writeHostFile(outside_ / "secret.txt", kSecret);
  }

  Result<std::string> download(const std::string& path) {
    ASSIGN_OR_RETURN(auto r, client_->readFile(path));
    std::string all;
    for (;;) {
      ASSIGN_OR_RETURN(std::string chunk, r->read(1 << 20));
      if (chunk.empty()) return all;
      all += chunk;
    }
  }

  Status upload(const std::string& path, const std::string& data) {
    ASSIGN_OR_RETURN(auto w, client_->writeFile(path, 0644));
    for (size_t i = 0; i < data.size(); i += 1 << 20) TRY(w->write(std::string_view(data).substr(i, 1 << 20)));
    TRY(w->finish());
    return ok();
  }

  void expectOutsideUntouched() {
    EXPECT_EQ(readHostFile(outside_ / "secret.txt"), kSecret);
    size_t n = 0;
    for (auto& e : fs::directory_iterator(outside_)) n += e.exists();
    EXPECT_EQ(n, 1u) << "something was created outside the root";
  }

  AgentProcess agent_;
  std::shared_ptr<AgentClient> client_;
  fs::path outside_;
};

std::string randomBytes(size_t n, uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::string s(n, '\0');
  for (size_t i = 0; i + 8 <= n; i += 8) {
    uint64_t v = rng();
    std::memcpy(&s[i], &v, 8);
  }
  return s;
}

TEST_F(AgentFilesTest, UploadDownload64MiB) {
  std::string data = randomBytes(64u << 20, 7);
  auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(upload("/data/../big.bin", data).has_value());
  auto t1 = std::chrono::steady_clock::now();
  auto back = download("big.bin");
  auto t2 = std::chrono::steady_clock::now();
  EXPECT_TRUE(readHostFile(agent_.root() / "big.bin") == data);
  ASSERT_TRUE(back.has_value()) << back.error().message;
  EXPECT_EQ(back->size(), data.size());
  EXPECT_TRUE(*back == data);
  double up = 64 / std::chrono::duration<double>(t1 - t0).count();
  double down = 64 / std::chrono::duration<double>(t2 - t1).count();
  std::printf("files: upload %.0f MiB/s, download %.0f MiB/s (64 MiB)\n", up, down);
  struct stat st {};
  ASSERT_EQ(::stat((agent_.root() / "big.bin").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
}

TEST_F(AgentFilesTest, AbandonedUploadLeavesNothing) {
  fs::create_directories(agent_.root() / "d");
  {
    auto w = client_->writeFile("/d/partial.bin", 0600);
    ASSERT_TRUE(w.has_value());
    ASSERT_TRUE((*w)->write(std::string(100000, 'a')).has_value());
  }
  ASSERT_TRUE(client_->ping(Duration(5000)).has_value());  // the cancel was processed before this
  EXPECT_TRUE(fs::is_empty(agent_.root() / "d"));
}

TEST_F(AgentFilesTest, UploadReplacesAtomically) {
  writeHostFile(agent_.root() / "f.txt", "old");
  ASSERT_TRUE(upload("f.txt", "new content").has_value());
  EXPECT_EQ(readHostFile(agent_.root() / "f.txt"), "new content");
}

TEST_F(AgentFilesTest, StatListMkdirMoveRemove) {
  ASSERT_TRUE(client_->mkdir("/a/b/c", true, 0755).has_value());
  EXPECT_TRUE(fs::is_directory(agent_.root() / "a/b/c"));
  EXPECT_TRUE(client_->mkdir("/a/b/c", true, 0755).has_value());
  EXPECT_FALSE(client_->mkdir("/x/y", false, 0755).has_value());
  ASSERT_TRUE(upload("/a/b/file.txt", "12345").has_value());
  auto st = client_->stat("/a/b/file.txt");
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->type, "file");
  EXPECT_EQ(st->size, 5u);
  EXPECT_EQ(st->mode, 0644u);
  fs::create_symlink("file.txt", agent_.root() / "a/b/link");
  auto ls = client_->list("/a/b");
  ASSERT_TRUE(ls.has_value());
  std::map<std::string, std::string> types;
  for (auto& e : *ls) types[e.name] = e.type;
  EXPECT_EQ(types, (std::map<std::string, std::string>{{"c", "dir"}, {"file.txt", "file"}, {"link", "symlink"}}));
  auto link = client_->stat("/a/b/link");
  ASSERT_TRUE(link.has_value());
  EXPECT_EQ(link->link_target, "file.txt");
  ASSERT_TRUE(client_->move("/a/b/file.txt", "/moved.txt").has_value());
  EXPECT_EQ(readHostFile(agent_.root() / "moved.txt"), "12345");
  EXPECT_FALSE(client_->remove("/a", false).has_value());
  ASSERT_TRUE(client_->remove("/a", true).has_value());
  EXPECT_FALSE(fs::exists(agent_.root() / "a"));
  EXPECT_EQ(client_->stat("/a").error().kind, ErrorKind::kNotFound);
  EXPECT_FALSE(client_->remove("/", true).has_value());
  EXPECT_TRUE(fs::exists(agent_.root()));
}

TEST_F(AgentFilesTest, LargeDirectoryListingArrivesInBatches) {
  fs::create_directories(agent_.root() / "many");
  for (int i = 0; i < 2500; ++i) writeHostFile(agent_.root() / "many" / std::to_string(i), "");
  auto ls = client_->list("/many");
  ASSERT_TRUE(ls.has_value());
  EXPECT_EQ(ls->size(), 2500u);
}

TEST_F(AgentFilesTest, OnlyRegularFiles) {
  ASSERT_EQ(mkfifo((agent_.root() / "fifo").c_str(), 0644), 0);
  auto r = client_->readFile("/fifo");
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().kind, ErrorKind::kInvalidArgument);
  EXPECT_NE(r.error().message.find("fifo"), std::string::npos) << r.error().message;
  auto w = client_->writeFile("/fifo", 0644);
  ASSERT_FALSE(w.has_value());
  EXPECT_EQ(client_->readFile("/").error().kind, ErrorKind::kInvalidArgument);
  EXPECT_EQ(client_->readFile("/missing").error().kind, ErrorKind::kNotFound);
  EXPECT_EQ(client_->writeFile("/nodir/x", 0644).error().kind, ErrorKind::kNotFound);
}

// J20: links planted inside the root pointing outside it.
TEST_F(AgentFilesTest, SymlinkEscapesStayInsideRoot) {
  const fs::path root = agent_.root();
  fs::create_symlink(outside_ / "secret.txt", root / "abs_link");
  fs::create_symlink("../outside/secret.txt", root / "rel_link");
  fs::create_symlink("../../../../../../../../" + (outside_ / "secret.txt").string(), root / "deep_link");
  fs::create_symlink(outside_, root / "dir_link");
  fs::create_symlink("loop", root / "loop");
  fs::create_symlink("/proc/self/root" + (outside_ / "secret.txt").string(), root / "proc_link");

  for (const char* p : {"/abs_link", "/rel_link", "/deep_link", "/dir_link/secret.txt", "/loop", "/proc_link",
                        "../outside/secret.txt", "/../../outside/secret.txt"}) {
    auto got = download(p);
    if (got.has_value()) {
      EXPECT_EQ(got->find(kSecret), std::string::npos) << p;
    }
    auto st = client_->stat(std::string(p) + "/..");
    (void)st;
  }
  EXPECT_EQ(download("/loop").error().kind, ErrorKind::kInvalidArgument);  // ELOOP
  EXPECT_FALSE(client_->list("/dir_link").has_value());

  // Writes through the links: none reaches outside.
  (void)upload("/abs_link", "overwritten");
  (void)upload("/dir_link/secret.txt", "overwritten");
  (void)upload("/dir_link/new.txt", "created");
  (void)upload("../outside/secret.txt", "overwritten");
  (void)client_->mkdir("/dir_link/newdir", true, 0755);
  (void)client_->remove("/dir_link/secret.txt", false);
  (void)client_->remove("/dir_link", true);
  (void)client_->move("/rel_link", "/dir_link/moved");
  (void)client_->move("/dir_link/secret.txt", "/stolen.txt");
  expectOutsideUntouched();
  EXPECT_FALSE(fs::exists(root / "stolen.txt"));
}

TEST_F(AgentFilesTest, SymlinkSwapRace) {
  // A sandbox process flips a directory between a real directory and a link to outside while the
  // host reads and writes through it.
  fs::create_directories(agent_.root() / "flip_real");
  writeHostFile(agent_.root() / "flip_real/secret.txt", "inside");
  auto flipper = client_->exec(
      sh(std::string("cd '") + agent_.root().string() + "' && while true; do ln -sfn '" + outside_.string() +
         "' flip.new && mv -T flip.new flip; ln -sfn flip_real flip.new && mv -T flip.new flip; done"));
  ASSERT_TRUE(flipper.has_value());
  for (int i = 0; i < 300; ++i) {
    auto got = download("/flip/secret.txt");
    if (got) {
      EXPECT_EQ(got->find(kSecret), std::string::npos);
    }
    (void)upload("/flip/secret.txt", "overwritten");
  }
  flipper->reset();
  EXPECT_EQ(readHostFile(outside_ / "secret.txt"), kSecret);
}

}  // namespace
}  // namespace space::agent::testing
