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

/// `wd-store status`: when the last tick was, the outcome and figures of the tick that says
/// how things stand ([`SHOWN_TICK`], recorded at `figures_at`), its verdicts and the open
/// alerts (one row, nulls before the first tick); the caller adds the channels.
pub fn status(store: &Store) -> Result<Rows> {
    Rows::query(
        store,
        "status",
        &format!(
            "SELECT l.t AS last_tick, l.mode, {STANDING_OUTCOME} AS outcome,
                {STANDING_SESSIONS} AS sessions, {STANDING_FLAGGED} AS flagged,
                (SELECT count(*) FROM verdicts v WHERE v.tick = t.id
                    OR (l.mode = 'follow' AND v.tick > t.id)) AS verdicts,
                (SELECT count(*) FROM alerts WHERE state = 'open') AS open_alerts,
                t.duration_ms, t.blind, t.t AS figures_at
             FROM (SELECT 0)
             LEFT JOIN ticks l ON l.id = (SELECT max(id) FROM ticks)
             LEFT JOIN ticks t ON t.id = ({SHOWN_TICK})"
        ),
        &[],
    )
}

/// The tick whose outcome and figures say how things stand: the last tick, except in follow
/// mode, whose partial ticks judge only what changed in their second ("ok, 0 sessions" while a
/// loop runs, when the last poll saw another session change): there, the last full tick, unless
/// a partial tick since was blind. Backwards by id: a follow service writes a full tick every
/// minute or so.
pub const SHOWN_TICK: &str =
    "SELECT CASE WHEN l.mode = 'follow' AND l.full = 0 AND l.outcome != 'blind'
         THEN coalesce((SELECT f.id FROM ticks f WHERE f.full = 1 ORDER BY f.id DESC LIMIT 1), l.id)
         ELSE l.id END
     FROM ticks l ORDER BY l.id DESC LIMIT 1";

/// How things stand, over `l` (the last tick) and `t` (the [`SHOWN_TICK`]): a timer's tick as
/// it was; in follow mode, each session judged since the last full tick by its latest verdict,
/// so a loop flagged by a partial tick since counts, and a session whose latest verdict is clean
/// does not. In both, a flagged session that stopped (idle, ended, interrupted) once its loop
/// alert resolved is no loop going on: status does not say "flagged" beside no open alert.
pub const STANDING_SESSIONS: &str =
    "CASE WHEN l.mode = 'follow' AND t.outcome NOT IN ('blind', 'no_agent')
     THEN (SELECT count(DISTINCT v.session) FROM verdicts v WHERE v.tick >= t.id)
     ELSE t.sessions END";
/// The flagged verdicts that say a loop goes on: the verdict's session has not stopped, or its
/// tree's loop alert is still open (a loop found after it stopped alerts once).
macro_rules! looping {
    () => {
        "v.flagged = 1 AND (coalesce(json_extract(v.liveness, '$.class'), '')
             NOT IN ('idle', 'ended', 'interrupted', 'needs_finalization')
         OR EXISTS (SELECT 1 FROM episodes e WHERE e.state = 'open' AND e.kind = 'loop'
             AND e.root = v.root))"
    };
}
/// The verdicts that say how things stand: a timer tick's own; in follow mode each session's
/// latest since the last full tick.
macro_rules! standing_verdicts {
    () => {
        "CASE WHEN l.mode = 'follow'
         THEN v.tick >= t.id AND v.tick = (SELECT max(w.tick) FROM verdicts w
             WHERE w.session = v.session AND w.tick >= t.id)
         ELSE v.tick = t.id END"
    };
}
pub const STANDING_FLAGGED: &str = concat!(
    "CASE WHEN t.outcome NOT IN ('blind', 'no_agent')
     THEN (SELECT count(*) FROM verdicts v WHERE ",
    standing_verdicts!(),
    " AND ",
    looping!(),
    ") ELSE t.flagged END"
);
pub const STANDING_OUTCOME: &str = concat!(
    "CASE WHEN t.outcome IN ('ok', 'flagged')
     THEN CASE WHEN EXISTS (SELECT 1 FROM verdicts v WHERE ",
    standing_verdicts!(),
    " AND ",
    looping!(),
    ") THEN 'flagged' ELSE 'ok' END
     ELSE t.outcome END"
);

/// Deletes the ticks before `before`; returns how many.
pub fn prune(tx: &Transaction<'_>, before: i64) -> Result<usize> {
    tx.execute("DELETE FROM clock_steps WHERE t < ?1", params![before])?;
    Ok(tx.execute("DELETE FROM ticks WHERE t < ?1", params![before])?)
}

/// How far back the next tick looks when every recorded tick is in the future (the clock was
/// stepped back): as far as a first tick does. Never `now`, which would list no session and
/// record an all-clear while loops run.
pub const LOOKBACK_MS: i64 = 3_600_000;

impl Store {
    /// Time of the last tick as of `now`: the latest tick not in the future. Ticks recorded with a
    /// clock that ran ahead are passed over (the next window starts at the last honest tick, so
    /// nothing is skipped); when every tick is in the future (a clock stepped back), an hour
    /// before `now` ([`LOOKBACK_MS`]), said on stderr.
    pub fn last_tick(&self, now: i64) -> Result<Option<i64>> {
        let (past, future): (Option<i64>, Option<i64>) = self.conn.query_row(
            "SELECT (SELECT max(t) FROM ticks WHERE t <= ?1), (SELECT max(t) FROM ticks WHERE t > ?1)",
            [now],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        let back = now.saturating_sub(LOOKBACK_MS);
        if let Some(f) = future {
            eprintln!(
                "{}: the last tick is recorded at {}, in the future (was the clock ahead, or stepped back?); using {}",
                crate::cli::program(),
                crate::cli::iso_ms(f),
                match past {
                    Some(_) => "the last tick before now".to_string(),
                    None => format!("{}, an hour back, as a first tick does", crate::cli::iso_ms(back)),
                }
            );
        }
        Ok(past.or(future.map(|_| back)))
    }
}

/// Records a step of the wall clock by `step_ms` (negative: back), noticed at `t` (the wall
/// clock after it).
pub fn note_step(tx: &Transaction<'_>, t: i64, step_ms: i64) -> Result<()> {
    tx.execute(
        "INSERT INTO clock_steps (t, step_ms) VALUES (?1, ?2)",
        params![t, step_ms],
    )?;
    Ok(())
}

/// The latest step of the wall clock noticed since `since`: (when, by how much).
pub fn last_step(c: &rusqlite::Connection, since: i64) -> Result<Option<(i64, i64)>> {
    use rusqlite::OptionalExtension;
    Ok(c.query_row(
        "SELECT t, step_ms FROM clock_steps WHERE t >= ?1 ORDER BY rowid DESC LIMIT 1",
        params![since],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )
    .optional()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn tick(
        t: i64,
        outcome: TickOutcome,
        sessions: i64,
        flagged: i64,
        mode: TickMode,
        full: bool,
    ) -> TickRow {
        TickRow {
            t,
            duration_ms: 5,
            sessions,
            flagged,
            outcome,
            sources: "[]".into(),
            blind: (outcome == TickOutcome::Blind).then(|| "/o.db: locked".into()),
            mode,
            full,
        }
    }

    /// (last_tick, outcome, sessions, flagged, figures_at) of `wd-store status`.
    fn status_of(store: &Store) -> (Value, Value, Value, Value, Value) {
        let r = status(store).unwrap();
        let col = |name: &str| r.rows[0][r.cols.iter().position(|c| *c == name).unwrap()].clone();
        (
            col("last_tick"),
            col("outcome"),
            col("sessions"),
            col("flagged"),
            col("figures_at"),
        )
    }

    /// In follow mode a partial tick judges only what changed in its second: "ok, 0 sessions"
    /// while a loop ran (seen on the page and in status between a loop's partial ticks), and the
    /// last full tick alone said "ok" next to a loop a partial tick had flagged since (an
    /// operator's journey). The figures are each session's latest verdict since the last full
    /// tick, said with when that was; a blind partial tick shows.
    #[test]
    fn followed_status_stands_on_the_last_full_tick_and_each_sessions_latest_verdict_since() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("w.db")).unwrap();
        let add = |store: &mut Store, t: TickRow, verdicts: &[(&str, bool)]| {
            let tx = store.write().unwrap();
            let id = insert(&tx, &t).unwrap();
            for (session, flagged) in verdicts {
                tx.execute(
                    "INSERT INTO verdicts (tick, t, session, root, flagged) VALUES (?1, ?2, ?3, ?3, ?4)",
                    params![id, t.t, session, flagged],
                )
                .unwrap();
            }
            tx.commit().unwrap();
        };
        use TickMode::{Follow, Timer};
        use TickOutcome::{Blind, Flagged, Ok};
        let abc = [("a", true), ("b", false), ("c", false)];
        add(&mut store, tick(1_000, Flagged, 3, 1, Follow, true), &abc);
        // a second of b alone
        add(
            &mut store,
            tick(2_000, Ok, 1, 0, Follow, false),
            &[("b", false)],
        );
        assert_eq!(
            status_of(&store),
            (
                json!(2_000),
                json!("flagged"),
                json!(3),
                json!(1),
                json!(1_000)
            )
        );
        // a lands a change; c starts looping
        add(
            &mut store,
            tick(3_000, Ok, 1, 0, Follow, false),
            &[("a", false)],
        );
        assert_eq!(status_of(&store).1, json!("ok"));
        add(
            &mut store,
            tick(4_000, Flagged, 1, 1, Follow, false),
            &[("c", true)],
        );
        assert_eq!(
            status_of(&store),
            (
                json!(4_000),
                json!("flagged"),
                json!(3),
                json!(1),
                json!(1_000)
            )
        );
        add(&mut store, tick(5_000, Blind, 0, 0, Follow, false), &[]);
        assert_eq!(
            status_of(&store),
            (
                json!(5_000),
                json!("blind"),
                json!(0),
                json!(0),
                json!(5_000)
            )
        );
        add(
            &mut store,
            tick(6_000, Ok, 2, 0, Follow, true),
            &[("a", false), ("b", false)],
        );
        add(
            &mut store,
            tick(7_000, Ok, 1, 0, Follow, false),
            &[("d", false)],
        );
        assert_eq!(
            status_of(&store),
            (json!(7_000), json!("ok"), json!(3), json!(0), json!(6_000))
        );
        // a timer tick is its own figures
        add(&mut store, tick(8_000, Ok, 3, 0, Timer, true), &[]);
        assert_eq!(
            status_of(&store),
            (json!(8_000), json!("ok"), json!(3), json!(0), json!(8_000))
        );
    }
}
