//! Reads opencode's own SQLite database (`$XDG_DATA_HOME/opencode/opencode.db`), strictly
//! read-only: opened with `SQLITE_OPEN_READ_ONLY` and `query_only`, short read transactions
//! that never take a write lock, so opencode's own writes (WAL mode) are never blocked.
//!
//! Rows are rebuilt into the same JSON shapes the HTTP API serves (a part's `data` plus its
//! `id`, `sessionID`, `messageID` columns), so one converter serves both sources.

use anyhow::{bail, Context, Result};
use rusqlite::{Connection, OpenFlags, OptionalExtension};
use serde_json::{json, Map, Value};
use std::path::{Path, PathBuf};
use std::time::Duration;

pub struct Db {
    conn: Connection,
    pub path: PathBuf,
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
            Ok(None) => bail!("opencode database {}: no such file", path.display()),
            Err(why) => bail!("opencode database {}: {why}", path.display()),
        }
    }

    /// Opens a database if the file exists (`None`: no opencode history yet). Errors say why
    /// it cannot be read: locked, not a database, or a schema this reader does not know.
    pub fn open_if_there(path: &Path) -> std::result::Result<Option<Db>, String> {
        if !path.exists() {
            return Ok(None);
        }
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|e| format!("cannot open read-only: {e}"))?;
        conn.busy_timeout(Duration::from_secs(2))
            .map_err(|e| e.to_string())?;
        conn.pragma_update(None, "query_only", true)
            .map_err(|e| e.to_string())?;
        for (table, cols) in NEEDED {
            let mut st = conn
                .prepare(&format!("PRAGMA table_info({table})"))
                .map_err(|e| format!("cannot read: {e}"))?;
            let have: Vec<String> = st
                .query_map([], |r| r.get::<_, String>(1))
                .and_then(|rows| rows.collect())
                .map_err(|e| format!("cannot read: {e}"))?;
            if have.is_empty() {
                return Err(format!(
                    "not an opencode database of a known schema: no table {table}"
                ));
            }
            if let Some(c) = cols.iter().find(|c| !have.iter().any(|h| h == *c)) {
                return Err(format!(
                    "not an opencode database of a known schema (newer opencode?): table {table} has no column {c}"
                ));
            }
        }
        Ok(Some(Db {
            conn,
            path: path.to_path_buf(),
        }))
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
    pub fn index(&self) -> Result<Vec<Row>> {
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

    /// Every session, as API `Session` objects, newest update first.
    pub fn sessions(&self) -> Result<Vec<Value>> {
        self.query_sessions("1", &[])
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
    pub fn session(&self, id: &str) -> Result<Option<Value>> {
        Ok(self.sessions_by_id(&[id])?.into_iter().next())
    }

    /// A session's messages with their parts, `[{info, parts}]`, in order, read in one
    /// transaction so the two queries see the same snapshot.
    pub fn messages(&self, session: &str) -> Result<Value> {
        let tx = self
            .conn
            .unchecked_transaction()
            .with_context(|| self.err("cannot start a read"))?;
        let mut msgs: Vec<(String, Map<String, Value>, Vec<Value>)> = Vec::new();
        {
            let mut st = tx.prepare(
                "SELECT id, data FROM message WHERE session_id = ?1 ORDER BY time_created, id",
            )?;
            let mut rows = st.query([session])?;
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
            let mut st = tx.prepare(
                "SELECT id, message_id, data FROM part WHERE session_id = ?1 ORDER BY message_id, id",
            )?;
            let mut rows = st.query([session])?;
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
        tx.finish()?;
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
