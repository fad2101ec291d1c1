// SqliteStore: the Store of a single node, one SQLite file in the state directory. Each public method
// holds the connection lock for its whole statement sequence, so calls from many threads never interleave.
#include "store/store.h"

#include <sys/stat.h>

#include <chrono>
#include <filesystem>

#include "store/api_key_secret.h"
#include "store/schema.h"
#include "store/sqlite.h"

namespace space::store {
namespace {

constexpr const char* kDatabaseFile = "space.db";

int64_t nowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// JSON written by SPACE may still contain strings that are not valid UTF-8 (labels, env from a client);
// replacing bad bytes beats throwing half-way through a write.
std::string dumpJson(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

Result<nlohmann::json> parseJson(const std::string& text, std::string_view what) {
  auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return makeError(ErrorKind::kInternal, "corrupt JSON in {}", what);
  return j;
}

Result<std::map<std::string, std::string>> parseLabels(const std::string& text) {
  ASSIGN_OR_RETURN(auto j, parseJson(text, "sandbox labels"));
  std::map<std::string, std::string> labels;
  if (!j.is_object()) return makeError(ErrorKind::kInternal, "sandbox labels are not a JSON object");
  for (auto& [k, v] : j.items()) {
    if (!v.is_string()) return makeError(ErrorKind::kInternal, "sandbox label {} is not a string", k);
    labels[k] = v.get<std::string>();
  }
  return labels;
}

constexpr const char* kTemplateColumns = "name, id, rootfs, source, size_bytes, created_ms";

Result<TemplateRecord> readTemplate(const sql::Statement& row) {
  TemplateRecord t;
  t.name = row.columnText(0);
  t.id = row.columnText(1);
  t.rootfs = row.columnText(2);
  ASSIGN_OR_RETURN(t.source, parseJson(row.columnText(3), "template source"));
  t.size_bytes = static_cast<uint64_t>(row.columnInt(4));
  t.created_ms = row.columnInt(5);
  return t;
}

constexpr const char* kSandboxColumns =
    "id, template_name, template_id, state, runtime, spec, labels, uid_slot, created_ms, expires_ms, persisted, "
    "error, pooled, auto_paused, pending_op, pending_since_ms, pending_snapshot, pending_after_restore";

Result<SandboxRecord> readSandbox(const sql::Statement& row) {
  SandboxRecord s;
  s.id = row.columnText(0);
  s.template_name = row.columnText(1);
  s.template_id = row.columnText(2);
  std::string state = row.columnText(3);
  auto parsed_state = parseSandboxState(state);
  if (!parsed_state) return makeError(ErrorKind::kInternal, "sandbox {} has an unknown state '{}'", s.id, state);
  s.state = *parsed_state;
  s.runtime = row.columnText(4);
  ASSIGN_OR_RETURN(s.spec, parseJson(row.columnText(5), "sandbox spec"));
  ASSIGN_OR_RETURN(s.labels, parseLabels(row.columnText(6)));
  s.uid_slot = row.columnIsNull(7) ? -1 : static_cast<int>(row.columnInt(7));
  s.created_ms = row.columnInt(8);
  s.expires_ms = row.columnInt(9);
  ASSIGN_OR_RETURN(s.persisted, parseJson(row.columnText(10), "sandbox persisted state"));
  s.error = row.columnText(11);
  s.pooled = row.columnInt(12) != 0;
  s.auto_paused = row.columnInt(13) != 0;
  std::string op = row.columnText(14);
  auto parsed_op = parsePendingOp(op);
  if (!parsed_op) return makeError(ErrorKind::kInternal, "sandbox {} has an unknown pending operation '{}'", s.id, op);
  s.pending.op = *parsed_op;
  s.pending.since_ms = row.columnInt(15);
  s.pending.snapshot_id = row.columnText(16);
  ASSIGN_OR_RETURN(s.pending.after_restore, parseJson(row.columnText(17), "sandbox pending operation"));
  return s;
}

// Binds the sandbox columns after id, in kSandboxColumns order, starting at parameter `first`.
Status bindSandboxFields(sql::Statement& stmt, int first, const SandboxRecord& s) {
  std::optional<int64_t> slot;
  if (s.uid_slot >= 0) slot = s.uid_slot;  // negative = no slot; NULLs do not collide under UNIQUE
  nlohmann::json labels = nlohmann::json::object();
  for (const auto& [k, v] : s.labels) labels[k] = v;
  int i = first;
  TRY(stmt.bind(i++, s.template_name));
  TRY(stmt.bind(i++, s.template_id));
  TRY(stmt.bind(i++, toString(s.state)));
  TRY(stmt.bind(i++, s.runtime));
  TRY(stmt.bind(i++, dumpJson(s.spec)));
  TRY(stmt.bind(i++, dumpJson(labels)));
  TRY(stmt.bind(i++, slot));
  TRY(stmt.bind(i++, s.created_ms ? s.created_ms : nowMs()));
  TRY(stmt.bind(i++, s.expires_ms));
  TRY(stmt.bind(i++, dumpJson(s.persisted)));
  TRY(stmt.bind(i++, s.error));
  TRY(stmt.bind(i++, s.pooled));
  TRY(stmt.bind(i++, s.auto_paused));
  TRY(stmt.bind(i++, toString(s.pending.op)));
  TRY(stmt.bind(i++, s.pending.since_ms));
  TRY(stmt.bind(i++, s.pending.snapshot_id));
  TRY(stmt.bind(i++, dumpJson(s.pending.after_restore)));
  return ok();
}

constexpr const char* kApiKeyColumns = "id, name, prefix, created_ms, revoked_ms";

ApiKeyRecord readApiKey(const sql::Statement& row) {
  ApiKeyRecord k;
  k.id = row.columnText(0);
  k.name = row.columnText(1);
  k.prefix = row.columnText(2);
  k.created_ms = row.columnInt(3);
  k.revoked_ms = row.columnInt(4);
  return k;
}

// Adds context naming the operation and, for a few kinds, a clearer message than SQLite's.
template <class T>
Result<T> withContext(Result<T> r, std::string_view what) {
  if (!r) r.error().context(what);
  return r;
}

class SqliteStore final : public Store {
 public:
  explicit SqliteStore(sql::Db db) : db_(std::move(db)) {}

  // ---- templates

  Status putTemplate(const TemplateRecord& t) override {
    auto lock = db_.lock();
    auto r = [&]() -> Status {
      ASSIGN_OR_RETURN(auto stmt,
                       db_.prepare(fmt::format("INSERT OR REPLACE INTO templates ({}) VALUES (?, ?, ?, ?, ?, ?)",
                                               kTemplateColumns)));
      TRY(stmt.bindAll(t.name, t.id, t.rootfs, dumpJson(t.source), static_cast<int64_t>(t.size_bytes),
                       t.created_ms ? t.created_ms : nowMs()));
      return stmt.run();
    }();
    return withContext(std::move(r), fmt::format("put template {}", t.name));
  }

  Result<TemplateRecord> getTemplate(const std::string& name) override {
    auto lock = db_.lock();
    auto r = [&]() -> Result<TemplateRecord> {
      ASSIGN_OR_RETURN(auto stmt,
                       db_.prepare(fmt::format("SELECT {} FROM templates WHERE name = ?", kTemplateColumns)));
      TRY(stmt.bind(1, name));
      ASSIGN_OR_RETURN(bool row, stmt.step());
      if (!row) return notFoundError("template", "no template named {}", name);
      return readTemplate(stmt);
    }();
    return withContext(std::move(r), "get template");
  }

  Result<std::vector<TemplateRecord>> listTemplates() override {
    auto lock = db_.lock();
    auto r = [&]() -> Result<std::vector<TemplateRecord>> {
      ASSIGN_OR_RETURN(auto stmt, db_.prepare(fmt::format("SELECT {} FROM templates ORDER BY name", kTemplateColumns)));
      std::vector<TemplateRecord> out;
      for (;;) {
        ASSIGN_OR_RETURN(bool row, stmt.step());
        if (!row) return out;
        ASSIGN_OR_RETURN(auto t, readTemplate(stmt));
        out.push_back(std::move(t));
      }
    }();
    return withContext(std::move(r), "list templates");
  }

  Status deleteTemplate(const std::string& name) override {
    auto lock = db_.lock();
    auto r = [&]() -> Status {
      ASSIGN_OR_RETURN(auto stmt, db_.prepare("DELETE FROM templates WHERE name = ?"));
      TRY(stmt.bind(1, name));
      TRY(stmt.run());
      if (db_.changes() == 0) return notFoundError("template", "no template named {}", name);
      return ok();
    }();
    return withContext(std::move(r), "delete template");
  }

  Result<int> countSandboxesUsingTemplate(const std::string& template_id) override {
    auto lock = db_.lock();
    return withContext(countWhere("sandboxes", "template_id", template_id), "count sandboxes using template");
  }

  Result<int> countTemplatesWithId(const std::string& template_id) override {
    auto lock = db_.lock();
    return withContext(countWhere("templates", "id", template_id), "count templates sharing a tree");
  }

  // ---- sandboxes

  Status insertSandbox(const SandboxRecord& s) override {
    auto lock = db_.lock();
    return withContext(insertSandboxLocked(s), fmt::format("insert sandbox {}", s.id));
  }

  Result<int> insertSandboxWithFreeUidSlot(const SandboxRecord& s) override {
    auto lock = db_.lock();
    // Under one lock, finding the slot and taking it cannot race with another insert in this process.
    auto r = [&]() -> Result<int> {
      ASSIGN_OR_RETURN(int slot, freeUidSlotLocked());
      SandboxRecord with_slot = s;
      with_slot.uid_slot = slot;
      TRY(insertSandboxLocked(with_slot));
      return slot;
    }();
    return withContext(std::move(r), fmt::format("insert sandbox {}", s.id));
  }

  Status updateSandbox(const SandboxRecord& s) override {
    auto lock = db_.lock();
    auto r = [&]() -> Status {
      ASSIGN_OR_RETURN(
          auto stmt, db_.prepare("UPDATE sandboxes SET template_name = ?, template_id = ?, state = ?, runtime = ?, "
                                 "spec = ?, labels = ?, uid_slot = ?, created_ms = ?, expires_ms = ?, "
                                 "persisted = ?, error = ?, pooled = ?, auto_paused = ?, pending_op = ?, "
                                 "pending_since_ms = ?, pending_snapshot = ?, pending_after_restore = ? WHERE id = ?"));
      TRY(bindSandboxFields(stmt, 1, s));
      TRY(stmt.bind(18, s.id));
      TRY(stmt.run());
      if (db_.changes() == 0) return notFoundError("sandbox", "no sandbox {}", s.id);
      return ok();
    }();
    return withContext(std::move(r), fmt::format("update sandbox {}", s.id));
  }

  Result<SandboxRecord> getSandbox(const std::string& id) override {
    auto lock = db_.lock();
    auto r = [&]() -> Result<SandboxRecord> {
      ASSIGN_OR_RETURN(auto stmt, db_.prepare(fmt::format("SELECT {} FROM sandboxes WHERE id = ?", kSandboxColumns)));
      TRY(stmt.bind(1, id));
      ASSIGN_OR_RETURN(bool row, stmt.step());
      if (!row) return notFoundError("sandbox", "no sandbox {}", id);
      return readSandbox(stmt);
    }();
    return withContext(std::move(r), "get sandbox");
  }

  Result<std::vector<SandboxRecord>> listSandboxes(const SandboxFilter& filter) override {
    auto lock = db_.lock();
    auto r = [&]() -> Result<std::vector<SandboxRecord>> {
      std::string query = fmt::format("SELECT {} FROM sandboxes WHERE 1", kSandboxColumns);
      if (filter.state) query += " AND state = ?";
      if (!filter.include_pooled) query += " AND pooled = 0";
      // json_each matches keys exactly, whatever characters they contain (no JSON-path quoting to get wrong).
      for (size_t i = 0; i < filter.labels.size(); ++i) {
        query += " AND EXISTS (SELECT 1 FROM json_each(sandboxes.labels) AS l WHERE l.key = ? AND l.value = ?)";
      }
      query += " ORDER BY created_ms, id";
      ASSIGN_OR_RETURN(auto stmt, db_.prepare(query));
      int i = 1;
      if (filter.state) TRY(stmt.bind(i++, toString(*filter.state)));
      for (const auto& [k, v] : filter.labels) {
        TRY(stmt.bind(i++, k));
        TRY(stmt.bind(i++, v));
      }
      std::vector<SandboxRecord> out;
      for (;;) {
        ASSIGN_OR_RETURN(bool row, stmt.step());
        if (!row) return out;
        ASSIGN_OR_RETURN(auto s, readSandbox(stmt));
        out.push_back(std::move(s));
      }
    }();
    return withContext(std::move(r), "list sandboxes");
  }

  Status deleteSandbox(const std::string& id) override {
    auto lock = db_.lock();
    auto r = [&]() -> Status {
      ASSIGN_OR_RETURN(auto stmt, db_.prepare("DELETE FROM sandboxes WHERE id = ?"));
      TRY(stmt.bind(1, id));
      TRY(stmt.run());
      if (db_.changes() == 0) return notFoundError("sandbox", "no sandbox {}", id);
      return ok();
    }();
    return withContext(std::move(r), "delete sandbox");
  }

  Result<int> freeUidSlot() override {
    auto lock = db_.lock();
    return withContext(freeUidSlotLocked(), "find a free uid slot");
  }

  // ---- API keys

  Result<std::pair<ApiKeyRecord, std::string>> createApiKey(const std::string& name) override {
    if (name.empty() || name.size() > 128) {
      return makeError(ErrorKind::kInvalidArgument, "API key name must be 1 to 128 characters");
    }
    ASSIGN_OR_RETURN(std::string secret, generateApiKeySecret());
    ASSIGN_OR_RETURN(std::string id_suffix, randomHex(8));
    ApiKeyRecord key{"key-" + id_suffix, name, apiKeyPrefix(secret), nowMs(), 0};
    auto lock = db_.lock();
    auto r = [&]() -> Status {
      ASSIGN_OR_RETURN(auto stmt, db_.prepare("INSERT INTO api_keys (id, name, prefix, secret_hash, created_ms, "
                                              "revoked_ms) VALUES (?, ?, ?, ?, ?, 0)"));
      TRY(stmt.bindAll(key.id, key.name, key.prefix, sha256Hex(secret), key.created_ms));
      auto ran = stmt.run();
      if (!ran && ran.error().kind == ErrorKind::kConflict) {
        return makeError(ErrorKind::kConflict, "an active API key named {} exists", name);
      }
      return ran;
    }();
    TRY(withContext(std::move(r), "create API key"));
    return std::pair{key, secret};
  }

  Result<std::vector<ApiKeyRecord>> listApiKeys() override {
    auto lock = db_.lock();
    auto r = [&]() -> Result<std::vector<ApiKeyRecord>> {
      ASSIGN_OR_RETURN(auto stmt,
                       db_.prepare(fmt::format("SELECT {} FROM api_keys ORDER BY created_ms, id", kApiKeyColumns)));
      std::vector<ApiKeyRecord> out;
      for (;;) {
        ASSIGN_OR_RETURN(bool row, stmt.step());
        if (!row) return out;
        out.push_back(readApiKey(stmt));
      }
    }();
    return withContext(std::move(r), "list API keys");
  }

  Status revokeApiKey(const std::string& id_or_name) override {
    auto lock = db_.lock();
    auto r = [&]() -> Status {
      ASSIGN_OR_RETURN(auto stmt, db_.prepare("UPDATE api_keys SET revoked_ms = ? WHERE revoked_ms = 0 AND "
                                              "(id = ? OR name = ?)"));
      TRY(stmt.bindAll(nowMs(), id_or_name, id_or_name));
      TRY(stmt.run());
      if (db_.changes() > 0) return ok();
      // Revoking an already revoked key succeeds: the caller's intent holds.
      ASSIGN_OR_RETURN(int known, countWhere("api_keys", "id", id_or_name));
      ASSIGN_OR_RETURN(int named, countWhere("api_keys", "name", id_or_name));
      if (known + named > 0) return ok();
      return notFoundError("key", "no API key with id or name {}", id_or_name);
    }();
    return withContext(std::move(r), "revoke API key");
  }

  Result<size_t> purgeRevokedApiKeys(int64_t revoked_before_ms) override {
    auto lock = db_.lock();
    auto r = [&]() -> Result<size_t> {
      ASSIGN_OR_RETURN(auto stmt, db_.prepare("DELETE FROM api_keys WHERE revoked_ms != 0 AND revoked_ms <= ?"));
      TRY(stmt.bindAll(revoked_before_ms));
      TRY(stmt.run());
      return static_cast<size_t>(db_.changes());
    }();
    return withContext(std::move(r), "purge revoked API keys");
  }

  Result<ApiKeyRecord> verifyApiKey(const std::string& secret) override {
    // Looked up by digest, so the comparison never touches the secret byte by byte.
    std::string digest = sha256Hex(secret);
    auto lock = db_.lock();
    ASSIGN_OR_RETURN(auto stmt,
                     db_.prepare(fmt::format("SELECT {} FROM api_keys WHERE secret_hash = ?", kApiKeyColumns)));
    TRY(stmt.bind(1, digest));
    ASSIGN_OR_RETURN(bool row, stmt.step());
    if (!row) return makeError(ErrorKind::kUnauthenticated, "unknown API key");
    ApiKeyRecord key = readApiKey(stmt);
    if (key.revoked_ms != 0) return makeError(ErrorKind::kUnauthenticated, "API key {} is revoked", key.id);
    return key;
  }

  Status putSecret(const SecretRecord& r) override {
    auto lock = db_.lock();
    ASSIGN_OR_RETURN(auto stmt,
                     db_.prepare("INSERT OR REPLACE INTO secrets (name, hosts, header, format, sealed_value, "
                                 "created_ms, methods, path_prefixes) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"));
    TRY(stmt.bindAll(r.name, dumpJson(r.hosts), r.header, r.format, r.sealed_value,
                     r.created_ms ? r.created_ms : nowMs(), dumpJson(r.methods), dumpJson(r.path_prefixes)));
    return stmt.run();
  }

  Result<SecretRecord> getSecret(const std::string& name) override {
    ASSIGN_OR_RETURN(auto all, selectSecrets("WHERE name = ?", name));
    if (all.empty()) return notFoundError("secret", "secret {} not found", name);
    return all.front();
  }

  Result<std::vector<SecretRecord>> listSecrets() override { return selectSecrets("", ""); }

  Status deleteSecret(const std::string& name) override {
    auto lock = db_.lock();
    ASSIGN_OR_RETURN(auto stmt, db_.prepare("DELETE FROM secrets WHERE name = ?"));
    TRY(stmt.bind(1, name));
    TRY(stmt.run());
    if (db_.changes() == 0) return notFoundError("secret", "secret {} not found", name);
    return ok();
  }

  Status insertSnapshot(const SnapshotRecord& r) override {
    auto lock = db_.lock();
    if (!r.name.empty()) {
      ASSIGN_OR_RETURN(auto q, db_.prepare("SELECT COUNT(*) FROM snapshots WHERE sandbox_id = ? AND name = ?"));
      TRY(q.bindAll(r.sandbox_id, r.name));
      TRY(q.step());
      if (q.columnInt(0) > 0)
        return makeError(ErrorKind::kConflict, "sandbox {} has a snapshot named '{}' already", r.sandbox_id, r.name);
    }
    ASSIGN_OR_RETURN(auto stmt,
                     db_.prepare("INSERT INTO snapshots (id, sandbox_id, name, runtime, kind, path, size_bytes, "
                                 "origin, created_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"));
    TRY(stmt.bindAll(r.id, r.sandbox_id, r.name, r.runtime, r.kind, r.path, static_cast<int64_t>(r.size_bytes),
                     r.origin, r.created_ms ? r.created_ms : nowMs()));
    return stmt.run();
  }

  Result<SnapshotRecord> getSnapshot(const std::string& id) override {
    ASSIGN_OR_RETURN(auto all, selectSnapshots("WHERE id = ?", id));
    if (all.empty()) return notFoundError("snapshot", "snapshot {} not found", id);
    return all.front();
  }

  Result<std::vector<SnapshotRecord>> listSnapshots(const std::string& sandbox_id) override {
    return sandbox_id.empty() ? selectSnapshots("", "") : selectSnapshots("WHERE sandbox_id = ?", sandbox_id);
  }

  Status deleteSnapshot(const std::string& id) override {
    auto lock = db_.lock();
    ASSIGN_OR_RETURN(auto stmt, db_.prepare("DELETE FROM snapshots WHERE id = ?"));
    TRY(stmt.bind(1, id));
    TRY(stmt.run());
    if (db_.changes() == 0) return notFoundError("snapshot", "snapshot {} not found", id);
    return ok();
  }

 private:
  Result<std::vector<SnapshotRecord>> selectSnapshots(const std::string& where, const std::string& arg) {
    auto lock = db_.lock();
    ASSIGN_OR_RETURN(auto stmt, db_.prepare("SELECT id, sandbox_id, name, runtime, kind, path, size_bytes, origin, "
                                            "created_ms FROM snapshots " +
                                            where + " ORDER BY created_ms, rowid"));
    if (!where.empty()) TRY(stmt.bind(1, arg));
    std::vector<SnapshotRecord> out;
    for (;;) {
      ASSIGN_OR_RETURN(bool row, stmt.step());
      if (!row) break;
      SnapshotRecord r;
      r.id = stmt.columnText(0);
      r.sandbox_id = stmt.columnText(1);
      r.name = stmt.columnText(2);
      r.runtime = stmt.columnText(3);
      r.kind = stmt.columnText(4);
      r.path = stmt.columnText(5);
      r.size_bytes = static_cast<uint64_t>(stmt.columnInt(6));
      r.origin = stmt.columnText(7);
      r.created_ms = stmt.columnInt(8);
      out.push_back(std::move(r));
    }
    return out;
  }

  Result<std::vector<SecretRecord>> selectSecrets(const std::string& where, const std::string& arg) {
    auto lock = db_.lock();
    ASSIGN_OR_RETURN(auto stmt, db_.prepare("SELECT name, hosts, header, format, sealed_value, created_ms, methods, "
                                            "path_prefixes FROM secrets " +
                                            where + " ORDER BY name"));
    if (!where.empty()) TRY(stmt.bind(1, arg));
    std::vector<SecretRecord> out;
    for (;;) {
      ASSIGN_OR_RETURN(bool row, stmt.step());
      if (!row) break;
      SecretRecord r;
      r.name = stmt.columnText(0);
      ASSIGN_OR_RETURN(auto hosts, parseJson(stmt.columnText(1), "secret hosts"));
      for (const auto& h : hosts) r.hosts.push_back(h.get<std::string>());
      r.header = stmt.columnText(2);
      r.format = stmt.columnText(3);
      r.sealed_value = stmt.columnText(4);
      r.created_ms = stmt.columnInt(5);
      ASSIGN_OR_RETURN(auto methods, parseJson(stmt.columnText(6), "secret methods"));
      for (const auto& m : methods) r.methods.push_back(m.get<std::string>());
      ASSIGN_OR_RETURN(auto prefixes, parseJson(stmt.columnText(7), "secret path prefixes"));
      for (const auto& p : prefixes) r.path_prefixes.push_back(p.get<std::string>());
      out.push_back(std::move(r));
    }
    return out;
  }

  Result<int> countWhere(std::string_view table, std::string_view column, const std::string& value) {
    ASSIGN_OR_RETURN(auto stmt, db_.prepare(fmt::format("SELECT COUNT(*) FROM {} WHERE {} = ?", table, column)));
    TRY(stmt.bind(1, value));
    TRY(stmt.step());
    return static_cast<int>(stmt.columnInt(0));
  }

  Status insertSandboxLocked(const SandboxRecord& s) {
    ASSIGN_OR_RETURN(auto stmt, db_.prepare(fmt::format("INSERT INTO sandboxes ({}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, "
                                                        "?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                                                        kSandboxColumns)));
    TRY(stmt.bind(1, s.id));
    TRY(bindSandboxFields(stmt, 2, s));
    return stmt.run();
  }

  Result<int> freeUidSlotLocked() {
    // The lowest n >= 0 with no row holding it: 0 if free, else the smallest held slot whose successor is free.
    ASSIGN_OR_RETURN(auto stmt, db_.prepare(R"sql(
      SELECT CASE WHEN NOT EXISTS (SELECT 1 FROM sandboxes WHERE uid_slot = 0) THEN 0
             ELSE (SELECT MIN(a.uid_slot) + 1 FROM sandboxes a WHERE a.uid_slot >= 0 AND NOT EXISTS
                     (SELECT 1 FROM sandboxes b WHERE b.uid_slot = a.uid_slot + 1)) END)sql"));
    TRY(stmt.step());
    return static_cast<int>(stmt.columnInt(0));
  }

  sql::Db db_;
};

}  // namespace

Result<int> Store::insertSandboxWithFreeUidSlot(const SandboxRecord& s) {
  // Generic fallback for stores without a single lock: retry when another writer took the slot first.
  constexpr int kAttempts = 16;
  for (int attempt = 0;; ++attempt) {
    ASSIGN_OR_RETURN(int slot, freeUidSlot());
    SandboxRecord with_slot = s;
    with_slot.uid_slot = slot;
    auto inserted = insertSandbox(with_slot);
    if (inserted) return slot;
    if (inserted.error().kind != ErrorKind::kConflict || attempt + 1 == kAttempts) {
      return tl::unexpected(inserted.error());
    }
  }
}

Status Store::putSecret(const SecretRecord&) {
  return makeError(ErrorKind::kUnsupported, "this store keeps no secrets");
}
Result<SecretRecord> Store::getSecret(const std::string& name) {
  return notFoundError("secret", "secret {} not found", name);
}
Result<std::vector<SecretRecord>> Store::listSecrets() { return std::vector<SecretRecord>{}; }
Status Store::deleteSecret(const std::string& name) { return notFoundError("secret", "secret {} not found", name); }

Status Store::insertSnapshot(const SnapshotRecord&) {
  return makeError(ErrorKind::kUnsupported, "this store keeps no snapshots");
}
Result<SnapshotRecord> Store::getSnapshot(const std::string& id) {
  return notFoundError("snapshot", "snapshot {} not found", id);
}
Result<std::vector<SnapshotRecord>> Store::listSnapshots(const std::string&) { return std::vector<SnapshotRecord>{}; }
Status Store::deleteSnapshot(const std::string& id) { return notFoundError("snapshot", "snapshot {} not found", id); }

Result<int> Store::countTemplatesWithId(const std::string& template_id) {
  ASSIGN_OR_RETURN(auto all, listTemplates());
  int n = 0;
  for (const auto& t : all) n += t.id == template_id;
  return n;
}

Result<std::unique_ptr<Store>> Store::open(const std::string& state_dir) {
  std::error_code ec;
  std::filesystem::create_directories(state_dir, ec);
  if (ec) return sysError(ec.value(), "create state directory {}", state_dir);
  // The database holds key digests and (later) wrapped secrets: nobody but spaced reads it.
  std::string path = (std::filesystem::path(state_dir) / kDatabaseFile).string();
  ASSIGN_OR_RETURN(auto db, sql::Db::open(path));
  if (::chmod(path.c_str(), 0600) != 0) return sysError(errno, "chmod 0600 {}", path);
  auto migrated = migrate(db);
  if (!migrated) return tl::unexpected(migrated.error().context(fmt::format("open store {}", path)));
  return std::unique_ptr<Store>(new SqliteStore(std::move(db)));
}

}  // namespace space::store
