#include "store/schema.h"

#include <array>
#include <chrono>
#include <string_view>

namespace space::store {
namespace {

// Append only: a released migration never changes, because databases in the field have already run it.
constexpr std::array<std::string_view, 5> kMigrations = {
    // 1: templates, sandboxes, API keys.
    R"sql(
CREATE TABLE templates (
  name        TEXT PRIMARY KEY,
  id          TEXT NOT NULL,            -- content hash; several names may share one tree
  rootfs      TEXT NOT NULL,
  source      TEXT NOT NULL,            -- JSON
  size_bytes  INTEGER NOT NULL,
  created_ms  INTEGER NOT NULL
);
CREATE INDEX templates_by_id ON templates(id);

CREATE TABLE sandboxes (
  id             TEXT PRIMARY KEY,
  template_name  TEXT NOT NULL,
  template_id    TEXT NOT NULL,
  state          TEXT NOT NULL,
  runtime        TEXT NOT NULL,
  spec           TEXT NOT NULL,         -- JSON
  labels         TEXT NOT NULL,         -- JSON object of strings
  uid_slot       INTEGER UNIQUE,        -- NULL = no slot; two sandboxes never share a uid range
  created_ms     INTEGER NOT NULL,
  expires_ms     INTEGER NOT NULL,
  persisted      TEXT NOT NULL,         -- JSON
  error          TEXT NOT NULL,
  pooled         INTEGER NOT NULL
);
CREATE INDEX sandboxes_by_template ON sandboxes(template_id);
CREATE INDEX sandboxes_by_state ON sandboxes(state);

CREATE TABLE api_keys (
  id           TEXT PRIMARY KEY,
  name         TEXT NOT NULL,
  prefix       TEXT NOT NULL,
  secret_hash  TEXT NOT NULL UNIQUE,    -- SHA-256 hex of the secret; the secret itself is never stored
  created_ms   INTEGER NOT NULL,
  revoked_ms   INTEGER NOT NULL
);
-- A name identifies one active key; revoked keys keep their name for the audit trail.
CREATE UNIQUE INDEX api_keys_active_name ON api_keys(name) WHERE revoked_ms = 0;
)sql",
    // 2: secrets injected by the egress gateway; the value only sealed (store/secret_box.h).
    R"sql(
CREATE TABLE secrets (
  name          TEXT PRIMARY KEY,
  hosts         TEXT NOT NULL,          -- JSON array of names or "*.suffix"
  header        TEXT NOT NULL,
  format        TEXT NOT NULL,          -- "" = replace the placeholder inside the header
  sealed_value  TEXT NOT NULL,          -- hex(nonce || AES-256-GCM ciphertext || tag), AAD = name
  created_ms    INTEGER NOT NULL
);
)sql",
    // 3: snapshots of sandboxes (docs/snapshots.md). A row exists only for a snapshot whose files are
    // complete and synced.
    R"sql(
CREATE TABLE snapshots (
  id          TEXT PRIMARY KEY,
  sandbox_id  TEXT NOT NULL,
  name        TEXT NOT NULL,          -- "" = none; unique per sandbox otherwise
  runtime     TEXT NOT NULL,          -- "jail" | "vm"
  kind        TEXT NOT NULL,          -- "filesystem" | "full"
  path        TEXT NOT NULL,
  size_bytes  INTEGER NOT NULL,
  origin      TEXT NOT NULL,          -- "manual" | "auto" | "fork"
  created_ms  INTEGER NOT NULL
);
CREATE INDEX snapshots_by_sandbox ON snapshots(sandbox_id, created_ms);
)sql",
    // 4: a secret may be restricted to some methods and path prefixes of its hosts (docs/egress.md).
    R"sql(
ALTER TABLE secrets ADD COLUMN methods TEXT NOT NULL DEFAULT '[]';        -- JSON array; [] = any
ALTER TABLE secrets ADD COLUMN path_prefixes TEXT NOT NULL DEFAULT '[]';  -- JSON array; [] = any
)sql",
    // 5: the operation in flight on a sandbox, and its idle-pause flag, in columns of their own
    // (store/sandbox_state.h) instead of keys of the spec. A row holds at most one of the two operations
    // (both run under the manager's snapshot lock and clear their mark before releasing it).
    R"sql(
ALTER TABLE sandboxes ADD COLUMN auto_paused INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sandboxes ADD COLUMN pending_op TEXT NOT NULL DEFAULT '';               -- '' | 'rolling_back' | 'forking'
ALTER TABLE sandboxes ADD COLUMN pending_since_ms INTEGER NOT NULL DEFAULT 0;       -- 0: unknown
ALTER TABLE sandboxes ADD COLUMN pending_snapshot TEXT NOT NULL DEFAULT '';         -- rolling_back: its snapshot
ALTER TABLE sandboxes ADD COLUMN pending_after_restore TEXT NOT NULL DEFAULT '{}';  -- rolling_back: JSON
UPDATE sandboxes SET auto_paused = 1 WHERE json_extract(spec, '$.auto_paused') = 1;
UPDATE sandboxes SET pending_op = 'forking', pending_since_ms = json_extract(spec, '$.forking_since_ms')
  WHERE json_type(spec, '$.forking_since_ms') = 'integer';
UPDATE sandboxes SET pending_op = 'rolling_back', pending_since_ms = 0,
                     pending_snapshot = json_extract(spec, '$.rolling_back'),
                     pending_after_restore = COALESCE(json_extract(spec, '$.rolling_back_after'), '{}')
  WHERE json_type(spec, '$.rolling_back') = 'text';
UPDATE sandboxes SET spec = json_remove(spec, '$.auto_paused', '$.forking_since_ms', '$.rolling_back',
                                        '$.rolling_back_after')
  WHERE json_type(spec, '$.auto_paused') IS NOT NULL OR json_type(spec, '$.forking_since_ms') IS NOT NULL
     OR json_type(spec, '$.rolling_back') IS NOT NULL OR json_type(spec, '$.rolling_back_after') IS NOT NULL;
)sql",
};

int64_t nowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

int latestSchemaVersion() { return static_cast<int>(kMigrations.size()); }

Result<int> schemaVersion(sql::Db& db) {
  ASSIGN_OR_RETURN(auto stmt, db.prepare("SELECT COALESCE(MAX(version), 0) FROM schema_version"));
  ASSIGN_OR_RETURN(bool row, stmt.step());
  return row ? static_cast<int>(stmt.columnInt(0)) : 0;
}

Status migrate(sql::Db& db) { return migrateTo(db, latestSchemaVersion()); }

Status migrateTo(sql::Db& db, int target) {
  if (target < 0 || target > latestSchemaVersion())
    return makeError(ErrorKind::kInvalidArgument, "no schema version {} (this build knows 0 to {})", target,
                     latestSchemaVersion());
  auto lock = db.lock();
  TRY(db.exec("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY KEY, applied_ms INTEGER NOT NULL)"));
  for (;;) {
    // Version read inside the transaction: another process migrating the same file at the same moment
    // (two daemons started by mistake) then waits for the write lock instead of applying a step twice.
    ASSIGN_OR_RETURN(auto tx, sql::Transaction::begin(db));
    ASSIGN_OR_RETURN(int version, schemaVersion(db));
    if (version > latestSchemaVersion()) {
      return makeError(ErrorKind::kUnsupported, "database schema version {} is newer than this build ({})", version,
                       latestSchemaVersion());
    }
    if (version >= target) return ok();
    int next = version + 1;
    auto applied = db.exec(kMigrations[next - 1]);
    if (!applied) return tl::unexpected(applied.error().context(fmt::format("schema migration {}", next)));
    ASSIGN_OR_RETURN(auto record, db.prepare("INSERT INTO schema_version (version, applied_ms) VALUES (?, ?)"));
    TRY(record.bindAll(next, nowMs()));
    TRY(record.run());
    TRY(tx.commit());
  }
}

}  // namespace space::store
