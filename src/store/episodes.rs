//! The `episodes` table (one row per time an alert key opened, with what its loop burned) and
//! `alerts` (one row per dedup key, its current episode): the loops open now, the history of
//! episodes, the roots the next tick must re-read.

use super::rows::Rows;
use super::Store;
use anyhow::Result;
use rusqlite::{params, types::Value as Sql, Transaction};

/// "41 calls, $0.37, 12 min" from an episode's columns (`duration_ms` the duration so far, see
/// [`so_far`]); the duration in the words of the events (`alert::text::duration`: "44 s",
/// "12 min", "2 h 05 min").
pub const BURNED: &str =
    "CASE WHEN p.calls IS NOT NULL THEN printf('%d call%s, $%.2f, %s', p.calls, CASE p.calls WHEN 1 THEN '' ELSE 's' END, p.cost,
       (SELECT CASE WHEN s < 60 THEN printf('%d s', s) WHEN s < 3600 THEN printf('%d min', s / 60)
                    ELSE printf('%d h %02d min', s / 3600, s % 3600 / 60) END
        FROM (SELECT max(coalesce(p.duration_ms, 0), 0) / 1000 AS s))) END";

/// A loop episode's stop (issue 28), in one line: who stopped which session, how, and how to
/// resume it; or that a stop was refused or failed, and why. NULL when none was asked.
pub const STOP: &str = "(SELECT CASE s.status
       WHEN 'stopped' THEN printf('session %s stopped by %s via %s, %d call(s) after the request; resume with %s',
                                  s.session, CASE s.reason WHEN 'operator' THEN 'the operator (wd-store stop)'
                                      WHEN 'popup' THEN 'the operator (the popup''s stop action)'
                                      ELSE 'the watchdog (' || s.reason || ')' END,
                                  coalesce(s.via, '?'), coalesce(s.calls_after_request, 0),
                                  -- as the stop said it; else by the way it went (rows from before)
                                  coalesce(s.resume, CASE s.via WHEN 'hook' THEN printf('`claude --resume %s` (interactive) or `claude -p --resume %s \"continue\"`, in its project', s.session, s.session)
                                      ELSE printf('`opencode -s %s` (its TUI) or `opencode run -s %s \"continue\"`', s.session, s.session) END))
       WHEN 'failed' THEN printf('stop of session %s (%s) not carried out: %s', s.session, s.reason, coalesce(s.detail, ''))
       ELSE printf('stop of session %s (%s) requested', s.session, s.reason) END
     FROM stops s WHERE s.episode = 'episode:' || p.id ORDER BY s.status = 'stopped' DESC, s.t DESC LIMIT 1)";

/// An episode's duration so far, as SQL over `episodes q` with `now` the SQL of the current
/// time (epoch ms): a closed one's as it resolved (a loop's first call to its last); an open
/// loop's runs on from its last call until now (a loop whose opencode hangs or was killed is
/// not "1 min" eight minutes later); an open episode without figures, since it opened.
pub fn so_far(now: &str) -> String {
    format!(
        "CASE WHEN q.state = 'open' THEN max(
             coalesce(q.duration_ms, 0) + {now} - coalesce(
                 (SELECT max(s.last_call) FROM episode_sessions s WHERE s.episode = q.id AND s.flagged = 1), {now}),
             {now} - q.opened)
         ELSE q.duration_ms END"
    )
}

/// What the latest event of episode `p` that says it tells of its session (`details.KEY`).
fn told(key: &str) -> String {
    format!(
        "(SELECT json_extract(e.body, '$.details.{key}') FROM events e
          WHERE e.episode = p.id AND json_extract(e.body, '$.details.{key}') IS NOT NULL
          ORDER BY e.id DESC LIMIT 1)"
    )
}

/// The episodes with `duration_ms` their duration so far (an SQL table expression, `p`).
fn with_so_far(now: &str) -> String {
    format!(
        "(SELECT q.id, q.dedup_key, q.kind, q.root, q.state, q.severity, q.peak_severity, q.opened,
                 q.last_fired, q.resolved, q.reason, q.flagged_ticks, q.agent, q.model, q.top_target,
                 q.evidence, q.calls, q.cost, q.opinion, q.last_decision, q.title,
                 {} AS duration_ms
          FROM episodes q) p",
        so_far(now)
    )
}

/// Open episodes, and those resolved at `recent` or later, open and critical first.
pub fn loops(store: &Store, recent: i64, now: i64) -> Result<Rows> {
    Rows::query(
        store,
        "loop",
        &format!(
            "SELECT CASE WHEN p.state = 'open' THEN p.severity ELSE 'resolved' END AS status,
                p.severity, p.dedup_key, p.state, p.id AS episode, p.opened, p.flagged_ticks,
                p.last_decision, p.reason, p.agent, p.model, p.top_target, p.calls, p.cost, p.duration_ms,
                {BURNED} AS burned, p.evidence, p.opinion,
                -- the last event each channel was sent for this episode (SQLite takes the row of max())
                (SELECT group_concat(channel || ':' || state, ' ')
                   FROM (SELECT d.channel, e.state, max(e.id) FROM deliveries d JOIN events e ON e.id = d.event
                         WHERE e.episode = p.id AND d.status = 'sent' GROUP BY d.channel)) AS last_sent,
                p.title, {STOP} AS stop, {} AS session, {} AS project, {} AS session_title
         FROM {} WHERE p.state = 'open' OR p.resolved >= ?1
         ORDER BY p.state = 'open' DESC, p.severity = 'critical' DESC, p.opened",
            told("session"),
            told("directory"),
            told("title"),
            with_so_far("?2")
        ),
        &[Sql::Integer(recent), Sql::Integer(now)],
    )
}

/// Episodes open at any time since `since` (of one alert kind, given its name), newest first.
pub fn history(
    store: &Store,
    since: i64,
    kind: Option<&str>,
    limit: usize,
    now: i64,
) -> Result<Rows> {
    Rows::query(
        store,
        "episode",
        &format!(
            "SELECT p.id AS episode, p.dedup_key, p.kind AS alert, p.state, p.peak_severity, p.opened, p.resolved, p.reason,
                p.flagged_ticks, p.calls, p.cost, p.duration_ms, {BURNED} AS burned, p.agent, p.model, p.top_target,
                p.evidence, p.title, {STOP} AS stop, {} AS session, {} AS project, {} AS session_title
         FROM {}
         WHERE (p.state = 'open' OR p.resolved >= ?1 OR p.opened >= ?1) AND (?2 IS NULL OR p.kind = ?2)
         ORDER BY p.opened DESC, p.id DESC LIMIT ?3",
            told("session"),
            told("directory"),
            told("title"),
            with_so_far("?4")
        ),
        &[
            Sql::Integer(since),
            kind.map(|k| Sql::Text(k.to_string())).unwrap_or(Sql::Null),
            Sql::Integer(limit as i64),
            Sql::Integer(now),
        ],
    )
}

/// Root sessions of every open alert but blind ones (loops, stalled, interrupted, ...), in
/// order: the tick reads them again, so that a session that changed no more is not taken for gone.
/// The open episodes' ids, each with when it opened (wall clock).
pub fn open_since(store: &Store) -> Result<Vec<(i64, i64)>> {
    let mut st = store
        .conn
        .prepare_cached("SELECT id, opened FROM episodes WHERE state = 'open' ORDER BY id")?;
    let open = st
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?;
    Ok(open)
}

pub fn open_roots(store: &Store) -> Result<Vec<String>> {
    let mut st = store.conn.prepare(
        "SELECT DISTINCT root FROM alerts WHERE state = 'open' AND kind <> 'blind' ORDER BY root",
    )?;
    let roots = st
        .query_map([], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    Ok(roots)
}

/// Deletes episodes resolved before `before`, and the events before it of keys not open now;
/// returns (episodes, events).
pub fn prune(tx: &Transaction<'_>, before: i64) -> Result<(usize, usize)> {
    let a = tx.execute(
        "DELETE FROM episodes WHERE state = 'resolved' AND resolved < ?1",
        params![before],
    )?;
    let e = tx.execute(
        "DELETE FROM events WHERE t < ?1 AND dedup_key NOT IN (SELECT dedup_key FROM alerts WHERE state = 'open')",
        params![before],
    )?;
    Ok((a, e))
}

#[cfg(test)]
mod tests {
    use super::{BURNED, STOP};
    use crate::event::Figures;
    use crate::event::{burned, duration};

    /// The `burned` column says the duration as the events do (seconds under a minute).
    #[test]
    fn the_burned_column_words_durations_as_the_events_do() {
        let c = rusqlite::Connection::open_in_memory().unwrap();
        for ms in [
            0,
            999,
            44_000,
            59_999,
            60_000,
            12 * 60_000 + 5_000,
            2 * 3_600_000 + 5 * 60_000,
            -5,
        ] {
            let sql = format!(
                "SELECT {BURNED} FROM (SELECT 41 AS calls, 0.3712 AS cost, {ms} AS duration_ms) p"
            );
            let got: String = c.query_row(&sql, [], |r| r.get(0)).unwrap();
            assert_eq!(got, format!("41 calls, $0.37, {}", duration(ms)), "{ms} ms");
            let f = Figures {
                calls: 41,
                cost: 0.3712,
                duration_ms: ms,
                flagged_ticks: 1,
            };
            assert!(burned(&f).ends_with(&duration(ms)));
        }
        let got: String = c
            .query_row(&format!("SELECT {BURNED} FROM (SELECT 41 AS calls, 0.5 AS cost, 44000 AS duration_ms) p"), [], |r| r.get(0))
            .unwrap();
        assert_eq!(got, "41 calls, $0.50, 44 s");
        let none: Option<String> = c
            .query_row(&format!("SELECT {BURNED} FROM (SELECT NULL AS calls, NULL AS cost, NULL AS duration_ms) p"), [], |r| r.get(0))
            .unwrap();
        assert_eq!(none, None);
    }

    /// One call is "1 call", in the column as in the events ("1 calls" before).
    #[test]
    fn one_call_is_one_call() {
        let c = rusqlite::Connection::open_in_memory().unwrap();
        let sql = format!(
            "SELECT {BURNED} FROM (SELECT 1 AS calls, 0.01 AS cost, 5000 AS duration_ms) p"
        );
        let got: String = c.query_row(&sql, [], |r| r.get(0)).unwrap();
        assert_eq!(got, "1 call, $0.01, 5 s");
        let f = Figures {
            calls: 1,
            cost: 0.01,
            duration_ms: 5000,
            ..Figures::default()
        };
        assert_eq!(burned(&f), "1 call and $0.01 over 5 s");
    }

    /// Who stopped a loop, once: "stopped by the operator (operator) via http" said the reason
    /// twice, and a stop from the popup's action read as `wd-store stop`.
    #[test]
    fn a_stop_line_says_who_and_how_once() {
        let c = rusqlite::Connection::open_in_memory().unwrap();
        c.execute_batch(
            "CREATE TABLE stops (session TEXT, episode TEXT, reason TEXT, status TEXT, via TEXT,
                                 calls_after_request INTEGER, detail TEXT, t INTEGER,
                                 resume TEXT);",
        )
        .unwrap();
        let line = |reason: &str, via: &str| -> String {
            c.execute("DELETE FROM stops", []).unwrap();
            c.execute(
                "INSERT INTO stops VALUES ('ses_a', 'episode:1', ?1, 'stopped', ?2, 1, NULL, 1, NULL)",
                [reason, via],
            )
            .unwrap();
            c.query_row(&format!("SELECT {STOP} FROM (SELECT 1 AS id) p"), [], |r| {
                r.get(0)
            })
            .unwrap()
        };
        let resume =
            "resume with `opencode -s ses_a` (its TUI) or `opencode run -s ses_a \"continue\"`";
        assert_eq!(
            line("operator", "http"),
            format!("session ses_a stopped by the operator (wd-store stop) via http, 1 call(s) after the request; {resume}")
        );
        assert_eq!(
            line("popup", "plugin"),
            format!("session ses_a stopped by the operator (the popup's stop action) via plugin, 1 call(s) after the request; {resume}")
        );
        assert_eq!(
            line("escalated", "plugin"),
            format!("session ses_a stopped by the watchdog (escalated) via plugin, 1 call(s) after the request; {resume}")
        );
        // another agent's stop says its own way to resume, as the stop recorded it
        c.execute(
            "UPDATE stops SET via = 'sigint', resume = '`codex exec resume ses_a \"continue\"` in its project'",
            [],
        )
        .unwrap();
        let codex: String = c
            .query_row(&format!("SELECT {STOP} FROM (SELECT 1 AS id) p"), [], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(codex, "session ses_a stopped by the watchdog (escalated) via sigint, 1 call(s) after the request; resume with `codex exec resume ses_a \"continue\"` in its project");
    }
}
