//! The watchdog's SQLite record: ticks, verdicts, alerts (with their events and per-channel
//! deliveries) and run-time channel settings, and the queries an operator runs over them.
//!
//! One file (`$XDG_STATE_HOME/oc-watchdog/watchdog.db` by default) in WAL mode with a busy
//! timeout and foreign keys on. Every write is one `BEGIN IMMEDIATE` transaction, so two
//! writers queue instead of failing, and a killed writer leaves all of its work or none.

pub mod cmd;
pub mod schema;

use anyhow::{bail, Context, Result};
use rusqlite::{params, Connection, OpenFlags, OptionalExtension, TransactionBehavior};
use std::path::{Path, PathBuf};
use std::time::Duration;

pub struct Store {
    pub conn: Connection,
    pub path: PathBuf,
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
                std::fs::create_dir_all(dir).with_context(|| {
                    format!("watchdog database {shown}: cannot create {}", dir.display())
                })?;
            }
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
        };
        s.prepare().map_err(|e| s.explain(e))?;
        Ok(s)
    }

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
            Some(C::ReadOnly) => anyhow::anyhow!("watchdog database {shown}: read-only ({e:#})"),
            Some(C::DiskFull) => anyhow::anyhow!("watchdog database {shown}: disk full ({e:#})"),
            Some(C::NotADatabase) => {
                anyhow::anyhow!("watchdog database {shown}: not a watchdog database (not SQLite)")
            }
            Some(C::CannotOpen) => {
                anyhow::anyhow!("watchdog database {shown}: cannot open ({e:#})")
            }
            _ => {
                let msg = format!("{e:#}");
                if msg.contains(&shown.to_string()) {
                    e
                } else {
                    e.context(format!("watchdog database {shown}"))
                }
            }
        }
    }

    fn prepare(&mut self) -> Result<()> {
        let app: i32 = self
            .conn
            .query_row("PRAGMA application_id", [], |r| r.get(0))?;
        let version: i64 = self
            .conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))?;
        let tables: i64 = self.conn.query_row(
            "SELECT count(*) FROM sqlite_master WHERE type = 'table'",
            [],
            |r| r.get(0),
        )?;
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

    /// Time of the last tick.
    pub fn last_tick(&self) -> Result<Option<i64>> {
        Ok(self
            .conn
            .query_row("SELECT max(t) FROM ticks", [], |r| r.get(0))
            .optional()?
            .flatten())
    }

    /// Channel overrides: (enabled, min_severity) set at run time.
    pub fn channel_override(&self, name: &str) -> Result<(Option<bool>, Option<String>)> {
        Ok(self
            .conn
            .query_row(
                "SELECT enabled, min_severity FROM channels WHERE name = ?1",
                params![name],
                |r| Ok((r.get::<_, Option<bool>>(0)?, r.get::<_, Option<String>>(1)?)),
            )
            .optional()?
            .unwrap_or((None, None)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
