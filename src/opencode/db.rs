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

/// The default database path: `$XDG_DATA_HOME/opencode/opencode.db`.
pub fn default_path() -> PathBuf {
    crate::config::xdg_dir("XDG_DATA_HOME", ".local/share").join("opencode/opencode.db")
}

impl Db {
    pub fn open(path: &Path) -> Result<Db> {
        let shown = path.display();
        if !path.exists() {
            bail!("opencode database {shown}: no such file");
        }
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .with_context(|| format!("opencode database {shown}: cannot open read-only"))?;
        conn.busy_timeout(Duration::from_secs(2))?;
        conn.pragma_update(None, "query_only", true)?;
        let tables: i64 = conn
            .query_row(
                "SELECT count(*) FROM sqlite_master WHERE type='table' AND name IN ('session','message','part')",
                [],
                |r| r.get(0),
            )
            .with_context(|| format!("opencode database {shown}: cannot read (locked or not a database?)"))?;
        if tables != 3 {
            bail!("opencode database {shown}: not an opencode database (no session/message/part tables)");
        }
        Ok(Db {
            conn,
            path: path.to_path_buf(),
        })
    }

    fn err(&self, what: &str) -> String {
        format!("opencode database {}: {what}", self.path.display())
    }

    /// Every session, as API `Session` objects.
    pub fn sessions(&self) -> Result<Vec<Value>> {
        let mut st = self
            .conn
            .prepare(
                "SELECT id, parent_id, agent, title, directory, model, time_created, time_updated, version, slug
                 FROM session ORDER BY time_updated DESC",
            )
            .with_context(|| self.err("cannot list sessions"))?;
        let rows = st
            .query_map([], |r| {
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

    /// One session as an API `Session` object, if it exists.
    pub fn session(&self, id: &str) -> Result<Option<Value>> {
        Ok(self.sessions()?.into_iter().find(|s| s["id"] == id))
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
