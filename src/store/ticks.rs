//! The `ticks` table: one row per tick (when, how long, how many sessions it judged and
//! flagged, its outcome, the sources it read and why it was blind).

use super::rows::Rows;
use super::Store;
use crate::record::{TickMode, TickOutcome};
use anyhow::Result;
use rusqlite::{params, Transaction};

/// One tick as recorded.
#[derive(Debug, Clone, PartialEq)]
pub struct TickRow {
    pub t: i64,
    pub duration_ms: i64,
    pub sessions: i64,
    pub flagged: i64,
    pub outcome: TickOutcome,
    /// The sources read, as a JSON array of their strings.
    pub sources: String,
    pub blind: Option<String>,
    pub mode: TickMode,
    /// A follow mode's partial tick is false.
    pub full: bool,
}

/// Records `tick`; returns its id.
pub fn insert(tx: &Transaction<'_>, tick: &TickRow) -> Result<i64> {
    tx.execute(
        "INSERT INTO ticks (t, duration_ms, sessions, flagged, outcome, sources, blind, mode, full)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
        params![
            tick.t,
            tick.duration_ms,
            tick.sessions,
            tick.flagged,
            tick.outcome.as_str(),
            tick.sources,
            tick.blind,
            tick.mode.as_str(),
            tick.full
        ],
    )?;
    Ok(tx.last_insert_rowid())
}

/// `wd-store status`: the last tick, its verdicts and the open alerts (one row, nulls before
/// the first tick); the caller adds the channels.
pub fn status(store: &Store) -> Result<Rows> {
    Rows::query(
        store,
        "status",
        "SELECT t.t AS last_tick, t.outcome, t.sessions, t.flagged,
                (SELECT count(*) FROM verdicts v WHERE v.tick = t.id) AS verdicts,
                (SELECT count(*) FROM alerts WHERE state = 'open') AS open_alerts,
                t.duration_ms, t.blind
         FROM (SELECT 0) LEFT JOIN ticks t ON t.id = (SELECT max(id) FROM ticks)",
        &[],
    )
}

/// Deletes the ticks before `before`; returns how many.
pub fn prune(tx: &Transaction<'_>, before: i64) -> Result<usize> {
    Ok(tx.execute("DELETE FROM ticks WHERE t < ?1", params![before])?)
}

impl Store {
    /// Time of the last tick as of `now`: the latest tick not in the future. Ticks recorded with a
    /// clock that ran ahead are passed over (the next window starts at the last honest tick, so
    /// nothing is skipped); when every tick is in the future, `now`, said on stderr.
    pub fn last_tick(&self, now: i64) -> Result<Option<i64>> {
        let (past, future): (Option<i64>, Option<i64>) = self.conn.query_row(
            "SELECT (SELECT max(t) FROM ticks WHERE t <= ?1), (SELECT max(t) FROM ticks WHERE t > ?1)",
            [now],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        if let Some(f) = future {
            eprintln!(
                "{}: the last tick is recorded at {}, in the future (was the clock ahead?); using {}",
                crate::cli::program(),
                crate::cli::iso_ms(f),
                if past.is_some() { "the last tick before now" } else { "now" }
            );
        }
        Ok(past.or(future.map(|_| now)))
    }
}
