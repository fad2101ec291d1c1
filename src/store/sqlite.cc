#include "store/sqlite.h"

#include <sqlite3.h>

#include <cctype>

namespace space::store::sql {
namespace {

// How long a connection waits for another process's write lock before failing with SQLITE_BUSY. Only
// spaced and offline tools (backup, inspection) open the file, so contention is short.
constexpr int kBusyTimeoutMs = 5000;

ErrorKind kindOf(int rc) {
  switch (rc & 0xff) {
    case SQLITE_CONSTRAINT:
      return ErrorKind::kConflict;
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return ErrorKind::kUnavailable;
    case SQLITE_FULL:
      return ErrorKind::kResourceExhausted;
    case SQLITE_CANTOPEN:
      return ErrorKind::kNotFound;
    default:
      return ErrorKind::kInternal;
  }
}

tl::unexpected<Error> dbError(sqlite3* db, int rc, std::string_view head) {
  const char* msg = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  return makeError(kindOf(rc), "sqlite {}: {}", head, msg);
}

}  // namespace

std::string statementHead(std::string_view sql) {
  // Three words name the statement well enough: "INSERT INTO sandboxes", "SELECT id, name,".
  constexpr int kWords = 3;
  std::string head;
  int words = 0;
  bool in_space = true;
  for (char c : sql) {
    bool space = std::isspace(static_cast<unsigned char>(c)) != 0;
    if (space && !in_space && ++words == kWords) break;
    if (space) {
      if (!in_space && !head.empty()) head += ' ';
    } else {
      head += c;
    }
    in_space = space;
  }
  while (!head.empty() && head.back() == ' ') head.pop_back();
  return head;
}

// ---- Statement

Statement::Statement(Statement&& o) noexcept
    : db_(std::exchange(o.db_, nullptr)), stmt_(std::exchange(o.stmt_, nullptr)), head_(std::move(o.head_)) {}

Statement& Statement::operator=(Statement&& o) noexcept {
  if (this != &o) {
    if (stmt_) sqlite3_finalize(stmt_);
    db_ = std::exchange(o.db_, nullptr);
    stmt_ = std::exchange(o.stmt_, nullptr);
    head_ = std::move(o.head_);
  }
  return *this;
}

Statement::~Statement() {
  if (stmt_) sqlite3_finalize(stmt_);
}

tl::unexpected<Error> Statement::error(int rc, std::string_view what) const {
  auto e = dbError(db_, rc, head_);
  if (!what.empty()) e.value().message += fmt::format(" ({})", what);
  return e;
}

Status Statement::bind(int index, int64_t value) {
  int rc = sqlite3_bind_int64(stmt_, index, value);
  if (rc != SQLITE_OK) return error(rc, fmt::format("bind parameter {}", index));
  return ok();
}

Status Statement::bind(int index, std::string_view text) {
  // SQLITE_TRANSIENT: SQLite copies the bytes, so the caller's string may die before step().
  int rc = sqlite3_bind_text64(stmt_, index, text.data(), text.size(), SQLITE_TRANSIENT, SQLITE_UTF8);
  if (rc != SQLITE_OK) return error(rc, fmt::format("bind parameter {}", index));
  return ok();
}

Status Statement::bindNull(int index) {
  int rc = sqlite3_bind_null(stmt_, index);
  if (rc != SQLITE_OK) return error(rc, fmt::format("bind parameter {}", index));
  return ok();
}

Status Statement::bind(int index, const std::optional<int64_t>& value) {
  return value ? bind(index, *value) : bindNull(index);
}

Result<bool> Statement::step() {
  int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  return error(rc, "");
}

Status Statement::run() {
  for (;;) {
    ASSIGN_OR_RETURN(bool row, step());
    if (!row) return ok();
  }
}

Status Statement::reset() {
  int rc = sqlite3_reset(stmt_);
  if (rc != SQLITE_OK) return error(rc, "reset");
  sqlite3_clear_bindings(stmt_);
  return ok();
}

int64_t Statement::columnInt(int column) const { return sqlite3_column_int64(stmt_, column); }

std::string Statement::columnText(int column) const {
  const auto* text = sqlite3_column_text(stmt_, column);
  if (!text) return {};
  return std::string(reinterpret_cast<const char*>(text), sqlite3_column_bytes(stmt_, column));
}

bool Statement::columnIsNull(int column) const { return sqlite3_column_type(stmt_, column) == SQLITE_NULL; }

// ---- Db

Result<Db> Db::open(const std::string& path) {
  Db db;
  db.mutex_ = std::make_unique<std::mutex>();
  int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX | SQLITE_OPEN_NOFOLLOW;
  int rc = sqlite3_open_v2(path.c_str(), &db.db_, flags, nullptr);
  if (rc != SQLITE_OK) {
    auto e = dbError(db.db_, rc, "open");
    e.value().message += fmt::format(" ({})", path);
    return e;
  }
  sqlite3_extended_result_codes(db.db_, 1);
  rc = sqlite3_busy_timeout(db.db_, kBusyTimeoutMs);
  if (rc != SQLITE_OK) return dbError(db.db_, rc, "busy_timeout");

  // journal_mode answers with the mode in force; WAL can silently fall back (e.g. on filesystems without
  // shared memory), and durability and concurrent readers depend on it, so check the answer.
  ASSIGN_OR_RETURN(auto journal, db.prepare("PRAGMA journal_mode=WAL"));
  ASSIGN_OR_RETURN(bool row, journal.step());
  if (!row || journal.columnText(0) != "wal") {
    return makeError(ErrorKind::kInternal, "sqlite open {}: WAL journal mode unavailable (got {})", path,
                     row ? journal.columnText(0) : "nothing");
  }
  TRY(db.exec("PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON;"));
  return db;
}

Db::Db(Db&& o) noexcept : db_(std::exchange(o.db_, nullptr)), mutex_(std::move(o.mutex_)) {}

Db& Db::operator=(Db&& o) noexcept {
  if (this != &o) {
    if (db_) sqlite3_close_v2(db_);
    db_ = std::exchange(o.db_, nullptr);
    mutex_ = std::move(o.mutex_);
  }
  return *this;
}

Db::~Db() {
  // close_v2 defers the close until every statement is finalised, so destruction order cannot leak.
  if (db_) sqlite3_close_v2(db_);
}

Status Db::exec(std::string_view sql) {
  std::string text(sql);
  char* msg = nullptr;
  int rc = sqlite3_exec(db_, text.c_str(), nullptr, nullptr, &msg);
  if (rc != SQLITE_OK) {
    std::string why = msg ? msg : sqlite3_errstr(rc);
    sqlite3_free(msg);
    return makeError(kindOf(rc), "sqlite {}: {}", statementHead(sql), why);
  }
  return ok();
}

Result<Statement> Db::prepare(std::string_view sql) {
  sqlite3_stmt* stmt = nullptr;
  int rc = sqlite3_prepare_v2(db_, sql.data(), static_cast<int>(sql.size()), &stmt, nullptr);
  if (rc != SQLITE_OK) {
    if (stmt) sqlite3_finalize(stmt);
    return dbError(db_, rc, statementHead(sql));
  }
  return Statement(db_, stmt, statementHead(sql));
}

int64_t Db::changes() const { return sqlite3_changes64(db_); }

// ---- Transaction

Result<Transaction> Transaction::begin(Db& db) {
  TRY(db.exec("BEGIN IMMEDIATE"));
  return Transaction(&db);
}

Transaction::~Transaction() {
  // A failed ROLLBACK leaves nothing to do: SQLite rolls back itself when the connection closes.
  if (db_) (void)db_->exec("ROLLBACK");
}

Status Transaction::commit() {
  if (!db_) return makeError(ErrorKind::kInternal, "commit of a finished transaction");
  TRY(db_->exec("COMMIT"));
  db_ = nullptr;
  return ok();
}

}  // namespace space::store::sql
