//! The `verdicts` table: every verdict of every tick (one row per session and tick), and the
//! queries over it: the verdicts themselves and the per-model (or per-agent) rollup.

use super::rows::Rows;
use super::Store;
use crate::record::Verdict;
use anyhow::Result;
use rusqlite::{params, types::Value as Sql, Transaction};
use serde_json::{json, Value};

/// Records the verdicts of tick `tick` (at `t`); a session judged twice keeps the last.
pub fn insert(tx: &Transaction<'_>, tick: i64, t: i64, verdicts: &[Verdict]) -> Result<()> {
    let mut ins = tx.prepare(
        "INSERT OR REPLACE INTO verdicts (tick, t, session, root, agent, model, flagged, reasons, signals,
         landed_in_window, calls, calls_since_landed, cost_since_landed, first_flag_index, first_flag_t,
         loop_start_index, evidence, digest, opinion, liveness)
         VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15,?16,?17,?18,?19,?20)",
    )?;
    for v in verdicts {
        let reasons: Vec<&str> = v.reasons.iter().map(|r| r.name()).collect();
        let loop_start = v.evidence.as_ref().and_then(|e| e.loop_start.as_ref());
        ins.execute(params![
            tick,
            t,
            v.session,
            v.root(),
            v.agent,
            v.model,
            v.flagged,
            reasons.join(","),
            Value::Object(v.signals.to_map()).to_string(),
            v.landed_in_window,
            v.calls as i64,
            v.calls_since_landed as i64,
            v.cost_since_landed,
            v.first_flag.as_ref().map(|f| f.index as i64),
            v.first_flag.as_ref().map(|f| f.t),
            loop_start.map(|f| f.index as i64),
            v.evidence.as_ref().map(|e| json!(e).to_string()),
            (!v.digest.is_empty()).then(|| json!(v.digest).to_string()),
            v.extra.get("opinion").map(|o| o.to_string()),
            v.liveness.as_ref().map(|o| json!(o).to_string()),
        ])?;
    }
    Ok(())
}

/// Thins the history a partial follow tick `tick` adds to, for each session it judged: the
/// session's previous verdict goes when it came from a partial tick too and only repeated the
/// one before it (flagged as that was, and as this one is). Kept are every full tick's verdicts,
/// the first of each flagged or unflagged stretch, and the latest: what the page, the rollups
/// and `wd-store verdicts --flagged` read. Without it a followed loop wrote one row a second,
/// 1.7 million a day for 20 loops.
pub fn thin(tx: &Transaction<'_>, tick: i64, sessions: &[&str]) -> Result<usize> {
    let mut last3 = tx.prepare(
        "SELECT v.tick, v.flagged, t.full FROM verdicts v JOIN ticks t ON t.id = v.tick
         WHERE v.session = ?1 AND v.tick <= ?2 ORDER BY v.tick DESC LIMIT 3",
    )?;
    let mut del = tx.prepare("DELETE FROM verdicts WHERE tick = ?1 AND session = ?2")?;
    let mut n = 0;
    for s in sessions {
        let rows: Vec<(i64, bool, bool)> = last3
            .query_map(params![s, tick], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
            .collect::<rusqlite::Result<_>>()?;
        if let [(this, now, _), (prev, was, false), (_, before, _)] = rows[..] {
            if this == tick && now == was && was == before {
                n += del.execute(params![prev, s])?;
            }
        }
    }
    Ok(n)
}

/// Which verdicts `wd-store verdicts` lists.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub since: Option<i64>,
    pub session: Option<String>,
    pub flagged: bool,
    pub limit: usize,
}

/// Recorded verdicts, newest first.
pub fn list(store: &Store, f: Filter) -> Result<Rows> {
    let mut sql = String::from(
        "SELECT t, tick, session, root, agent, model, flagged, reasons, signals, landed_in_window, calls,
                calls_since_landed, cost_since_landed, first_flag_index, first_flag_t, loop_start_index, evidence,
                digest, opinion, liveness
         FROM verdicts WHERE 1 = 1",
    );
    let mut p: Vec<Sql> = Vec::new();
    if let Some(s) = f.since {
        sql += " AND t >= ?";
        p.push(Sql::Integer(s));
    }
    if let Some(s) = f.session {
        sql += " AND session = ?";
        p.push(Sql::Text(s));
    }
    if f.flagged {
        sql += " AND flagged = 1";
    }
    sql += " ORDER BY t DESC, session LIMIT ?";
    p.push(Sql::Integer(f.limit as i64));
    Rows::query(store, "verdict_row", &sql, &p)
}

/// What the rollup groups sessions by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RollupBy {
    Model,
    Agent,
}

/// The SQL of a CTE `s (session, k, f)`: each session with a verdict since `?1` once, under the
/// latest `col` (model or agent) its verdicts name, '(unknown)' when none does, and `f` 1 when
/// any of them flagged it. The latest, not each: a session's first verdicts may name no model
/// (read before its first reply), and a session counted under both would be counted twice.
pub fn sessions_by(col: &str) -> String {
    format!(
        "s AS (SELECT session, max(flagged) AS f,
                      coalesce((SELECT v.{col} FROM verdicts v
                                WHERE v.session = x.session AND v.t >= ?1 AND v.{col} IS NOT NULL
                                ORDER BY v.t DESC LIMIT 1), '(unknown)') AS k
               FROM verdicts x WHERE t >= ?1 GROUP BY session)"
    )
}

/// Flagged sessions per model (or agent) since `since`, next to each one's share of all
/// sessions seen.
pub fn rollup(store: &Store, by: RollupBy, since: i64) -> Result<Rows> {
    let col = match by {
        RollupBy::Agent => "agent",
        RollupBy::Model => "model",
    };
    let sql = format!(
        "WITH {s},
              total AS (SELECT count(*) AS n, sum(f) AS nf FROM s)
         SELECT k AS {col}, count(*) AS sessions,
                round(1.0 * count(*) / (SELECT n FROM total), 3) AS share_of_sessions,
                sum(f) AS flagged_sessions,
                round(1.0 * sum(f) / max(1, (SELECT nf FROM total)), 3) AS share_of_flagged
         FROM s GROUP BY k ORDER BY flagged_sessions DESC, sessions DESC",
        s = sessions_by(col)
    );
    Rows::query(store, "rollup", &sql, &[Sql::Integer(since)])
}

/// Deletes the verdicts before `before`, and the call marks of sessions left without any;
/// returns how many verdicts.
pub fn prune(tx: &Transaction<'_>, before: i64) -> Result<usize> {
    let v = tx.execute("DELETE FROM verdicts WHERE t < ?1", params![before])?;
    tx.execute(
        "DELETE FROM call_marks WHERE session NOT IN (SELECT session FROM verdicts)",
        [],
    )?;
    Ok(v)
}

#[cfg(test)]
pub(crate) mod tests {
    use crate::store::Store;

    /// Verdict rows (tick, session, model, flagged): a session read before its first reply has
    /// no model on its first verdicts.
    pub fn judged(store: &mut Store, rows: &[(i64, &str, Option<&str>, bool)]) {
        let tx = store.write().unwrap();
        for (tick, s, model, flagged) in rows {
            tx.execute(
                "INSERT OR IGNORE INTO ticks (id, t, outcome) VALUES (?1, ?1, 'ok')",
                [tick],
            )
            .unwrap();
            tx.execute(
                "INSERT INTO verdicts (tick, t, session, root, model, flagged) VALUES (?1, ?1, ?2, ?2, ?3, ?4)",
                rusqlite::params![tick, s, model, flagged],
            )
            .unwrap();
        }
        tx.commit().unwrap();
    }

    /// The second journey's rollup listed one `opencode run` twice: under "(unknown)" for the
    /// verdict read before its first reply, and under its model. Each session counts once, under
    /// the latest model its verdicts name.
    #[test]
    fn a_session_whose_first_verdicts_name_no_model_is_counted_once_under_its_model() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("w.db")).unwrap();
        judged(
            &mut store,
            &[
                (1, "ses_run", None, false),
                (2, "ses_run", Some("sim/m"), true),
                (3, "ses_run", Some("sim/m"), true),
                (1, "ses_tui", Some("sim/m"), false),
                (2, "ses_new", None, false),
            ],
        );
        let r = super::rollup(&store, super::RollupBy::Model, 0).unwrap();
        let rows: Vec<String> = r
            .rows
            .iter()
            .map(|row| {
                row.iter()
                    .map(|v| v.to_string())
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect();
        assert_eq!(
            rows,
            ["\"sim/m\" 2 0.667 1 1.0", "\"(unknown)\" 1 0.333 0 0.0"]
        );
    }

    /// A followed session judged at ticks 1 (full) to 9 (partial), flagged at 5 to 8: kept are
    /// the full tick's verdict, each stretch's first and last, and the latest.
    #[test]
    fn a_followed_sessions_repeated_verdicts_are_thinned_to_where_it_changed() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("w.db")).unwrap();
        let tx = store.write().unwrap();
        let mut deleted = 0;
        for tick in 1..=9_i64 {
            tx.execute(
                "INSERT INTO ticks (id, t, outcome, mode, full) VALUES (?1, ?1, 'ok', 'follow', ?2)",
                rusqlite::params![tick, tick == 1],
            )
            .unwrap();
            for s in ["a", "b"] {
                tx.execute(
                    "INSERT INTO verdicts (tick, t, session, root, flagged) VALUES (?1, ?1, ?2, ?2, ?3)",
                    rusqlite::params![tick, s, s == "a" && (5..=8).contains(&tick)],
                )
                .unwrap();
            }
            let judged: &[&str] = if tick == 1 { &[] } else { &["a"] };
            deleted += super::thin(&tx, tick, judged).unwrap();
        }
        let kept = |s: &str| -> Vec<i64> {
            let mut st = tx
                .prepare("SELECT tick FROM verdicts WHERE session = ?1 ORDER BY tick")
                .unwrap();
            st.query_map([s], |r| r.get(0))
                .unwrap()
                .collect::<rusqlite::Result<_>>()
                .unwrap()
        };
        assert_eq!(kept("a"), [1, 4, 5, 8, 9]);
        assert_eq!(
            kept("b"),
            (1..=9).collect::<Vec<_>>(),
            "not judged: untouched"
        );
        assert_eq!(deleted, 4);
    }
}
