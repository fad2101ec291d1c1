#include "store/store.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <thread>

#include "store/schema.h"
#include "store/sqlite.h"

namespace space::store {
namespace {

namespace fs = std::filesystem;

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/space-store-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    auto s = Store::open(dir_);
    ASSERT_TRUE(s) << s.error().message;
    store_ = std::move(*s);
  }
  void TearDown() override {
    store_.reset();
    fs::remove_all(dir_);
  }

  void reopen() {
    store_.reset();
    auto s = Store::open(dir_);
    ASSERT_TRUE(s) << s.error().message;
    store_ = std::move(*s);
  }

  static SandboxRecord sandbox(std::string id, int slot, std::map<std::string, std::string> labels = {}) {
    SandboxRecord s;
    s.id = std::move(id);
    s.template_name = "base";
    s.template_id = "sha256:aa";
    s.state = SandboxState::kRunning;
    s.runtime = "jail";
    s.spec = {{"memory", 1 << 20}};
    s.labels = std::move(labels);
    s.uid_slot = slot;
    s.persisted = {{"pid", 42}};
    return s;
  }

  std::string dir_;
  std::unique_ptr<Store> store_;
};

TEST_F(StoreTest, CreatesDatabaseOwnerOnly) {
  struct stat st;
  ASSERT_EQ(::stat((dir_ + "/space.db").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600);
}

TEST_F(StoreTest, MigrationsAreIdempotentOnReopen) {
  reopen();
  reopen();
  auto db = sql::Db::open(dir_ + "/space.db");
  ASSERT_TRUE(db) << db.error().message;
  auto version = schemaVersion(*db);
  ASSERT_TRUE(version);
  EXPECT_EQ(*version, latestSchemaVersion());
  auto rows = db->prepare("SELECT COUNT(*) FROM schema_version");
  ASSERT_TRUE(rows);
  ASSERT_TRUE(rows->step());
  EXPECT_EQ(rows->columnInt(0), latestSchemaVersion());
  // migrate() again on an up-to-date database is a no-op.
  EXPECT_TRUE(migrate(*db));
}

TEST_F(StoreTest, RefusesNewerSchema) {
  {
    auto db = sql::Db::open(dir_ + "/space.db");
    ASSERT_TRUE(db);
    ASSERT_TRUE(db->exec("INSERT INTO schema_version (version, applied_ms) VALUES (999, 0)"));
  }
  store_.reset();
  auto s = Store::open(dir_);
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().kind, ErrorKind::kUnsupported);
}

TEST_F(StoreTest, TemplateCrud) {
  TemplateRecord t{"sha256:aa", "base", "/x/rootfs", {{"kind", "dir"}}, 123, 0};
  ASSERT_TRUE(store_->putTemplate(t));
  auto got = store_->getTemplate("base");
  ASSERT_TRUE(got) << got.error().message;
  EXPECT_EQ(got->id, "sha256:aa");
  EXPECT_EQ(got->rootfs, "/x/rootfs");
  EXPECT_EQ(got->source["kind"], "dir");
  EXPECT_EQ(got->size_bytes, 123u);
  EXPECT_GT(got->created_ms, 0);

  t.id = "sha256:bb";  // put replaces by name
  ASSERT_TRUE(store_->putTemplate(t));
  TemplateRecord alias = t;
  alias.name = "alias";
  ASSERT_TRUE(store_->putTemplate(alias));
  auto all = store_->listTemplates();
  ASSERT_TRUE(all);
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].name, "alias");
  EXPECT_EQ((*all)[1].id, "sha256:bb");
  EXPECT_EQ(*store_->countTemplatesWithId("sha256:bb"), 2);

  ASSERT_TRUE(store_->deleteTemplate("base"));
  auto gone = store_->getTemplate("base");
  ASSERT_FALSE(gone);
  EXPECT_EQ(gone.error().kind, ErrorKind::kNotFound);
  EXPECT_EQ(store_->deleteTemplate("base").error().kind, ErrorKind::kNotFound);
}

TEST_F(StoreTest, SandboxCrud) {
  auto s = sandbox("sb-1", 0, {{"team", "a"}});
  s.expires_ms = 99;
  s.error = "none";
  ASSERT_TRUE(store_->insertSandbox(s));
  auto dup = store_->insertSandbox(sandbox("sb-1", 5));
  ASSERT_FALSE(dup);
  EXPECT_EQ(dup.error().kind, ErrorKind::kConflict);

  auto got = store_->getSandbox("sb-1");
  ASSERT_TRUE(got) << got.error().message;
  EXPECT_EQ(got->template_name, "base");
  EXPECT_EQ(got->spec["memory"], 1 << 20);
  EXPECT_EQ(got->labels.at("team"), "a");
  EXPECT_EQ(got->persisted["pid"], 42);
  EXPECT_EQ(got->uid_slot, 0);
  EXPECT_EQ(got->expires_ms, 99);
  EXPECT_EQ(got->error, "none");
  EXPECT_FALSE(got->pooled);

  got->state = SandboxState::kPaused;
  got->labels["env"] = "dev";
  ASSERT_TRUE(store_->updateSandbox(*got));
  EXPECT_EQ(store_->getSandbox("sb-1")->state, SandboxState::kPaused);
  EXPECT_EQ(store_->getSandbox("sb-1")->labels.size(), 2u);
  EXPECT_EQ(store_->updateSandbox(sandbox("sb-404", 3)).error().kind, ErrorKind::kNotFound);

  EXPECT_EQ(*store_->countSandboxesUsingTemplate("sha256:aa"), 1);
  ASSERT_TRUE(store_->deleteSandbox("sb-1"));
  EXPECT_EQ(store_->getSandbox("sb-1").error().kind, ErrorKind::kNotFound);
  EXPECT_EQ(store_->deleteSandbox("sb-1").error().kind, ErrorKind::kNotFound);
  EXPECT_EQ(*store_->countSandboxesUsingTemplate("sha256:aa"), 0);
}

TEST_F(StoreTest, ListFiltersByLabelsStateAndPool) {
  ASSERT_TRUE(store_->insertSandbox(sandbox("sb-1", 0, {{"team", "a"}, {"env", "dev"}})));
  ASSERT_TRUE(store_->insertSandbox(sandbox("sb-2", 1, {{"team", "a"}, {"env", "prod"}})));
  auto paused = sandbox("sb-3", 2, {{"team", "b"}, {"odd key \"'.$[", "v"}});
  paused.state = SandboxState::kPaused;
  ASSERT_TRUE(store_->insertSandbox(paused));
  auto pooled = sandbox("sb-4", 3, {{"team", "a"}});
  pooled.pooled = true;
  ASSERT_TRUE(store_->insertSandbox(pooled));

  auto ids = [&](SandboxFilter f) {
    std::vector<std::string> out;
    auto list = store_->listSandboxes(f);
    EXPECT_TRUE(list) << list.error().message;
    for (auto& s : *list) out.push_back(s.id);
    return out;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(ids({}), (V{"sb-1", "sb-2", "sb-3"}));
  EXPECT_EQ(ids({.include_pooled = true}), (V{"sb-1", "sb-2", "sb-3", "sb-4"}));
  EXPECT_EQ(ids({.labels = {{"team", "a"}}}), (V{"sb-1", "sb-2"}));
  EXPECT_EQ(ids({.labels = {{"team", "a"}, {"env", "prod"}}}), (V{"sb-2"}));
  EXPECT_EQ(ids({.labels = {{"team", "a"}, {"env", "none"}}}), V{});
  EXPECT_EQ(ids({.labels = {{"odd key \"'.$[", "v"}}}), (V{"sb-3"}));
  EXPECT_EQ(ids({.state = SandboxState::kPaused}), (V{"sb-3"}));
  EXPECT_EQ(ids({.labels = {{"team", "a"}}, .state = SandboxState::kRunning, .include_pooled = true}),
            (V{"sb-1", "sb-2", "sb-4"}));
}

TEST_F(StoreTest, UidSlotsAreUniqueAndReused) {
  EXPECT_EQ(*store_->freeUidSlot(), 0);
  ASSERT_TRUE(store_->insertSandbox(sandbox("sb-0", 0)));
  ASSERT_TRUE(store_->insertSandbox(sandbox("sb-1", 1)));
  ASSERT_TRUE(store_->insertSandbox(sandbox("sb-2", 2)));
  EXPECT_EQ(*store_->freeUidSlot(), 3);
  auto clash = store_->insertSandbox(sandbox("sb-x", 1));
  ASSERT_FALSE(clash);
  EXPECT_EQ(clash.error().kind, ErrorKind::kConflict);
  // Rows without a slot do not collide with each other.
  ASSERT_TRUE(store_->insertSandbox(sandbox("sb-n1", -1)));
  ASSERT_TRUE(store_->insertSandbox(sandbox("sb-n2", -1)));
  EXPECT_EQ(store_->getSandbox("sb-n1")->uid_slot, -1);

  ASSERT_TRUE(store_->deleteSandbox("sb-1"));
  EXPECT_EQ(*store_->freeUidSlot(), 1);
  ASSERT_TRUE(store_->deleteSandbox("sb-0"));
  EXPECT_EQ(*store_->freeUidSlot(), 0);
  auto slot = store_->insertSandboxWithFreeUidSlot(sandbox("sb-a", 77));
  ASSERT_TRUE(slot);
  EXPECT_EQ(*slot, 0);
  EXPECT_EQ(*store_->insertSandboxWithFreeUidSlot(sandbox("sb-b", 77)), 1);
  EXPECT_EQ(*store_->insertSandboxWithFreeUidSlot(sandbox("sb-c", 77)), 3);
}

TEST_F(StoreTest, ConcurrentSlotAllocationNeverCollides) {
  constexpr int kThreads = 4, kPerThread = 25;
  std::vector<std::thread> threads;
  std::mutex mu;
  std::set<int> slots;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        auto slot = store_->insertSandboxWithFreeUidSlot(sandbox(fmt::format("sb-{}-{}", t, i), -1));
        ASSERT_TRUE(slot) << slot.error().message;
        std::lock_guard lock(mu);
        EXPECT_TRUE(slots.insert(*slot).second);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(slots.size(), size_t{kThreads * kPerThread});
  EXPECT_EQ(*slots.rbegin(), kThreads * kPerThread - 1);
}

TEST_F(StoreTest, ApiKeysCreateVerifyRevoke) {
  auto created = store_->createApiKey("ci");
  ASSERT_TRUE(created) << created.error().message;
  auto& [key, secret] = *created;
  EXPECT_TRUE(secret.starts_with("space_"));
  EXPECT_EQ(secret.size(), 6u + 43u);  // 32 bytes, unpadded base64url
  EXPECT_EQ(secret.find_first_of("+/="), std::string::npos);
  EXPECT_TRUE(key.id.starts_with("key-"));
  EXPECT_TRUE(secret.starts_with(key.prefix));
  EXPECT_LT(key.prefix.size(), 16u);

  auto verified = store_->verifyApiKey(secret);
  ASSERT_TRUE(verified) << verified.error().message;
  EXPECT_EQ(verified->id, key.id);
  EXPECT_EQ(store_->verifyApiKey(secret + "x").error().kind, ErrorKind::kUnauthenticated);
  EXPECT_EQ(store_->verifyApiKey("").error().kind, ErrorKind::kUnauthenticated);

  // A second active key with the same name is refused; distinct names are fine.
  EXPECT_EQ(store_->createApiKey("ci").error().kind, ErrorKind::kConflict);
  auto other = store_->createApiKey("laptop");
  ASSERT_TRUE(other);
  EXPECT_NE(other->second, secret);
  EXPECT_EQ(store_->createApiKey("").error().kind, ErrorKind::kInvalidArgument);

  ASSERT_TRUE(store_->revokeApiKey("ci"));  // by name
  auto revoked = store_->verifyApiKey(secret);
  ASSERT_FALSE(revoked);
  EXPECT_EQ(revoked.error().kind, ErrorKind::kUnauthenticated);
  EXPECT_TRUE(store_->revokeApiKey(key.id));  // again, by id: still revoked, not an error
  EXPECT_EQ(store_->revokeApiKey("nope").error().kind, ErrorKind::kNotFound);
  ASSERT_TRUE(store_->revokeApiKey(other->first.id));  // by id
  EXPECT_FALSE(store_->verifyApiKey(other->second));

  // The name is free again once its key is revoked.
  auto again = store_->createApiKey("ci");
  ASSERT_TRUE(again);
  auto keys = store_->listApiKeys();
  ASSERT_TRUE(keys);
  ASSERT_EQ(keys->size(), 3u);
  // Keys made within one millisecond have no defined order: look them up by id.
  for (const auto& k : *keys) {
    if (k.id == again->first.id)
      EXPECT_EQ(k.revoked_ms, 0) << k.id;
    else
      EXPECT_GT(k.revoked_ms, 0) << k.id;
  }
}

TEST_F(StoreTest, PurgeDeletesOnlyKeysRevokedBeforeTheCutoff) {
  auto old_key = store_->createApiKey("old");
  auto recent = store_->createApiKey("recent");
  auto active = store_->createApiKey("active");
  ASSERT_TRUE(old_key && recent && active);
  ASSERT_TRUE(store_->revokeApiKey("old"));
  auto listed = store_->listApiKeys();
  ASSERT_TRUE(listed);
  int64_t old_revoked = 0;
  for (const auto& k : *listed)
    if (k.id == old_key->first.id) old_revoked = k.revoked_ms;
  ASSERT_GT(old_revoked, 0);
  auto none = store_->purgeRevokedApiKeys(old_revoked - 1);
  ASSERT_TRUE(none);
  EXPECT_EQ(*none, 0u);
  auto one = store_->purgeRevokedApiKeys(old_revoked);
  ASSERT_TRUE(one);
  EXPECT_EQ(*one, 1u);
  ASSERT_TRUE(store_->revokeApiKey("recent"));
  auto left = store_->listApiKeys();
  ASSERT_TRUE(left);
  ASSERT_EQ(left->size(), 2u);                          // recent (revoked after the cutoff) and active
  EXPECT_FALSE(store_->verifyApiKey(old_key->second));  // purged: unknown, still refused
  EXPECT_TRUE(store_->verifyApiKey(active->second));
  auto all = store_->purgeRevokedApiKeys(INT64_MAX);
  ASSERT_TRUE(all);
  EXPECT_EQ(*all, 1u);
  EXPECT_TRUE(store_->verifyApiKey(active->second));
}

TEST_F(StoreTest, SecretIsNotStoredInClear) {
  auto created = store_->createApiKey("ci");
  ASSERT_TRUE(created);
  store_.reset();
  std::string bytes;
  for (const char* suffix : {"", "-wal"}) {
    std::ifstream in(dir_ + "/space.db" + suffix, std::ios::binary);
    bytes += std::string(std::istreambuf_iterator<char>(in), {});
  }
  EXPECT_EQ(bytes.find(created->second), std::string::npos);
  EXPECT_EQ(bytes.find(created->second.substr(12)), std::string::npos);
}

TEST_F(StoreTest, WrittenRecordSurvivesReopen) {
  ASSERT_TRUE(store_->insertSandbox(sandbox("sb-1", 4, {{"k", "v"}})));
  ASSERT_TRUE(store_->putTemplate({"sha256:aa", "base", "/r", {{"kind", "tar"}}, 1, 0}));
  auto key = store_->createApiKey("ci");
  ASSERT_TRUE(key);
  reopen();
  auto s = store_->getSandbox("sb-1");
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_EQ(s->labels.at("k"), "v");
  EXPECT_EQ(s->uid_slot, 4);
  EXPECT_TRUE(store_->getTemplate("base"));
  EXPECT_TRUE(store_->verifyApiKey(key->second));
}

TEST_F(StoreTest, LifecycleFieldsSurviveReopen) {
  auto s = sandbox("sb-1", 0);
  s.state = SandboxState::kPaused;
  s.auto_paused = true;
  ASSERT_TRUE(store_->insertSandbox(s));
  auto fork = sandbox("sb-2", 1);
  fork.pending = {.op = PendingOp::kForking, .since_ms = 1234};
  ASSERT_TRUE(store_->insertSandbox(fork));
  auto rolling = sandbox("sb-3", 2);
  ASSERT_TRUE(store_->insertSandbox(rolling));
  rolling.pending = {PendingOp::kRollingBack, 99, "snap-1", {{"processes", "kill"}, {"signal", 9}}};
  ASSERT_TRUE(store_->updateSandbox(rolling));
  reopen();

  auto paused = store_->getSandbox("sb-1");
  ASSERT_TRUE(paused) << paused.error().message;
  EXPECT_EQ(paused->state, SandboxState::kPaused);
  EXPECT_TRUE(paused->auto_paused);
  EXPECT_EQ(paused->pending.op, PendingOp::kNone);
  auto forking = store_->getSandbox("sb-2");
  ASSERT_TRUE(forking);
  EXPECT_FALSE(forking->auto_paused);
  EXPECT_EQ(forking->pending.op, PendingOp::kForking);
  EXPECT_EQ(forking->pending.since_ms, 1234);
  auto back = store_->getSandbox("sb-3");
  ASSERT_TRUE(back);
  EXPECT_EQ(back->pending.op, PendingOp::kRollingBack);
  EXPECT_EQ(back->pending.since_ms, 99);
  EXPECT_EQ(back->pending.snapshot_id, "snap-1");
  EXPECT_EQ(back->pending.after_restore, (nlohmann::json{{"processes", "kill"}, {"signal", 9}}));

  back->pending = {};
  ASSERT_TRUE(store_->updateSandbox(*back));
  EXPECT_EQ(store_->getSandbox("sb-3")->pending.op, PendingOp::kNone);
  EXPECT_EQ(store_->getSandbox("sb-3")->pending.snapshot_id, "");
}

// A database as the release before migration 5 left it: the operation in flight and the idle-pause flag
// were keys of the spec. Opening it moves them into their columns and out of the spec.
TEST_F(StoreTest, MigrationFiveMovesSpecKeysIntoColumns) {
  std::string old_dir = dir_ + "/old";
  fs::create_directory(old_dir);
  {
    auto db = sql::Db::open(old_dir + "/space.db");
    ASSERT_TRUE(db) << db.error().message;
    ASSERT_TRUE(migrateTo(*db, 4));
    ASSERT_EQ(*schemaVersion(*db), 4);
    auto insert = db->prepare(
        "INSERT INTO sandboxes (id, template_name, template_id, state, runtime, spec, labels, uid_slot, created_ms, "
        "expires_ms, persisted, error, pooled) "
        "VALUES (?, 'base', 'sha256:aa', ?, 'jail', ?, '{}', ?, 1, 0, '{}', '', 0)");
    ASSERT_TRUE(insert);
    auto row = [&](const char* id, const char* state, const nlohmann::json& spec, int slot) {
      ASSERT_TRUE(insert->bindAll(id, state, spec.dump(), slot));
      ASSERT_TRUE(insert->run());
      ASSERT_TRUE(insert->reset());
    };
    row("sb-idle", "paused", {{"ttl_s", 60}, {"auto_paused", true}, {"idle_pause_s", 5}}, 0);
    row("sb-owner", "paused", {{"ttl_s", 60}}, 1);
    row("sb-rolling", "running",
        {{"ttl_s", 60}, {"rolling_back", "snap-7"}, {"rolling_back_after", {{"processes", "kill"}, {"signal", 9}}}}, 2);
    row("sb-forking", "running", {{"ttl_s", 60}, {"forking_since_ms", 1700000000123}}, 3);
    row("sb-old-rollback", "paused", {{"rolling_back", "snap-8"}}, 4);  // from before rolling_back_after existed
  }
  auto opened = Store::open(old_dir);
  ASSERT_TRUE(opened) << opened.error().message;
  auto& store = **opened;

  auto idle = store.getSandbox("sb-idle");
  ASSERT_TRUE(idle) << idle.error().message;
  EXPECT_EQ(idle->state, SandboxState::kPaused);
  EXPECT_TRUE(idle->auto_paused);
  EXPECT_EQ(idle->pending.op, PendingOp::kNone);
  EXPECT_EQ(idle->spec, (nlohmann::json{{"ttl_s", 60}, {"idle_pause_s", 5}}));

  auto owner = store.getSandbox("sb-owner");
  ASSERT_TRUE(owner);
  EXPECT_FALSE(owner->auto_paused);
  EXPECT_EQ(owner->pending.op, PendingOp::kNone);
  EXPECT_EQ(owner->spec, (nlohmann::json{{"ttl_s", 60}}));

  auto rolling = store.getSandbox("sb-rolling");
  ASSERT_TRUE(rolling);
  EXPECT_EQ(rolling->state, SandboxState::kRunning);
  EXPECT_EQ(rolling->pending.op, PendingOp::kRollingBack);
  EXPECT_EQ(rolling->pending.snapshot_id, "snap-7");
  EXPECT_EQ(rolling->pending.after_restore, (nlohmann::json{{"processes", "kill"}, {"signal", 9}}));
  EXPECT_EQ(rolling->pending.since_ms, 0);  // the old key had no time
  EXPECT_EQ(rolling->spec, (nlohmann::json{{"ttl_s", 60}}));

  auto forking = store.getSandbox("sb-forking");
  ASSERT_TRUE(forking);
  EXPECT_EQ(forking->pending.op, PendingOp::kForking);
  EXPECT_EQ(forking->pending.since_ms, 1700000000123);
  EXPECT_EQ(forking->pending.snapshot_id, "");
  EXPECT_EQ(forking->spec, (nlohmann::json{{"ttl_s", 60}}));

  auto old_rollback = store.getSandbox("sb-old-rollback");
  ASSERT_TRUE(old_rollback);
  EXPECT_EQ(old_rollback->pending.op, PendingOp::kRollingBack);
  EXPECT_EQ(old_rollback->pending.snapshot_id, "snap-8");
  EXPECT_EQ(old_rollback->pending.after_restore, nlohmann::json::object());
  EXPECT_EQ(old_rollback->spec, nlohmann::json::object());

  auto filtered = store.listSandboxes({.state = SandboxState::kPaused});
  ASSERT_TRUE(filtered);
  EXPECT_EQ(filtered->size(), 3u);
}

TEST_F(StoreTest, UnknownStateInARowIsAClearError) {
  ASSERT_TRUE(store_->insertSandbox(sandbox("sb-1", 0)));
  store_.reset();
  {
    auto db = sql::Db::open(dir_ + "/space.db");
    ASSERT_TRUE(db);
    ASSERT_TRUE(db->exec("UPDATE sandboxes SET state = 'hibernating' WHERE id = 'sb-1'"));
  }
  reopen();
  auto got = store_->getSandbox("sb-1");
  ASSERT_FALSE(got);
  EXPECT_EQ(got.error().kind, ErrorKind::kInternal);
  EXPECT_NE(got.error().message.find("sandbox sb-1 has an unknown state 'hibernating'"), std::string::npos)
      << got.error().message;
}

TEST_F(StoreTest, MigrateToRefusesAVersionThisBuildDoesNotKnow) {
  auto db = sql::Db::open(dir_ + "/other.db");
  ASSERT_TRUE(db);
  EXPECT_EQ(migrateTo(*db, latestSchemaVersion() + 1).error().kind, ErrorKind::kInvalidArgument);
}

// A process killed right after an acknowledged write: the row must be in the file (WAL) without any
// clean shutdown, checkpoint or destructor having run.
TEST_F(StoreTest, AcknowledgedWriteSurvivesKill) {
  store_.reset();
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    auto s = Store::open(dir_);
    if (!s || !(*s)->insertSandbox(sandbox("sb-killed", 9))) ::_exit(1);
    ::kill(::getpid(), SIGKILL);
    ::_exit(2);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status)) << "child failed before the kill, status " << status;
  reopen();
  auto s = store_->getSandbox("sb-killed");
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_EQ(s->uid_slot, 9);
}

TEST(SqliteTest, ErrorsNameTheStatement) {
  char tmpl[] = "/tmp/space-sqlite-test-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  std::string dir = tmpl;
  {
    auto db = sql::Db::open(dir + "/t.db");
    ASSERT_TRUE(db);
    auto bad = db->prepare("SELECT missing FROM nowhere WHERE 1");
    ASSERT_FALSE(bad);
    EXPECT_NE(bad.error().message.find("SELECT missing FROM"), std::string::npos) << bad.error().message;
    EXPECT_NE(bad.error().message.find("no such table"), std::string::npos) << bad.error().message;

    ASSERT_TRUE(db->exec("CREATE TABLE t (x INTEGER PRIMARY KEY)"));
    {
      auto tx = sql::Transaction::begin(*db);
      ASSERT_TRUE(tx);
      ASSERT_TRUE(db->exec("INSERT INTO t VALUES (1)"));
      // no commit: rolled back
    }
    auto count = db->prepare("SELECT COUNT(*) FROM t");
    ASSERT_TRUE(count);
    ASSERT_TRUE(*count->step());
    EXPECT_EQ(count->columnInt(0), 0);

    auto tx = sql::Transaction::begin(*db);
    ASSERT_TRUE(tx);
    auto ins = db->prepare("INSERT INTO t VALUES (?)");
    ASSERT_TRUE(ins);
    ASSERT_TRUE(ins->bindAll(int64_t{1}));
    ASSERT_TRUE(ins->run());
    ASSERT_TRUE(ins->reset());
    ASSERT_TRUE(ins->bindAll(int64_t{1}));
    auto dup = ins->run();
    ASSERT_FALSE(dup);
    EXPECT_EQ(dup.error().kind, ErrorKind::kConflict);
    EXPECT_NE(dup.error().message.find("INSERT INTO t"), std::string::npos) << dup.error().message;
    ASSERT_TRUE(tx->commit());
  }
  EXPECT_EQ(sql::statementHead("  SELECT   a,\n b FROM t"), "SELECT a, b");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace space::store
