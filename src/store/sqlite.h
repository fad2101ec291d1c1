// A small RAII layer over the SQLite C API. Every failure becomes an Error carrying SQLite's own message
// and the first words of the statement ("sqlite INSERT INTO sandboxes: UNIQUE constraint failed: …"), so a
// log line says which query broke without dumping whole statements.
//
// Threading: one Db is one connection. SQLite serialises calls on a connection itself (FULLMUTEX), but a
// statement sequence (prepare → bind → step → read columns, or a transaction) must not interleave with
// another thread's; callers hold Db::lock() for the whole sequence.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "common/result.h"

struct sqlite3;
struct sqlite3_stmt;

namespace space::store::sql {

class Statement {
 public:
  Statement() = default;
  Statement(Statement&& o) noexcept;
  Statement& operator=(Statement&& o) noexcept;
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  ~Statement();

  // Parameters are 1-based, as in SQLite.
  Status bind(int index, int64_t value);
  Status bind(int index, int value) { return bind(index, static_cast<int64_t>(value)); }
  Status bind(int index, bool value) { return bind(index, static_cast<int64_t>(value ? 1 : 0)); }
  Status bind(int index, std::string_view text);
  Status bind(int index, const std::string& text) { return bind(index, std::string_view(text)); }
  Status bind(int index, const char* text) { return bind(index, std::string_view(text)); }
  Status bindNull(int index);
  // Binds the value, or NULL when unset.
  Status bind(int index, const std::optional<int64_t>& value);

  // Binds every argument in order, starting at parameter 1.
  template <class... Args>
  Status bindAll(const Args&... args) {
    int index = 0;
    Status status = ok();
    ((status = status ? bind(++index, args) : status), ...);
    return status;
  }

  // Advances the statement: true when a row is available, false when the statement is done.
  Result<bool> step();
  // Runs a statement that returns no rows (or whose rows are irrelevant) to completion.
  Status run();
  Status reset();

  // Columns are 0-based, as in SQLite.
  int64_t columnInt(int column) const;
  std::string columnText(int column) const;
  bool columnIsNull(int column) const;

 private:
  friend class Db;
  Statement(sqlite3* db, sqlite3_stmt* stmt, std::string head) : db_(db), stmt_(stmt), head_(std::move(head)) {}
  tl::unexpected<Error> error(int rc, std::string_view what) const;

  sqlite3* db_ = nullptr;
  sqlite3_stmt* stmt_ = nullptr;
  std::string head_;  // the statement's first words, for error messages
};

class Db {
 public:
  // Opens or creates the database file and sets the connection up for durable, concurrent use: WAL journal,
  // synchronous=FULL (a commit is on disk when it returns), a busy timeout, and foreign keys enforced.
  static Result<Db> open(const std::string& path);

  Db() = default;
  Db(Db&& o) noexcept;
  Db& operator=(Db&& o) noexcept;
  Db(const Db&) = delete;
  Db& operator=(const Db&) = delete;
  ~Db();

  // Runs one or more statements without parameters (schema changes, pragmas).
  Status exec(std::string_view sql);
  Result<Statement> prepare(std::string_view sql);
  // Rows changed by the last INSERT, UPDATE or DELETE on this connection.
  int64_t changes() const;

  // Held by callers for the duration of a statement sequence; see the threading note above.
  std::unique_lock<std::mutex> lock() { return std::unique_lock<std::mutex>(*mutex_); }

  sqlite3* handle() const { return db_; }

 private:
  sqlite3* db_ = nullptr;
  std::unique_ptr<std::mutex> mutex_;  // heap-allocated so Db stays movable
};

// A write transaction. BEGIN IMMEDIATE takes the write lock up front, so a transaction never fails half-way
// with SQLITE_BUSY on its first write. Rolls back on destruction unless commit() succeeded.
class Transaction {
 public:
  static Result<Transaction> begin(Db& db);
  Transaction(Transaction&& o) noexcept : db_(std::exchange(o.db_, nullptr)) {}
  Transaction& operator=(Transaction&&) = delete;
  Transaction(const Transaction&) = delete;
  ~Transaction();
  Status commit();

 private:
  explicit Transaction(Db* db) : db_(db) {}
  Db* db_ = nullptr;
};

// The first words of a statement, for error messages: "INSERT INTO sandboxes".
std::string statementHead(std::string_view sql);

}  // namespace space::store::sql
