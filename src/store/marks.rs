//! The calls the page draws: `call_marks` holds, for each session flagged at a tick, its latest
//! calls reduced to what a picture needs (position, time, tool, landed, failed, and the call's
//! target as the detector names it), never arguments beyond that target, output or message text.
//!
//! How they get there: progress-detect consumes the call stream and a verdict carries only counts
//! and signals, while a page drawn later (by the tick, or by hand with opencode gone) must still
//! show what the session did. So `wd-store calls`, a stage of the tick just before
//! progress-detect, passes the stream on and stages the latest [`KEEP`] calls of every session in
//! it in `tick_calls`; `wd-store tick`, in the transaction that records the verdicts, moves those
//! of its flagged sessions to `call_marks` (replacing what was kept for them before) and empties
//! `tick_calls`. `prune` drops the marks of sessions whose verdicts it drops.

use anyhow::Result;
use rusqlite::{params, Connection, Transaction};
use std::collections::HashSet;

/// Calls kept per flagged session (the most recent ones).
pub const KEEP: usize = 240;

/// One drawn call.
#[derive(Debug, Clone, PartialEq)]
pub struct CallMark {
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

/// Replaces the staged calls with `sessions`' (each session's latest calls, in order).
pub fn stage(tx: &Transaction<'_>, sessions: &[(String, Vec<CallMark>)]) -> Result<()> {
    tx.execute("DELETE FROM tick_calls", [])?;
    insert(tx, sessions)
}

/// Replaces the staged calls of `sessions` alone (the follow mode stages each batch's sessions,
/// leaving those of other sessions for the tick that has yet to take them).
pub fn stage_sessions(tx: &Transaction<'_>, sessions: &[(String, Vec<CallMark>)]) -> Result<()> {
    let mut del = tx.prepare_cached("DELETE FROM tick_calls WHERE session = ?1")?;
    for (session, _) in sessions {
        del.execute(params![session])?;
    }
    insert(tx, sessions)
}

fn insert(tx: &Transaction<'_>, sessions: &[(String, Vec<CallMark>)]) -> Result<()> {
    let mut ins = tx.prepare_cached(
        "INSERT OR REPLACE INTO tick_calls (session, seq, t, tool, landed, failed, target, target_key)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    )?;
    for (session, marks) in sessions {
        for m in marks {
            ins.execute(params![
                session, m.seq, m.t, m.tool, m.landed, m.failed, m.target, m.key
            ])?;
        }
    }
    Ok(())
}

/// Keeps the staged calls of the `flagged` sessions that have any as their marks, then empties
/// the stage. Returns how many sessions got marks.
pub fn keep_flagged(tx: &Transaction<'_>, flagged: &HashSet<String>) -> Result<usize> {
    let staged: Vec<String> = tx
        .prepare("SELECT DISTINCT session FROM tick_calls")?
        .query_map([], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    let mut del = tx.prepare_cached("DELETE FROM call_marks WHERE session = ?1")?;
    let mut copy = tx.prepare_cached(
        "INSERT OR REPLACE INTO call_marks (session, seq, t, tool, landed, failed, target, target_key)
         SELECT session, seq, t, tool, landed, failed, target, target_key FROM tick_calls WHERE session = ?1",
    )?;
    let mut n = 0;
    for s in staged.iter().filter(|s| flagged.contains(*s)) {
        del.execute(params![s])?;
        copy.execute(params![s])?;
        n += 1;
    }
    tx.execute("DELETE FROM tick_calls", [])?;
    Ok(n)
}

/// The stored calls of one session, in order.
pub fn load(conn: &Connection, session: &str) -> Result<Vec<CallMark>> {
    let mut st = conn.prepare_cached(
        "SELECT seq, t, tool, landed, failed, target, target_key FROM call_marks WHERE session = ?1 ORDER BY seq",
    )?;
    let rows = st.query_map(params![session], |r| {
        Ok(CallMark {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Store;

    fn m(seq: i64, target: &str) -> CallMark {
        CallMark {
            seq,
            t: 1000 + seq,
            tool: "read".into(),
            landed: false,
            failed: seq == 1,
            target: target.into(),
            key: format!("{seq:016x}"),
        }
    }

    /// The tick keeps the staged calls of its flagged sessions only, replaces what it kept for
    /// them before, leaves the others' earlier marks alone, and empties the stage.
    #[test]
    fn a_tick_keeps_the_staged_calls_of_its_flagged_sessions_and_empties_the_stage() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("w.db")).unwrap();
        let tx = store.write().unwrap();
        stage(
            &tx,
            &[
                ("a".into(), vec![m(0, "old")]),
                ("c".into(), vec![m(0, "c0")]),
            ],
        )
        .unwrap();
        let flagged: HashSet<String> = ["a".to_string(), "c".to_string()].into();
        assert_eq!(keep_flagged(&tx, &flagged).unwrap(), 2);
        stage(
            &tx,
            &[
                ("a".into(), vec![m(3, "a3"), m(4, "a4")]),
                ("b".into(), vec![m(0, "b0")]),
            ],
        )
        .unwrap();
        let flagged: HashSet<String> = ["a".to_string(), "z".to_string()].into();
        assert_eq!(keep_flagged(&tx, &flagged).unwrap(), 1);
        tx.commit().unwrap();
        assert_eq!(load(&store.conn, "a").unwrap(), [m(3, "a3"), m(4, "a4")]);
        assert_eq!(load(&store.conn, "b").unwrap(), []);
        assert_eq!(load(&store.conn, "c").unwrap(), [m(0, "c0")]);
        let staged: i64 = store
            .conn
            .query_row("SELECT count(*) FROM tick_calls", [], |r| r.get(0))
            .unwrap();
        assert_eq!(staged, 0);
    }
}
