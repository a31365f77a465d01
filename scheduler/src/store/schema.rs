//! What makes a file a gantry store and brings it up to date: the numbered schema migrations
//! ([`SCHEMA_VERSION`]), the application id that marks the file ([`APPLICATION_ID`]), the
//! writer's connection (WAL, `synchronous=FULL`, foreign keys) and the lock file that keeps a
//! second scheduler out. Everything here runs once, in [`Store::open`](super::Store::open).

use super::{StoreError, StoreOptions, retention};
use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use rusqlite::{Connection, params};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// `PRAGMA application_id` of a gantry store ("GNTR"), so that `open` refuses another program's
/// SQLite file instead of adding tables to it.
pub const APPLICATION_ID: i64 = 0x474e_5452;

/// The schema version this binary writes; [`Store::open`](super::Store::open) migrates older files
/// up to it.
pub const SCHEMA_VERSION: u32 = MIGRATIONS[MIGRATIONS.len() - 1].version;

/// One forward step of the schema. Steps are applied in order and never edited once released:
/// a change is a new step.
struct Migration {
    version: u32,
    description: &'static str,
    sql: &'static str,
}

/// Every schema step since version 1. Tables are `STRICT` so a wrong type is an error, not a
/// silently coerced value; unsigned values are stored as SQLite's signed 64-bit integers, and
/// rusqlite refuses anything above `i64::MAX` rather than wrapping it.
const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        description: "apps, containers, reservations, id counters, queue configurations",
        sql: "
        CREATE TABLE apps (
            id           INTEGER PRIMARY KEY,
            name         TEXT    NOT NULL,
            queue        TEXT    NOT NULL,
            user         TEXT    NOT NULL,
            priority     INTEGER NOT NULL,
            max_attempts INTEGER NOT NULL,
            submit_ms    INTEGER NOT NULL,
            state        INTEGER NOT NULL,
            state_ms     INTEGER NOT NULL,
            diagnostics  TEXT    NOT NULL,
            spec         TEXT    NOT NULL,
            launch       TEXT    NOT NULL
        ) STRICT;
        CREATE INDEX apps_by_state ON apps(state);

        CREATE TABLE containers (
            id           INTEGER PRIMARY KEY,
            app          INTEGER NOT NULL REFERENCES apps(id) ON DELETE CASCADE,
            request      INTEGER NOT NULL,
            node         TEXT    NOT NULL,
            cpu_millis   INTEGER NOT NULL,
            memory_bytes INTEGER NOT NULL,
            gpus         INTEGER NOT NULL,
            gpu_indexes  TEXT    NOT NULL,
            state        INTEGER NOT NULL,
            started_ms   INTEGER,
            exit_code    INTEGER,
            reason       TEXT
        ) STRICT;
        CREATE INDEX containers_by_app ON containers(app);

        CREATE TABLE reservations (
            id           INTEGER PRIMARY KEY,
            queue        TEXT    NOT NULL,
            start_ms     INTEGER NOT NULL,
            end_ms       INTEGER NOT NULL,
            cpu_millis   INTEGER NOT NULL,
            memory_bytes INTEGER NOT NULL,
            gpus         INTEGER NOT NULL,
            state        INTEGER NOT NULL
        ) STRICT;

        CREATE TABLE counters (
            name  TEXT    PRIMARY KEY,
            value INTEGER NOT NULL
        ) STRICT, WITHOUT ROWID;

        CREATE TABLE queue_configs (
            id          INTEGER PRIMARY KEY AUTOINCREMENT,
            recorded_ms INTEGER NOT NULL,
            queues      TEXT    NOT NULL
        ) STRICT;
    ",
    },
    Migration {
        version: 2,
        description: "operators' node drains",
        sql: "
        CREATE TABLE node_drains (
            node        TEXT    PRIMARY KEY,
            drained_ms  INTEGER NOT NULL
        ) STRICT, WITHOUT ROWID;
    ",
    },
    Migration {
        version: 3,
        description: "Rayon reservations in the plan, with their allocations",
        sql: "
        CREATE TABLE plan_reservations (
            id          INTEGER PRIMARY KEY,
            record      TEXT    NOT NULL
        ) STRICT;
    ",
    },
    Migration {
        version: 4,
        description: "when each container ended, for ended apps' history",
        sql: "
        ALTER TABLE containers ADD COLUMN finished_ms INTEGER;
    ",
    },
    Migration {
        version: 5,
        description: "the cluster id each container was launched under",
        // Containers stored before cluster ids were launched under the legacy cluster ('').
        sql: "
        ALTER TABLE containers ADD COLUMN cluster TEXT NOT NULL DEFAULT '';
    ",
    },
    Migration {
        version: 6,
        description: "ended applications by the time they ended, for retention",
        sql: retention::MIGRATION_SQL,
    },
];

pub(super) fn take_lock(path: &Path) -> Result<Flock<File>, StoreError> {
    let mut lock_path = path.as_os_str().to_owned();
    lock_path.push(".lock");
    let lock_path = PathBuf::from(lock_path);
    let file = File::options().create(true).truncate(false).write(true).open(&lock_path).map_err(|e| {
        StoreError::Open { path: path.to_path_buf(), message: format!("{}: {e}", lock_path.display()) }
    })?;
    match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(lock) => Ok(lock),
        Err((_, Errno::EWOULDBLOCK)) => Err(StoreError::Locked { path: path.to_path_buf(), lock: lock_path }),
        Err((_, e)) => Err(StoreError::Open {
            path: path.to_path_buf(),
            message: format!("cannot lock {}: {e}", lock_path.display()),
        }),
    }
}

pub(super) fn open_connection(path: &Path, options: &StoreOptions) -> Result<Connection, StoreError> {
    let fail = |message: String| StoreError::Open { path: path.to_path_buf(), message };
    let conn = Connection::open(path).map_err(|e| fail(e.to_string()))?;
    conn.busy_timeout(options.busy_timeout).map_err(|e| fail(e.to_string()))?;
    // The first statement reads the header: a file that is not a database fails here.
    let app_id: i64 =
        conn.pragma_query_value(None, "application_id", |r| r.get(0)).map_err(|e| fail(e.to_string()))?;
    if app_id != 0 && app_id != APPLICATION_ID {
        return Err(StoreError::NotAStore { path: path.to_path_buf(), found: app_id });
    }
    if app_id == 0 {
        // No id yet: either a new file, or one of another program that never set one; only
        // the first may be given our tables.
        let others: i64 = conn
            .query_row("SELECT COUNT(*) FROM sqlite_schema WHERE name NOT LIKE 'sqlite_%'", [], |r| r.get(0))
            .map_err(|e| fail(e.to_string()))?;
        if others > 0 {
            return Err(StoreError::NotAStore { path: path.to_path_buf(), found: 0 });
        }
    }
    let mode: String = conn
        .pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))
        .map_err(|e| fail(e.to_string()))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(fail(format!("the file system does not support WAL (journal mode is {mode})")));
    }
    conn.pragma_update(None, "synchronous", "FULL").map_err(|e| fail(e.to_string()))?;
    conn.pragma_update(None, "foreign_keys", true).map_err(|e| fail(e.to_string()))?;
    // A giant batch may grow the WAL; give the space back after the next checkpoint.
    conn.pragma_update(None, "journal_size_limit", 64 * 1024 * 1024).map_err(|e| fail(e.to_string()))?;
    let sync: i64 =
        conn.pragma_query_value(None, "synchronous", |r| r.get(0)).map_err(|e| fail(e.to_string()))?;
    let fk: i64 =
        conn.pragma_query_value(None, "foreign_keys", |r| r.get(0)).map_err(|e| fail(e.to_string()))?;
    if sync != 2 || fk != 1 {
        return Err(fail(format!("SQLite refused synchronous=FULL or foreign_keys (got {sync}, {fk})")));
    }
    Ok(conn)
}

/// Brings the schema to [`SCHEMA_VERSION`] in one transaction.
pub(super) fn migrate(conn: &Connection, path: &Path) -> Result<(), StoreError> {
    let fail = |e: rusqlite::Error| StoreError::Open { path: path.to_path_buf(), message: e.to_string() };
    conn.execute_batch("BEGIN IMMEDIATE").map_err(fail)?;
    let result = (|| {
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS schema_version (
                version     INTEGER PRIMARY KEY,
                applied_ms  INTEGER NOT NULL,
                description TEXT    NOT NULL
            ) STRICT",
        )
        .map_err(fail)?;
        let current: u32 = conn
            .query_row("SELECT COALESCE(MAX(version), 0) FROM schema_version", [], |r| r.get(0))
            .map_err(fail)?;
        if current > SCHEMA_VERSION {
            return Err(StoreError::TooNew {
                path: path.to_path_buf(),
                found: current,
                supported: SCHEMA_VERSION,
            });
        }
        for m in MIGRATIONS.iter().filter(|m| m.version > current) {
            conn.execute_batch(m.sql).map_err(fail)?;
            conn.execute(
                "INSERT INTO schema_version (version, applied_ms, description) VALUES (?1, ?2, ?3)",
                params![m.version, wall_ms(), m.description],
            )
            .map_err(fail)?;
            tracing::info!(path = %path.display(), version = m.version, "store schema migrated");
        }
        conn.pragma_update(None, "application_id", APPLICATION_ID).map_err(fail)?;
        Ok(())
    })();
    match result {
        Ok(()) => conn.execute_batch("COMMIT").map_err(fail),
        Err(e) => {
            if !conn.is_autocommit() {
                let _ = conn.execute_batch("ROLLBACK");
            }
            Err(e)
        }
    }
}

/// Milliseconds since the Unix epoch, for the migration log only.
fn wall_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Store, Write};

    #[test]
    fn a_second_opener_is_locked_out_until_the_first_closes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        let first = Store::open(&path).unwrap();
        assert!(matches!(Store::open(&path), Err(StoreError::Locked { .. })));
        first.close().unwrap();
        Store::open(&path).unwrap();
    }

    #[test]
    fn schema_is_versioned_and_migrations_are_idempotent() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        drop(Store::open(&path).unwrap());
        drop(Store::open(&path).unwrap());
        let conn = Connection::open(&path).unwrap();
        let rows: Vec<u32> = conn
            .prepare("SELECT version FROM schema_version ORDER BY version")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(rows, (1..=SCHEMA_VERSION).collect::<Vec<_>>());
        let mode: String = conn.pragma_query_value(None, "journal_mode", |r| r.get(0)).unwrap();
        assert_eq!(mode, "wal");
    }

    #[test]
    fn containers_stored_before_cluster_ids_read_as_the_legacy_cluster() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        // A store as version 3 left it, holding one running container.
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch(
            "CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_ms INTEGER NOT NULL,
                                          description TEXT NOT NULL) STRICT",
        )
        .unwrap();
        for m in MIGRATIONS.iter().filter(|m| m.version <= 3) {
            conn.execute_batch(m.sql).unwrap();
            conn.execute("INSERT INTO schema_version VALUES (?1, 0, ?2)", params![m.version, m.description])
                .unwrap();
        }
        conn.pragma_update(None, "application_id", APPLICATION_ID).unwrap();
        conn.execute_batch(
            "INSERT INTO apps VALUES (1, 'a', 'root.default', 'u', 0, 1, 1, 2, 1, '', '{\"requests\":[]}', '[]');
             INSERT INTO containers VALUES (7, 1, 0, 'n1', 100, 1048576, 0, '[]', 3, 5, NULL, NULL);",
        )
        .unwrap();
        drop(conn);
        let store = Store::open(&path).unwrap();
        let recovered = store.load().unwrap();
        assert_eq!(recovered.containers.len(), 1);
        assert_eq!(recovered.containers[0].cluster, gantry_proto::ClusterId::LEGACY);
        // Written again with a cluster id, it reads back with it.
        let mut c = recovered.containers[0].clone();
        c.cluster = gantry_proto::ClusterId::from_bits(42);
        store.write_blocking(vec![Write::UpsertContainer(c.clone())]).unwrap();
        assert_eq!(store.load().unwrap().containers, vec![c]);
    }

    #[test]
    fn a_newer_schema_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        drop(Store::open(&path).unwrap());
        let conn = Connection::open(&path).unwrap();
        conn.execute("INSERT INTO schema_version VALUES (?1, 0, 'from the future')", [SCHEMA_VERSION + 1])
            .unwrap();
        drop(conn);
        let err = Store::open(&path).unwrap_err();
        assert_eq!(
            err,
            StoreError::TooNew { path: path.clone(), found: SCHEMA_VERSION + 1, supported: SCHEMA_VERSION }
        );
    }

    #[test]
    fn foreign_files_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let other = dir.path().join("other.db");
        let conn = Connection::open(&other).unwrap();
        conn.execute_batch("PRAGMA application_id = 1234; CREATE TABLE t (x)").unwrap();
        drop(conn);
        assert!(matches!(Store::open(&other), Err(StoreError::NotAStore { found: 1234, .. })));
        let anonymous = dir.path().join("anonymous.db");
        Connection::open(&anonymous).unwrap().execute_batch("CREATE TABLE t (x)").unwrap();
        assert!(matches!(Store::open(&anonymous), Err(StoreError::NotAStore { found: 0, .. })));
        let tables: i64 = Connection::open(&anonymous)
            .unwrap()
            .query_row("SELECT COUNT(*) FROM sqlite_schema", [], |r| r.get(0))
            .unwrap();
        assert_eq!(tables, 1, "nothing was added to the other program's file");
        let garbage = dir.path().join("garbage.db");
        std::fs::write(&garbage, vec![0x5a; 8192]).unwrap();
        assert!(matches!(Store::open(&garbage), Err(StoreError::Open { .. })));
        assert!(matches!(Store::open(dir.path().join("no/such/dir/s.db")), Err(StoreError::Open { .. })));
    }
}
