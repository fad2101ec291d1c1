// The database schema as an ordered list of migrations. Migration N (1-based) is applied in its own
// transaction together with recording version N in schema_version, so a crash mid-migration leaves the
// database at N-1 and the next open retries it.
#pragma once

#include "common/result.h"
#include "store/sqlite.h"

namespace space::store {

// The schema version this build writes. A database newer than this is refused rather than misread.
int latestSchemaVersion();

// Brings the database up to latestSchemaVersion(); a no-op when it is already there.
Status migrate(sql::Db& db);

// Brings the database up to `version` and no further (a database already past it is left alone): how a
// test builds a database as an older release left it.
Status migrateTo(sql::Db& db, int version);

// The version recorded in the database (0 for a fresh file).
Result<int> schemaVersion(sql::Db& db);

}  // namespace space::store
