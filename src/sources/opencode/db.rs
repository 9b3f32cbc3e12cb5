//! Reads opencode's own SQLite database (`$XDG_DATA_HOME/opencode/opencode.db`), strictly
//! read-only: opened with `SQLITE_OPEN_READ_ONLY` and `query_only`, short read transactions
//! that never take a write lock, so opencode's own writes (WAL mode) are never blocked.
//!
//! Rows are rebuilt into the same JSON shapes the HTTP API serves (a part's `data` plus its
//! `id`, `sessionID`, `messageID` columns), so one converter serves both sources.

use super::{convert, Changes, Cursor, Fault, IndexEntry, Source};
use crate::record::Session;
use crate::sources::{SourceId, SourceKind};
use anyhow::{bail, Context, Result};
use rusqlite::{Connection, OpenFlags, OptionalExtension};
use serde_json::{json, Map, Value};
use std::path::{Path, PathBuf};
use std::time::Duration;

pub struct Db {
    conn: Connection,
    pub path: PathBuf,
    /// `message` and `part` carry `time_updated` (opencode 1.18 does): what changed in a
    /// session can be read alone ([`Db::message_rows_since`]).
    incremental: bool,
    /// The file opened (device, inode, birth time): a database deleted and recreated at the
    /// same path is another file, which this connection does not see.
    file: Option<(u64, u64, Option<std::time::SystemTime>)>,
}

/// What tells one file at a path from another that replaced it.
fn file_identity(path: &Path) -> Option<(u64, u64, Option<std::time::SystemTime>)> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some((m.dev(), m.ino(), m.created().ok()))
}

/// How a database without one of the tables this reader needs is refused.
const NO_TABLE: &str = "not an opencode database of a known schema: no table";

/// How long a new database may lack the tables opencode makes in it at its first start.
const MAKING: std::time::Duration = std::time::Duration::from_secs(30);

/// Whether the file at `path` was made (its birth time, else its last change) less than
/// [`MAKING`] before `now`.
fn being_made(path: &Path, now: std::time::SystemTime) -> bool {
    let Ok(m) = std::fs::metadata(path) else {
        return false;
    };
    m.created()
        .or_else(|_| m.modified())
        .is_ok_and(|born| now.duration_since(born).is_ok_and(|age| age < MAKING))
}

/// Columns this reader needs, by table. A database without one of them is of a schema this
/// reader does not know (a newer opencode, most likely): blind, not empty.
const NEEDED: &[(&str, &[&str])] = &[
    (
        "session",
        &[
            "id",
            "parent_id",
            "agent",
            "title",
            "directory",
            "model",
            "version",
            "time_created",
            "time_updated",
        ],
    ),
    ("message", &["id", "session_id", "time_created", "data"]),
    ("part", &["id", "message_id", "session_id", "data"]),
];

/// One row of the session index: id, parent, last update.
pub type Row = (String, Option<String>, i64);

impl Db {
    /// Opens a database that must exist.
    pub fn open(path: &Path) -> Result<Db> {
        match Db::open_if_there(path) {
            Ok(Some(db)) => Ok(db),
            Ok(None) if path.exists() => bail!(
                "opencode database {}: opencode is making it (no tables yet)",
                path.display()
            ),
            Ok(None) => bail!("opencode database {}: no such file", path.display()),
            Err(why) => bail!("opencode database {}: {why}", path.display()),
        }
    }

    /// Opens a database if the file exists (`None`: no opencode history yet, or a database
    /// opencode is making now). Errors say why it cannot be read: locked, not a database, or a
    /// schema this reader does not know.
    pub fn open_if_there(path: &Path) -> std::result::Result<Option<Db>, String> {
        Db::open_at(path, std::time::SystemTime::now())
    }

    /// [`Db::open_if_there`] at time `now`. A database made less than [`MAKING`] before `now`
    /// that lacks a table yet is one opencode is making at its first start (it creates the
    /// file, then its tables): no history yet, not blindness. Past that, or with any other
    /// fault (a newer schema, not a database), it is blind at once.
    fn open_at(path: &Path, now: std::time::SystemTime) -> std::result::Result<Option<Db>, String> {
        if !path.exists() {
            return Ok(None);
        }
        match Db::open_read(path) {
            Err(e) if e.starts_with(NO_TABLE) && being_made(path, now) => Ok(None),
            r => r.map(Some),
        }
    }

    fn open_read(path: &Path) -> std::result::Result<Db, String> {
        let file = file_identity(path);
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|e| format!("cannot open read-only: {e}"))?;
        conn.busy_timeout(Duration::from_secs(2))
            .map_err(|e| e.to_string())?;
        conn.pragma_update(None, "query_only", true)
            .map_err(|e| e.to_string())?;
        let mut incremental = true;
        for (table, cols) in NEEDED {
            let mut st = conn
                .prepare(&format!("PRAGMA table_info({table})"))
                .map_err(|e| format!("cannot read: {e}"))?;
            let have: Vec<String> = st
                .query_map([], |r| r.get::<_, String>(1))
                .and_then(|rows| rows.collect())
                .map_err(|e| format!("cannot read: {e}"))?;
            if matches!(*table, "message" | "part") {
                incremental &= have.iter().any(|h| h == "time_updated");
            }
            if have.is_empty() {
                return Err(format!("{NO_TABLE} {table}"));
            }
            if let Some(c) = cols.iter().find(|c| !have.iter().any(|h| h == *c)) {
                return Err(format!(
                    "not an opencode database of a known schema (newer opencode?): table {table} has no column {c}"
                ));
            }
        }
        Ok(Db {
            conn,
            path: path.to_path_buf(),
            incremental,
            file,
        })
    }

    /// Whether the file at the path is still the one this connection reads (not deleted,
    /// not replaced by another database).
    pub fn is_current(&self) -> bool {
        self.file.is_some() && file_identity(&self.path) == self.file
    }

    /// The newest schema migration opencode applied (`migration.id`), if it keeps that table.
    pub fn schema(&self) -> Option<String> {
        self.conn
            .query_row("SELECT max(id) FROM migration", [], |r| r.get(0))
            .ok()
            .flatten()
    }

    /// The opencode version that wrote the most recently updated session.
    pub fn newest_version(&self) -> Option<String> {
        self.conn
            .query_row(
                "SELECT version FROM session ORDER BY time_updated DESC LIMIT 1",
                [],
                |r| r.get(0),
            )
            .ok()
    }

    /// Every session's id, parent and last update: the cheap index that picks what to read.
    pub fn index_rows(&self) -> Result<Vec<Row>> {
        let mut st = self
            .conn
            .prepare("SELECT id, parent_id, time_updated FROM session")
            .with_context(|| self.err("cannot list sessions"))?;
        let rows = st
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .and_then(|rows| rows.collect::<rusqlite::Result<Vec<Row>>>())
            .with_context(|| self.err("cannot list sessions"))?;
        Ok(rows)
    }

    /// These sessions, as API `Session` objects, newest update first.
    pub fn sessions_by_id(&self, ids: &[&str]) -> Result<Vec<Value>> {
        let mut out = Vec::new();
        // SQLite's default limit on bound parameters is 32766; stay well under it.
        for chunk in ids.chunks(500) {
            let marks = vec!["?"; chunk.len()].join(",");
            out.extend(self.query_sessions(&format!("id IN ({marks})"), chunk)?);
        }
        out.sort_by(|a, b| {
            b["time"]["updated"]
                .as_i64()
                .cmp(&a["time"]["updated"].as_i64())
        });
        Ok(out)
    }

    fn query_sessions(&self, filter: &str, args: &[&str]) -> Result<Vec<Value>> {
        let mut st = self
            .conn
            .prepare(&format!(
                "SELECT id, parent_id, agent, title, directory, model, time_created, time_updated, version
                 FROM session WHERE {filter} ORDER BY time_updated DESC"
            ))
            .with_context(|| self.err("cannot list sessions"))?;
        let rows = st
            .query_map(rusqlite::params_from_iter(args), |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, Option<String>>(1)?,
                    r.get::<_, Option<String>>(2)?,
                    r.get::<_, Option<String>>(3)?,
                    r.get::<_, Option<String>>(4)?,
                    r.get::<_, Option<String>>(5)?,
                    r.get::<_, i64>(6)?,
                    r.get::<_, i64>(7)?,
                    r.get::<_, Option<String>>(8)?,
                ))
            })
            .with_context(|| self.err("cannot list sessions"))?;
        let mut out = Vec::new();
        for row in rows {
            let (id, parent, agent, title, dir, model, created, updated, version) =
                row.with_context(|| self.err("cannot read a session row"))?;
            let mut o = Map::new();
            o.insert("id".into(), json!(id));
            if let Some(p) = parent {
                o.insert("parentID".into(), json!(p));
            }
            o.insert("agent".into(), json!(agent));
            o.insert("title".into(), json!(title));
            o.insert("directory".into(), json!(dir));
            if let Some(m) = model.and_then(|m| serde_json::from_str::<Value>(&m).ok()) {
                o.insert("model".into(), m);
            }
            o.insert("version".into(), json!(version));
            o.insert(
                "time".into(),
                json!({"created": created, "updated": updated}),
            );
            out.push(Value::Object(o));
        }
        Ok(out)
    }

    fn err(&self, what: &str) -> String {
        format!("opencode database {}: {what}", self.path.display())
    }

    /// One session as an API `Session` object, if it exists.
    pub fn session_row(&self, id: &str) -> Result<Option<Value>> {
        Ok(self.sessions_by_id(&[id])?.into_iter().next())
    }

    /// A session's messages with their parts, `[{info, parts}]`, in order, read in one
    /// transaction so the two queries see the same snapshot.
    pub fn message_rows(&self, session: &str) -> Result<Value> {
        let tx = self
            .conn
            .unchecked_transaction()
            .with_context(|| self.err("cannot start a read"))?;
        let msgs = self.read_messages(&tx, session, None)?;
        tx.finish()?;
        Ok(msgs)
    }

    /// The messages of a session that changed at or after `since` (ms, opencode's
    /// `time_updated` of the message or of any of its parts), each whole with all its parts,
    /// in order, and the newest `time_updated` among them (`None`: nothing changed). One
    /// transaction. `part` is indexed by session only, so this scans the session's parts (not
    /// their data); a database without `time_updated` columns gives every message.
    pub fn message_rows_since(&self, session: &str, since: i64) -> Result<(Value, Option<i64>)> {
        let tx = self
            .conn
            .unchecked_transaction()
            .with_context(|| self.err("cannot start a read"))?;
        if !self.incremental {
            let msgs = self.read_messages(&tx, session, None)?;
            tx.finish()?;
            return Ok((msgs, None));
        }
        let mut changed: Vec<String> = Vec::new();
        let mut newest: Option<i64> = None;
        {
            let mut st = tx.prepare(
                "SELECT id, time_updated FROM message WHERE session_id = ?1 AND time_updated >= ?2
                 UNION
                 SELECT message_id, max(time_updated) FROM part
                  WHERE session_id = ?1 AND time_updated >= ?2 GROUP BY message_id",
            )?;
            let mut rows = st.query(rusqlite::params![session, since])?;
            while let Some(r) = rows.next()? {
                let id: String = r.get(0)?;
                let t: Option<i64> = r.get(1)?;
                newest = newest.max(t);
                if !changed.contains(&id) {
                    changed.push(id);
                }
            }
        }
        // many changed (a first read, a long-forgotten session): all of them, in the two
        // queries of a whole read, under SQLite's limit on bound parameters
        let msgs = match changed.len() {
            0 => Value::Array(Vec::new()),
            1..=500 => self.read_messages(&tx, session, Some(&changed))?,
            _ => self.read_messages(&tx, session, None)?,
        };
        tx.finish()?;
        Ok((msgs, newest))
    }

    /// The messages of a session (`only` these ids, or all), with their parts, as the API
    /// serves them.
    fn read_messages(
        &self,
        tx: &rusqlite::Transaction,
        session: &str,
        only: Option<&[String]>,
    ) -> Result<Value> {
        let mut msgs: Vec<(String, Map<String, Value>, Vec<Value>)> = Vec::new();
        let ids: Vec<&str> = only.into_iter().flatten().map(String::as_str).collect();
        let marks = vec!["?"; ids.len()].join(",");
        let (msg_sql, part_sql) = match only {
            None => (
                "SELECT id, data FROM message WHERE session_id = ? ORDER BY time_created, id"
                    .to_string(),
                "SELECT id, message_id, data FROM part WHERE session_id = ? ORDER BY message_id, id"
                    .to_string(),
            ),
            Some(_) => (
                format!("SELECT id, data FROM message WHERE session_id = ? AND id IN ({marks}) ORDER BY time_created, id"),
                format!("SELECT id, message_id, data FROM part WHERE message_id IN ({marks}) ORDER BY message_id, id"),
            ),
        };
        {
            let mut st = tx.prepare(&msg_sql)?;
            let args = std::iter::once(session).chain(ids.iter().copied());
            let mut rows = st.query(rusqlite::params_from_iter(args))?;
            while let Some(r) = rows.next()? {
                let id: String = r.get(0)?;
                let data: String = r.get(1)?;
                let mut info: Map<String, Value> =
                    serde_json::from_str(&data).with_context(|| {
                        self.err(&format!("message {id}: data is not a JSON object"))
                    })?;
                info.insert("id".into(), json!(id));
                info.insert("sessionID".into(), json!(session));
                msgs.push((id, info, Vec::new()));
            }
        }
        let index: std::collections::HashMap<String, usize> = msgs
            .iter()
            .enumerate()
            .map(|(i, m)| (m.0.clone(), i))
            .collect();
        {
            let mut st = tx.prepare(&part_sql)?;
            let mut rows = match only {
                None => st.query([session])?,
                Some(_) => st.query(rusqlite::params_from_iter(ids.iter()))?,
            };
            while let Some(r) = rows.next()? {
                let id: String = r.get(0)?;
                let mid: String = r.get(1)?;
                let data: String = r.get(2)?;
                let mut part: Map<String, Value> = serde_json::from_str(&data)
                    .with_context(|| self.err(&format!("part {id}: data is not a JSON object")))?;
                part.insert("id".into(), json!(id));
                part.insert("sessionID".into(), json!(session));
                part.insert("messageID".into(), json!(mid));
                if let Some(&i) = index.get(&mid) {
                    msgs[i].2.push(Value::Object(part));
                }
            }
        }
        Ok(Value::Array(
            msgs.into_iter()
                .map(|(_, info, parts)| json!({"info": info, "parts": parts}))
                .collect(),
        ))
    }

    /// Open todos (`pending`/`in_progress`) of a session.
    pub fn open_todos(&self, session: &str) -> Result<i64> {
        Ok(self
            .conn
            .query_row(
                "SELECT count(*) FROM todo WHERE session_id = ?1 AND status IN ('pending','in_progress')",
                [session],
                |r| r.get(0),
            )
            .optional()?
            .unwrap_or(0))
    }
}

/// A database failure as a source reports it.
fn broken(e: anyhow::Error) -> Fault {
    Fault::Broken(format!("{e:#}"))
}

impl Db {
    /// `PRAGMA data_version`: changes when another connection commits.
    fn data_version(&self) -> Result<i64> {
        Ok(self
            .conn
            .query_row("PRAGMA data_version", [], |r| r.get(0))?)
    }

    /// Where "what changed" stands now, without listing anything: the start of a follow.
    pub fn cursor(&self) -> Result<Cursor> {
        let mut c = Cursor {
            data_version: self.data_version()?,
            ..Cursor::default()
        };
        if self.has_table("event")? {
            (c.event, c.event_row) =
                self.conn
                    .query_row("SELECT max(id), max(rowid) FROM event", [], |r| {
                        Ok((r.get(0)?, r.get(1)?))
                    })?;
        } else {
            c.updated = self
                .conn
                .query_row("SELECT max(time_updated) FROM session", [], |r| {
                    r.get::<_, Option<i64>>(0)
                })?
                .unwrap_or(i64::MIN)
                .min(crate::cli::now_ms());
        }
        Ok(c)
    }

    fn has_table(&self, table: &str) -> Result<bool> {
        Ok(self.conn.query_row(
            "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?1",
            [table],
            |r| r.get::<_, i64>(0),
        )? > 0)
    }

    /// [`Source::changes`]: nothing to read while `data_version` holds; else the sessions of
    /// opencode's event log past the cursor's event (the log's primary key, so a range read),
    /// or, in a database without the log, the sessions whose row was updated since.
    fn changes_since(&self, since: Option<&Cursor>) -> Result<Changes> {
        let data_version = self.data_version()?;
        if let Some(c) = since.filter(|c| c.data_version == data_version) {
            return Ok(Changes {
                sessions: Vec::new(),
                asking: Vec::new(),
                cursor: c.clone(),
            });
        }
        fn ids(
            tx: &rusqlite::Transaction,
            sql: &str,
            args: impl rusqlite::Params,
        ) -> Result<Vec<String>> {
            let mut st = tx.prepare(sql)?;
            let rows = st.query_map(args, |r| r.get(0))?;
            Ok(rows.collect::<rusqlite::Result<Vec<String>>>()?)
        }
        let tx = self.conn.unchecked_transaction()?;
        let mut cursor = Cursor {
            data_version,
            ..Cursor::default()
        };
        let mut asking = Vec::new();
        // opencode's event ids ascend with its wall clock: after a step back, its new events'
        // ids sort below the newest seen. Their row ids ascend as they are written, whatever
        // the clock; the ids still catch what a row id reused after a delete would hide.
        let sessions = if self.has_table("event")? {
            let row = since.and_then(|c| c.event_row).unwrap_or(0);
            let after = since.and_then(|c| c.event.clone()).unwrap_or_default();
            (cursor.event, cursor.event_row) =
                tx.query_row("SELECT max(id), max(rowid) FROM event", [], |r| {
                    Ok((r.get(0)?, r.get(1)?))
                })?;
            cursor.event = cursor.event.or(since.and_then(|c| c.event.clone()));
            cursor.event_row = cursor.event_row.or(since.and_then(|c| c.event_row));
            // each session's latest part update in the range, when it is a question call, or a
            // bash call with no output yet (its command not started: maybe its permission asked)
            asking = ids(
                &tx,
                "SELECT aggregate_id FROM event e WHERE (e.rowid > ?1 OR e.id > ?2)
                   AND e.rowid = (SELECT max(rowid) FROM event f
                     WHERE f.aggregate_id = e.aggregate_id AND (f.rowid > ?1 OR f.id > ?2)
                       AND f.type LIKE 'message.part.updated%')
                   AND json_valid(data)
                   AND json_extract(data, '$.part.type') = 'tool'
                   AND json_extract(data, '$.part.state.status') = 'running'
                   AND (json_extract(data, '$.part.tool') = 'question'
                        OR (json_extract(data, '$.part.tool') = 'bash'
                            AND json_extract(data, '$.part.state.metadata') IS NULL))
                 ORDER BY aggregate_id",
                (row, &after),
            )?;
            ids(
                &tx,
                "SELECT DISTINCT aggregate_id FROM event WHERE rowid > ?1 OR id > ?2
                 ORDER BY aggregate_id",
                (row, &after),
            )?
        } else {
            let after = since.map_or(i64::MIN, |c| c.updated);
            let newest: Option<i64> =
                tx.query_row("SELECT max(time_updated) FROM session", [], |r| r.get(0))?;
            // no further than now: after a step back, opencode's next rows are stamped below
            // the newest seen, and would be missed until the clock caught up with it
            cursor.updated = newest.unwrap_or(after).max(after).min(crate::cli::now_ms());
            ids(
                &tx,
                "SELECT id FROM session WHERE time_updated > ?1 ORDER BY id",
                [after],
            )?
        };
        tx.finish()?;
        Ok(Changes {
            sessions,
            asking,
            cursor,
        })
    }
}

impl SourceKind for Db {
    type Name = PathBuf;
    const PHRASE: &'static str = "a database";
    const READER: &'static str = "database";
    fn claim(wire: &str) -> Option<PathBuf> {
        Some(PathBuf::from(wire))
    }
    fn write(path: &PathBuf, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", path.display())
    }
}

impl Source for Db {
    fn id(&self) -> SourceId {
        SourceId::Database(self.path.clone())
    }

    fn index(&self) -> Result<Vec<IndexEntry>, Fault> {
        Ok(self
            .index_rows()
            .map_err(broken)?
            .into_iter()
            .map(|(id, parent, updated)| IndexEntry {
                id,
                parent,
                updated: Some(updated),
                active: false,
            })
            .collect())
    }

    fn sessions(&self, ids: &[&str]) -> Result<Vec<Session>, Fault> {
        let name = self.path.display().to_string();
        self.sessions_by_id(ids)
            .map_err(broken)?
            .iter()
            .map(|v| convert::session_of(v, None, &name).map_err(Fault::Broken))
            .collect()
    }

    fn session(&self, id: &str) -> Result<Option<Value>, Fault> {
        self.session_row(id).map_err(broken)
    }

    fn messages(&self, id: &str) -> Result<Value, Fault> {
        self.message_rows(id).map_err(broken)
    }

    fn messages_since(&self, id: &str, since: i64) -> Result<(Value, Option<i64>), Fault> {
        self.message_rows_since(id, since).map_err(broken)
    }

    fn changes(&self, since: Option<&Cursor>) -> Result<Option<Changes>, Fault> {
        self.changes_since(since).map(Some).map_err(broken)
    }

    fn is_current(&self) -> bool {
        Db::is_current(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCHEMA: &str = "
        CREATE TABLE session (id TEXT PRIMARY KEY, parent_id TEXT, agent TEXT, title TEXT,
            directory TEXT, model TEXT, version TEXT, time_created INTEGER, time_updated INTEGER);
        CREATE TABLE message (id TEXT PRIMARY KEY, session_id TEXT, time_created INTEGER, data TEXT);
        CREATE TABLE part (id TEXT PRIMARY KEY, message_id TEXT, session_id TEXT, data TEXT);";

    #[test]
    fn a_database_opencode_is_making_is_no_history_yet_and_blind_past_its_grace() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("opencode.db");
        // opencode's first start: the file, then its tables one by one
        let w = Connection::open(&path).unwrap();
        w.execute_batch("CREATE TABLE project (id TEXT PRIMARY KEY);")
            .unwrap();
        let now = std::time::SystemTime::now();
        assert!(matches!(Db::open_at(&path, now), Ok(None)));
        assert_eq!(
            Db::open(&path).err().map(|e| e.to_string()),
            Some(format!(
                "opencode database {}: opencode is making it (no tables yet)",
                path.display()
            ))
        );
        // still without them half a minute on: not opencode's, or not one this reader knows
        assert_eq!(
            Db::open_at(&path, now + MAKING).err().as_deref(),
            Some("not an opencode database of a known schema: no table session")
        );
        // any other fault is blind at once, however new the file
        let junk = dir.path().join("junk.db");
        std::fs::write(&junk, vec![7u8; 8192]).unwrap();
        assert_eq!(
            Db::open_at(&junk, now).err().as_deref(),
            Some("cannot read: file is not a database")
        );
    }

    /// A database in a temp dir, a writer on it (as opencode would be), and the reader.
    fn fixture(with_log: bool) -> (tempfile::TempDir, Connection, Db) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("opencode.db");
        let w = Connection::open(&path).unwrap();
        w.pragma_update(None, "journal_mode", "wal").unwrap();
        w.execute_batch(SCHEMA).unwrap();
        if with_log {
            w.execute_batch(
                "CREATE TABLE event (id TEXT PRIMARY KEY, aggregate_id TEXT NOT NULL,
                    seq INTEGER NOT NULL, type TEXT NOT NULL, data TEXT NOT NULL);",
            )
            .unwrap();
        }
        for (id, t) in [("ses_a", 10), ("ses_b", 20)] {
            w.execute(
                "INSERT INTO session (id, time_created, time_updated) VALUES (?1, ?2, ?2)",
                rusqlite::params![id, t],
            )
            .unwrap();
            if with_log {
                w.execute(
                    "INSERT INTO event VALUES (?1, ?2, 0, 'session.created.1', '{}')",
                    rusqlite::params![format!("evt_{t:04}"), id],
                )
                .unwrap();
            }
        }
        let db = Db::open(&path).unwrap();
        (dir, w, db)
    }

    /// Issue 42: opencode's event ids ascend with its wall clock; after a step back of it, its
    /// new events' ids sort below the newest seen, and were missed until the clock caught up.
    #[test]
    fn a_step_back_of_opencodes_clock_hides_no_change() {
        let (_dir, w, db) = fixture(true);
        let first = db.changes(None).unwrap().unwrap();
        w.execute(
            "INSERT INTO event VALUES ('evt_0005', 'ses_b', 1, 'message.part.updated.1', '{}')",
            [],
        )
        .unwrap();
        let next = db.changes(Some(&first.cursor)).unwrap().unwrap();
        assert_eq!(next.sessions, ["ses_b"]);
        assert_eq!(next.cursor.event.as_deref(), Some("evt_0020"));
        let again = db.changes(Some(&next.cursor)).unwrap().unwrap();
        assert!(again.sessions.is_empty());
        // without an event log, the newest `time_updated` is the cursor, no later than now
        let (_dir, w, db) = fixture(false);
        let now = crate::cli::now_ms();
        w.execute(
            "UPDATE session SET time_updated = ?1 WHERE id = 'ses_a'",
            [now + 3_600_000],
        )
        .unwrap();
        let first = db.changes(None).unwrap().unwrap();
        assert!(first.cursor.updated <= crate::cli::now_ms());
        w.execute(
            "UPDATE session SET time_updated = ?1 WHERE id = 'ses_b'",
            [crate::cli::now_ms() + 1000],
        )
        .unwrap();
        let next = db.changes(Some(&first.cursor)).unwrap().unwrap();
        assert!(next.sessions.contains(&"ses_b".to_string()), "{next:?}");
    }

    #[test]
    fn changes_follow_the_event_log_and_cost_nothing_while_data_version_holds() {
        let (_dir, w, db) = fixture(true);
        let first = db.changes(None).unwrap().unwrap();
        assert_eq!(first.sessions, ["ses_a", "ses_b"]);
        assert_eq!(first.cursor.event.as_deref(), Some("evt_0020"));
        // nobody wrote: nothing changed
        let same = db.changes(Some(&first.cursor)).unwrap().unwrap();
        assert_eq!(
            same,
            Changes {
                sessions: vec![],
                asking: vec![],
                cursor: first.cursor.clone()
            }
        );
        // opencode records a part update of ses_a
        w.execute(
            "INSERT INTO event VALUES ('evt_0030', 'ses_a', 1, 'message.part.updated.1', '{}')",
            [],
        )
        .unwrap();
        let next = db.changes(Some(&first.cursor)).unwrap().unwrap();
        assert_eq!(next.sessions, ["ses_a"]);
        assert!(next.asking.is_empty());
        assert_eq!(next.cursor.event.as_deref(), Some("evt_0030"));
        assert_ne!(next.cursor.data_version, first.cursor.data_version);
        // a bash call running with no output yet (opencode 1.18.33's shape, its permission
        // maybe asked) is the session's latest part update: asking; once its output is
        // recorded, no longer
        let bash = |id: &str, metadata: &str| {
            w.execute(
                &format!(
                    "INSERT INTO event VALUES ('{id}', 'ses_a', 2, 'message.part.updated.1',
                     '{{\"sessionID\":\"ses_a\",\"part\":{{\"type\":\"tool\",\"tool\":\"bash\",
                     \"state\":{{\"status\":\"running\",{metadata}\"input\":{{\"command\":\"ls\"}}}}}}}}')"
                ),
                [],
            )
            .unwrap();
        };
        bash("evt_0031", "");
        let asked = db.changes(Some(&next.cursor)).unwrap().unwrap();
        assert_eq!(asked.asking, ["ses_a"]);
        bash("evt_0032", "\"metadata\":{\"output\":\"\"},");
        let ran = db.changes(Some(&asked.cursor)).unwrap().unwrap();
        assert_eq!(ran.sessions, ["ses_a"]);
        assert!(ran.asking.is_empty());
        let next = ran;
        // a commit that adds no event moves data_version only
        w.execute("UPDATE session SET title = 't' WHERE id = 'ses_b'", [])
            .unwrap();
        let quiet = db.changes(Some(&next.cursor)).unwrap().unwrap();
        assert!(quiet.sessions.is_empty());
        assert_eq!(quiet.cursor.event.as_deref(), Some("evt_0032"));
    }

    #[test]
    fn without_an_event_log_changes_are_the_sessions_updated_since() {
        let (_dir, w, db) = fixture(false);
        let first = db.changes(None).unwrap().unwrap();
        assert_eq!(first.sessions, ["ses_a", "ses_b"]);
        assert_eq!(
            (first.cursor.event.clone(), first.cursor.updated),
            (None, 20)
        );
        w.execute(
            "UPDATE session SET time_updated = 25 WHERE id = 'ses_a'",
            [],
        )
        .unwrap();
        let next = db.changes(Some(&first.cursor)).unwrap().unwrap();
        assert_eq!(
            (next.sessions, next.cursor.updated),
            (vec!["ses_a".to_string()], 25)
        );
    }

    #[test]
    fn messages_since_are_those_whose_row_or_a_part_changed_each_whole_and_a_replaced_file_is_not_current(
    ) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("opencode.db");
        let w = Connection::open(&path).unwrap();
        w.pragma_update(None, "journal_mode", "wal").unwrap();
        w.execute_batch(
            "CREATE TABLE session (id TEXT PRIMARY KEY, parent_id TEXT, agent TEXT, title TEXT,
                directory TEXT, model TEXT, version TEXT, time_created INTEGER, time_updated INTEGER);
             CREATE TABLE message (id TEXT PRIMARY KEY, session_id TEXT, time_created INTEGER,
                time_updated INTEGER, data TEXT);
             CREATE TABLE part (id TEXT PRIMARY KEY, message_id TEXT, session_id TEXT,
                time_created INTEGER, time_updated INTEGER, data TEXT);
             INSERT INTO message VALUES ('msg_1', 'ses_a', 10, 10, '{\"role\":\"user\"}');
             INSERT INTO message VALUES ('msg_2', 'ses_a', 20, 20, '{\"role\":\"assistant\"}');
             INSERT INTO message VALUES ('msg_3', 'ses_a', 30, 30, '{\"role\":\"assistant\"}');
             INSERT INTO part VALUES ('prt_1', 'msg_2', 'ses_a', 21, 21, '{\"type\":\"tool\"}');
             INSERT INTO part VALUES ('prt_2', 'msg_2', 'ses_a', 22, 45, '{\"type\":\"tool\"}');
             INSERT INTO part VALUES ('prt_3', 'msg_3', 'ses_a', 31, 31, '{\"type\":\"text\"}');
             INSERT INTO part VALUES ('prt_9', 'msg_9', 'ses_b', 50, 50, '{\"type\":\"text\"}');",
        )
        .unwrap();
        let db = Db::open(&path).unwrap();
        let ids = |v: &Value| -> Vec<(String, usize)> {
            v.as_array()
                .unwrap()
                .iter()
                .map(|m| {
                    (
                        m["info"]["id"].as_str().unwrap().to_string(),
                        m["parts"].as_array().unwrap().len(),
                    )
                })
                .collect()
        };
        // msg_2 through its part updated at 45 (with its other part too), msg_3 by its row
        let (msgs, newest) = db.message_rows_since("ses_a", 30).unwrap();
        assert_eq!(ids(&msgs), [("msg_2".into(), 2), ("msg_3".into(), 1)]);
        assert_eq!(newest, Some(45));
        // at the newest update itself: read again (equal milliseconds are not lost)
        let (msgs, newest) = db.message_rows_since("ses_a", 45).unwrap();
        assert_eq!((ids(&msgs), newest), (vec![("msg_2".into(), 2)], Some(45)));
        let (msgs, newest) = db.message_rows_since("ses_a", 46).unwrap();
        assert_eq!((ids(&msgs), newest), (vec![], None));
        // from the start: the whole session, as message_rows reads it
        let (all, _) = db.message_rows_since("ses_a", i64::MIN).unwrap();
        assert_eq!(all, db.message_rows("ses_a").unwrap());

        assert!(db.is_current());
        drop(w);
        std::fs::remove_file(&path).unwrap();
        assert!(!db.is_current());
        let again = Connection::open(&path).unwrap();
        again.execute_batch("CREATE TABLE t (x)").unwrap();
        assert!(!db.is_current());
    }

    #[test]
    fn without_time_updated_columns_messages_since_gives_them_all() {
        let (_dir, w, db) = fixture(false);
        w.execute(
            "INSERT INTO message VALUES ('msg_1', 'ses_a', 11, '{\"role\":\"user\"}')",
            [],
        )
        .unwrap();
        let (msgs, newest) = db.message_rows_since("ses_a", i64::MAX).unwrap();
        assert_eq!((msgs.as_array().unwrap().len(), newest), (1, None));
    }

    #[test]
    fn the_database_lists_and_reads_through_the_source_trait() {
        let (_dir, w, db) = fixture(true);
        w.execute(
            "INSERT INTO message VALUES ('msg_1', 'ses_b', 21, '{\"role\":\"user\"}')",
            [],
        )
        .unwrap();
        let src: &dyn Source = &db;
        let index = src.index().unwrap();
        assert_eq!(
            index
                .iter()
                .map(|e| (e.id.as_str(), e.updated))
                .collect::<Vec<_>>(),
            [("ses_a", Some(10)), ("ses_b", Some(20))]
        );
        let listed = src.sessions(&["ses_b"]).unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].source.as_deref(), Some(db.path.to_str().unwrap()));
        assert_eq!(src.messages("ses_b").unwrap()[0]["info"]["id"], "msg_1");
        assert_eq!(src.session("ses_x").unwrap(), None);
        assert_eq!(
            src.nudge("ses_b", "hi").unwrap_err(),
            "the session was read from a database: no server to send to"
        );
    }
}
