//! The calls the page draws: for each session flagged at a tick, its latest calls reduced to
//! what a picture needs (position, time, tool, landed, failed, and the call's target as the
//! detector names it), never arguments beyond that target, output or message text.
//!
//! Why here: progress-detect consumes the call stream and a verdict carries only counts and
//! signals, while a page drawn later (by the tick, or by hand with opencode gone) must still
//! show what the session did. So the tick tees oc-calls' output to a file that `wd-store tick
//! --calls FILE` reads after the verdicts: it keeps the last [`KEEP`] calls of each flagged
//! session, replacing what it kept for that session before. `prune` drops the calls of sessions
//! whose verdicts it drops.

use crate::detect::target;
use crate::record::{kind_of, Call, Session};
use anyhow::{Context, Result};
use rusqlite::{params, Connection};
use std::collections::{HashMap, HashSet};
use std::io::BufRead;
use std::path::Path;

/// Calls kept per flagged session (the most recent ones).
pub const KEEP: usize = 240;

/// One drawn call.
#[derive(Debug, Clone, PartialEq)]
pub struct Mark {
    /// Position among the session's calls, from 0.
    pub seq: i64,
    pub t: i64,
    pub tool: String,
    pub landed: bool,
    pub failed: bool,
    /// The detector's description of the call's target (`read docs/spec.md`).
    pub target: String,
    /// The detector's target hash, hex: calls on the same target share it.
    pub key: String,
}

/// Reads the tick's call stream from `path` and stores the latest calls of `flagged` sessions.
/// Returns how many sessions got marks. Unparseable lines are skipped: the picture is an aid,
/// and the verdicts of the tick were already judged on the same stream.
pub fn record(tx: &Connection, path: &Path, flagged: &HashSet<String>) -> Result<usize> {
    if flagged.is_empty() {
        return Ok(0);
    }
    let f = std::fs::File::open(path)
        .with_context(|| format!("calls of the tick: cannot open {}", path.display()))?;
    let mut dirs: HashMap<String, Option<String>> = HashMap::new();
    let mut calls: HashMap<String, Vec<Call>> = HashMap::new();
    for line in std::io::BufReader::new(f).lines() {
        let Ok(line) = line else { break };
        match kind_of(&line).ok().flatten().as_deref() {
            Some("session") => {
                if let Ok(s) = serde_json::from_str::<Session>(&line) {
                    if flagged.contains(&s.id) {
                        dirs.insert(s.id.clone(), s.directory.clone());
                    }
                }
            }
            Some("call") => {
                if let Ok(c) = serde_json::from_str::<Call>(&line) {
                    if flagged.contains(&c.session) {
                        calls.entry(c.session.clone()).or_default().push(c);
                    }
                }
            }
            _ => {}
        }
    }
    let mut del = tx.prepare_cached("DELETE FROM call_marks WHERE session = ?1")?;
    let mut ins = tx.prepare_cached(
        "INSERT OR REPLACE INTO call_marks (session, seq, t, tool, landed, failed, target, target_key)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    )?;
    let mut n = 0;
    for (session, mut cs) in calls {
        // a call re-read from a second source is the same call
        cs.sort_by(|a, b| (a.t, &a.id).cmp(&(b.t, &b.id)));
        cs.dedup_by(|a, b| a.id == b.id);
        let dir = dirs.get(&session).cloned().flatten();
        del.execute(params![session])?;
        let skip = cs.len().saturating_sub(KEEP);
        for (i, c) in cs.iter().enumerate().skip(skip) {
            let keys = target::keys(&c.tool, &c.args);
            ins.execute(params![
                session,
                i as i64,
                c.t,
                c.tool,
                c.landed,
                c.status == "error",
                target::describe(&c.tool, &c.args, dir.as_deref()),
                format!("{:016x}", keys.target),
            ])?;
        }
        n += 1;
    }
    Ok(n)
}

/// The stored calls of one session, in order.
pub fn load(conn: &Connection, session: &str) -> Result<Vec<Mark>> {
    let mut st = conn.prepare_cached(
        "SELECT seq, t, tool, landed, failed, target, target_key FROM call_marks WHERE session = ?1 ORDER BY seq",
    )?;
    let rows = st.query_map(params![session], |r| {
        Ok(Mark {
            seq: r.get(0)?,
            t: r.get(1)?,
            tool: r.get(2)?,
            landed: r.get(3)?,
            failed: r.get(4)?,
            target: r.get(5)?,
            key: r.get(6)?,
        })
    })?;
    Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
}
