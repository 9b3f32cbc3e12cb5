//! The watchdog's SQLite record: ticks, verdicts, alerts (with their events and per-channel
//! deliveries) and run-time channel settings, and the queries an operator runs over them.
//!
//! One module per table (or group of tables): [`ticks`], [`verdicts`], [`episodes`],
//! [`channels`], [`blocks`], [`marks`] (the calls the page draws); their queries return typed rows or [`rows::Rows`] for printing.
//!
//! One file (`$XDG_STATE_HOME/oc-watchdog/watchdog.db` by default) in WAL mode with a busy
//! timeout and foreign keys on. Every write is one `BEGIN IMMEDIATE` transaction, so two
//! writers queue instead of failing, and a killed writer leaves all of its work or none.

pub mod blocks;
pub mod channels;
pub mod episodes;
pub mod marks;
pub mod rows;
pub mod schema;
pub mod ticks;
pub mod verdicts;

use anyhow::{bail, Context, Result};
use rusqlite::{Connection, OpenFlags, TransactionBehavior};
use std::path::{Path, PathBuf};
use std::time::Duration;

pub struct Store {
    pub conn: Connection,
    pub path: PathBuf,
    /// The file's inode when it was opened: another (or none) later means it was deleted.
    ino: Option<u64>,
}

/// Default busy timeout.
pub const BUSY: Duration = Duration::from_secs(5);

impl Store {
    /// Opens (creating and migrating when needed) the watchdog database at `path`.
    pub fn open(path: &Path) -> Result<Store> {
        Self::open_with(path, BUSY)
    }

    pub fn open_with(path: &Path, busy: Duration) -> Result<Store> {
        let shown = path.display().to_string();
        if let Some(dir) = path.parent() {
            if !dir.as_os_str().is_empty() && !dir.exists() {
                use std::os::unix::fs::DirBuilderExt;
                // private (0700): the stop requests live beside the database
                let mut mk = std::fs::DirBuilder::new();
                mk.recursive(true).mode(0o700);
                mk.create(dir).with_context(|| {
                    format!("watchdog database {shown}: cannot create {}", dir.display())
                })?;
            }
        }
        // created 0600 before SQLite opens it: SQLite would use the umask's mode (0644), and
        // gives its -wal and -shm files the database's mode
        {
            use std::os::unix::fs::OpenOptionsExt;
            // one that exists is left as it is; one that cannot be made is SQLite's to report
            // (it says why in the words the rest of the store's errors use)
            let _ = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(path);
        }
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_CREATE
                | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .with_context(|| format!("watchdog database {shown}: cannot open"))?;
        conn.busy_timeout(busy)?;
        let mut s = Store {
            conn,
            path: path.to_path_buf(),
            ino: ino(path),
        };
        // First-time creation races other processes doing the same (ten ticks started at once on a
        // fresh database): some SQLite steps (the switch to WAL, a read that would deadlock a
        // writer) answer "busy" at once instead of waiting. Retry those until the busy timeout.
        let deadline = std::time::Instant::now() + busy;
        let mut pause = 5u64;
        loop {
            match s.prepare() {
                Ok(()) => return Ok(s),
                Err(e) if is_busy(&e) && std::time::Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(
                        pause + u64::from(std::process::id() % 7),
                    ));
                    pause = (pause * 2).min(100);
                }
                Err(e) => {
                    // everything that goes wrong opening is about the database
                    let e = s.explain(e);
                    return Err(if format!("{e:#}").contains(&shown) {
                        e
                    } else {
                        e.context(format!("watchdog database {shown}"))
                    });
                }
            }
        }
    }
}

fn ino(path: &Path) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| m.ino())
}

/// How much the directory probe writes: more than SQLite needs for a tick's pages, so a
/// directory too full for it is too full for the next tick.
const PROBE_BYTES: usize = 64 << 10;

impl Store {
    /// Was the database file deleted (or replaced) since it was opened? Then what is written
    /// goes to a file nobody will open again.
    pub fn deleted(&self) -> Option<String> {
        (self.ino.is_some() && ino(&self.path) != self.ino).then(|| {
            format!(
                "watchdog database {}: deleted while in use (was its directory removed?): what this command recorded is lost",
                self.path.display()
            )
        })
    }

    /// What keeps the database's directory from holding the next tick ([`dir_problem`]), or
    /// the file deleted while in use.
    pub fn dir_problem(&self) -> Option<String> {
        self.deleted().or_else(|| dir_problem(&self.path))
    }
}

/// What keeps the directory of the database at `db` from holding the next tick, said for the
/// operator: gone, not writable, or full (a probe of 64 KiB cannot be written and synced).
/// `None` when it can.
pub fn dir_problem(db: &Path) -> Option<String> {
    let dir = db
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let probe = dir.join(format!(".oc-watchdog-probe-{}", std::process::id()));
    let wrote = (|| -> std::io::Result<()> {
        use std::io::Write;
        let mut f = std::fs::File::create(&probe)?;
        f.write_all(&[0u8; PROBE_BYTES])?;
        f.sync_all()
    })();
    let _ = std::fs::remove_file(&probe);
    let e = wrote.err()?;
    let what = match e.kind() {
        std::io::ErrorKind::StorageFull => "full",
        std::io::ErrorKind::NotFound => "gone",
        std::io::ErrorKind::PermissionDenied | std::io::ErrorKind::ReadOnlyFilesystem => {
            "not writable"
        }
        _ => "not usable",
    };
    Some(format!(
        "state directory {}: {what} ({e}): ticks cannot be recorded",
        dir.display()
    ))
}

/// Whether SQLite said "busy" or "locked" anywhere in the chain.
fn is_busy(e: &anyhow::Error) -> bool {
    e.chain()
        .filter_map(|c| c.downcast_ref::<rusqlite::Error>())
        .filter_map(|r| r.sqlite_error_code())
        .any(|c| {
            matches!(
                c,
                rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked
            )
        })
}

impl Store {
    /// Turns SQLite's terse errors into ones that name the file and say what to do.
    pub fn explain(&self, e: anyhow::Error) -> anyhow::Error {
        let shown = self.path.display();
        let code = e
            .chain()
            .find_map(|c| c.downcast_ref::<rusqlite::Error>())
            .and_then(|r| r.sqlite_error_code());
        use rusqlite::ErrorCode as C;
        match code {
            Some(C::DatabaseBusy) | Some(C::DatabaseLocked) => {
                anyhow::anyhow!("watchdog database {shown}: locked by another process past the busy timeout ({e:#})")
            }
            Some(C::ReadOnly) => {
                let extended = e
                    .chain()
                    .find_map(|c| match c.downcast_ref::<rusqlite::Error>() {
                        Some(rusqlite::Error::SqliteFailure(f, _)) => Some(f.extended_code),
                        _ => None,
                    })
                    .unwrap_or(0);
                let dir = self
                    .path
                    .parent()
                    .filter(|d| !d.as_os_str().is_empty())
                    .unwrap_or(Path::new("."))
                    .display();
                // SQLITE_READONLY_DIRECTORY: the file may be readable, its directory is not writable
                if extended == 1544 {
                    anyhow::anyhow!("watchdog database {shown}: read-only: its directory {dir} is not writable, and SQLite keeps the database's -wal and -shm files there, for reading too")
                } else {
                    anyhow::anyhow!(
                        "watchdog database {shown}: read-only: the file cannot be written ({e:#})"
                    )
                }
            }
            Some(C::DiskFull) => anyhow::anyhow!("watchdog database {shown}: disk full ({e:#})"),
            Some(C::NotADatabase) => {
                anyhow::anyhow!("watchdog database {shown}: not a watchdog database (not SQLite)")
            }
            Some(C::CannotOpen) => {
                anyhow::anyhow!("watchdog database {shown}: cannot open ({e:#})")
            }
            _ => {
                let msg = format!("{e:#}");
                // only SQLite's errors are the database's: a bad input line, a channel or a
                // metrics file failing say so themselves
                let from_sqlite = e
                    .chain()
                    .any(|c| c.downcast_ref::<rusqlite::Error>().is_some());
                if msg.contains(&shown.to_string()) || !from_sqlite {
                    e
                } else {
                    e.context(format!("watchdog database {shown}"))
                }
            }
        }
    }

    fn prepare(&mut self) -> Result<()> {
        // one snapshot: another process may be creating the schema right now, and reading its
        // tables but not yet its application_id would look like someone else's database
        let (app, version, tables): (i32, i64, i64) = {
            let tx = self.conn.transaction()?;
            let app = tx.query_row("PRAGMA application_id", [], |r| r.get(0))?;
            let version = tx.query_row("PRAGMA user_version", [], |r| r.get(0))?;
            let tables = tx.query_row(
                "SELECT count(*) FROM sqlite_master WHERE type = 'table'",
                [],
                |r| r.get(0),
            )?;
            tx.commit()?;
            (app, version, tables)
        };
        if app != schema::APPLICATION_ID && !(app == 0 && tables == 0) {
            bail!("not a watchdog database (application_id {app:#x})");
        }
        if version > schema::latest() {
            bail!(
                "schema version {version} is newer than this wd-store knows ({}): upgrade oc-watchdog",
                schema::latest()
            );
        }
        self.conn.pragma_update(None, "foreign_keys", true)?;
        if version < schema::latest() {
            let mode: String = self
                .conn
                .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))?;
            if mode != "wal" {
                bail!("cannot switch to WAL mode (got {mode})");
            }
            let tx = self
                .conn
                .transaction_with_behavior(TransactionBehavior::Immediate)?;
            // another process may have migrated while we waited for the lock
            let now: i64 = tx.query_row("PRAGMA user_version", [], |r| r.get(0))?;
            for (i, m) in schema::MIGRATIONS.iter().enumerate().skip(now as usize) {
                tx.execute_batch(m)
                    .with_context(|| format!("migration to schema version {}", i + 1))?;
            }
            // a migration may edit the stored schema in place (11): a new schema_version makes
            // every connection read it again, as SQLite's ALTER TABLE page prescribes
            let v: i64 = tx.query_row("PRAGMA schema_version", [], |r| r.get(0))?;
            tx.pragma_update(None, "schema_version", v + 1)?;
            tx.pragma_update(None, "application_id", schema::APPLICATION_ID)?;
            tx.pragma_update(None, "user_version", schema::latest())?;
            tx.commit()?;
        }
        self.conn.pragma_update(None, "synchronous", "NORMAL")?;
        Ok(())
    }

    /// Starts a write transaction that waits (up to the busy timeout) for other writers.
    pub fn write(&mut self) -> Result<rusqlite::Transaction<'_>> {
        Ok(self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?)
    }

    /// Deletes ticks, verdicts, resolved episodes and events older than `before` in one
    /// transaction; open alerts and their events are kept.
    pub fn prune(&mut self, before: i64) -> Result<Pruned> {
        let tx = self.write()?;
        let verdicts = verdicts::prune(&tx, before)?;
        let ticks = ticks::prune(&tx, before)?;
        let (episodes, events) = episodes::prune(&tx, before)?;
        tx.commit()?;
        Ok(Pruned {
            ticks,
            verdicts,
            episodes,
            events,
        })
    }
}

/// What [`Store::prune`] deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pruned {
    pub ticks: usize,
    pub verdicts: usize,
    pub episodes: usize,
    pub events: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 41: a liveness alert may resolve as `changed`; a database made by schema 10 takes
    /// it after its migration, keeps its rows, and still refuses a reason it does not know.
    #[test]
    fn an_episode_resolves_as_changed_in_a_new_and_in_a_migrated_database() {
        let dir = tempfile::tempdir().unwrap();
        let old = dir.path().join("old.db");
        {
            let c = Connection::open(&old).unwrap();
            for m in &schema::MIGRATIONS[..10] {
                c.execute_batch(m).unwrap();
            }
            c.pragma_update(None, "application_id", schema::APPLICATION_ID)
                .unwrap();
            c.pragma_update(None, "user_version", 10).unwrap();
            c.execute_batch(
                "INSERT INTO episodes (dedup_key, kind, root, state, severity, peak_severity, opened, last_fired, resolved, reason)
                 VALUES ('opencode-retrying:s', 'retrying', 's', 'resolved', 'info', 'warning', 1, 2, 3, 'recovered')",
            )
            .unwrap();
        }
        for p in [old, dir.path().join("new.db")] {
            let s = Store::open(&p).unwrap();
            let insert = |reason: &str| {
                s.conn.execute(
                    "INSERT INTO episodes (dedup_key, kind, root, state, severity, peak_severity, opened, last_fired, resolved, reason)
                     VALUES ('retrying:t', 'retrying', 't', 'resolved', 'info', 'warning', 4, 5, 6, ?1)",
                    [reason],
                )
            };
            assert!(insert("bogus").is_err(), "{}", p.display());
            insert("changed").unwrap();
            let column = |sql: &str| -> Vec<String> {
                s.conn
                    .prepare(sql)
                    .unwrap()
                    .query_map([], |r| r.get(0))
                    .unwrap()
                    .map(Result::unwrap)
                    .collect()
            };
            let reasons = column("SELECT reason FROM episodes ORDER BY opened");
            let want: &[&str] = if p.ends_with("old.db") {
                &["recovered", "changed"]
            } else {
                &["changed"]
            };
            assert_eq!(reasons, want, "{}", p.display());
            // and schema 13 rewrote the old key (issue 39)
            let keys = column("SELECT dedup_key FROM episodes ORDER BY opened");
            let want: &[&str] = if p.ends_with("old.db") {
                &["retrying:s", "retrying:t"]
            } else {
                &["retrying:t"]
            };
            assert_eq!(keys, want, "{}", p.display());
            let ok: String = s
                .conn
                .query_row("PRAGMA integrity_check", [], |r| r.get(0))
                .unwrap();
            assert_eq!(ok, "ok");
        }
    }

    /// Issue 30, point 5: the database (and its WAL files) are the user's alone.
    #[test]
    fn a_new_database_is_0600_whatever_the_umask() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("w.db");
        let s = Store::open(&p).unwrap();
        s.conn
            .execute_batch("CREATE TABLE t (x); INSERT INTO t VALUES (1);")
            .unwrap();
        for f in ["w.db", "w.db-wal", "w.db-shm"] {
            let m = std::fs::metadata(dir.path().join(f)).unwrap();
            assert_eq!(m.permissions().mode() & 0o777, 0o600, "{f}");
        }
    }

    #[test]
    fn a_newer_schema_is_refused_with_both_versions() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("w.db");
        drop(Store::open(&p).unwrap());
        let c = Connection::open(&p).unwrap();
        c.pragma_update(None, "user_version", 99).unwrap();
        drop(c);
        let e = Store::open(&p).err().unwrap();
        assert_eq!(
            format!("{e:#}"),
            format!(
                "watchdog database {}: schema version 99 is newer than this wd-store knows ({}): upgrade oc-watchdog",
                p.display(),
                schema::latest()
            )
        );
    }

    #[test]
    fn another_sqlite_file_is_not_a_watchdog_database() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("other.db");
        Connection::open(&p)
            .unwrap()
            .execute_batch("CREATE TABLE x (y)")
            .unwrap();
        let e = Store::open(&p).err().unwrap();
        assert!(
            format!("{e:#}").contains("not a watchdog database"),
            "{e:#}"
        );
    }
}
