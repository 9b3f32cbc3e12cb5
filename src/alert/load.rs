//! The lifecycle's reads, made inside the write transaction that records the plan (so two
//! alerters never decide on the same state): whether a tick was processed, the open episodes
//! with their marks, the last episode of each flagged tree, and what each channel was sent of an
//! alert before.

use super::{AlertEpisode, AlertKind, Event, Reason, SessionMark, StopSeen, TickView};
use crate::channels::route::SentBefore;
use crate::severity::Severity;
use anyhow::Result;
use rusqlite::{params, Connection, OptionalExtension};
use std::collections::HashMap;

/// Was the tick with this key recorded already?
pub fn processed(conn: &Connection, key: &str) -> Result<bool> {
    Ok(conn
        .query_row(
            "SELECT 1 FROM alert_ticks WHERE tick_key = ?1",
            [key],
            |_| Ok(()),
        )
        .optional()?
        .is_some())
}

const EPISODE_COLS: &str = "id, dedup_key, kind, root, severity, flagged_ticks, asked, source, opened, title, agent, model, reason, sources, coalesce(trigger_calls, 0), coalesce(trigger_cost, 0), landed";

fn episode_row(r: &rusqlite::Row) -> rusqlite::Result<AlertEpisode> {
    Ok(AlertEpisode {
        id: r.get(0)?,
        key: r.get(1)?,
        kind: AlertKind::parse(&r.get::<_, String>(2)?),
        subject: r.get(3)?,
        severity: Severity::parse(&r.get::<_, String>(4)?).unwrap_or(Severity::Warning),
        flagged_ticks: r.get(5)?,
        asked: r.get(6)?,
        source: r.get(7)?,
        opened: r.get(8)?,
        title: r.get(9)?,
        agent: r.get(10)?,
        model: r.get(11)?,
        reason: r
            .get::<_, Option<String>>(12)?
            .as_deref()
            .and_then(Reason::parse),
        sources: r
            .get::<_, Option<String>>(13)?
            .and_then(|s| serde_json::from_str(&s).ok())
            .unwrap_or_default(),
        marks: HashMap::new(),
        trigger_calls: r.get::<_, i64>(14)?.max(0) as u64,
        trigger_cost: r.get(15)?,
        landed: r.get(16)?,
        stop_tried: false,
        stop: None,
        stop_under_way: None,
        place: String::new(),
    })
}

/// Where the episode's session is (its title and project), as its latest event that says it
/// told: a resolve says what it resolves.
fn load_place(conn: &Connection, ep: &mut AlertEpisode) -> Result<()> {
    let mut st = conn.prepare_cached(
        "SELECT json_extract(body, '$.details.title'), json_extract(body, '$.details.directory')
         FROM events WHERE episode = ?1
           AND coalesce(json_extract(body, '$.details.title'), json_extract(body, '$.details.directory')) IS NOT NULL
         ORDER BY id DESC LIMIT 1",
    )?;
    let told: Option<(Option<String>, Option<String>)> = st
        .query_row([ep.id], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    if let Some((title, dir)) = told {
        ep.place = super::text::place(title.as_deref(), dir.as_deref());
    }
    Ok(())
}

/// The stop of a loop episode: whether one was asked, and the one carried out.
fn load_stop(conn: &Connection, ep: &mut AlertEpisode) -> Result<()> {
    let mut st = conn.prepare_cached(
        "SELECT action_id, session, reason, status, coalesce(stopped, t), via, pid,
                calls_after_request
         FROM stops WHERE episode = ?1 ORDER BY status = 'stopped' DESC, t DESC LIMIT 1",
    )?;
    let row = st
        .query_row([format!("episode:{}", ep.id)], |r| {
            let status: String = r.get(3)?;
            Ok((
                status,
                StopSeen {
                    action_id: r.get(0)?,
                    session: r.get(1)?,
                    by: r.get(2)?,
                    stopped: r.get::<_, Option<i64>>(4)?.unwrap_or(0),
                    via: r.get(5)?,
                    pid: r.get(6)?,
                    calls_after_request: r.get(7)?,
                },
            ))
        })
        .optional()?;
    if let Some((status, seen)) = row {
        ep.stop_tried = true;
        match status.as_str() {
            "stopped" => ep.stop = Some(seen),
            "requested" => ep.stop_under_way = Some(seen),
            _ => {}
        }
    }
    Ok(())
}

/// Sessions of this tick whose run a stop carried out, and when (the latest): the interrupt it
/// leaves is the stop's, not news.
pub fn stopped_sessions(conn: &Connection, tick: &TickView) -> Result<HashMap<String, i64>> {
    let mut st = conn.prepare_cached(
        "SELECT max(stopped) FROM stops WHERE session = ?1 AND status = 'stopped'",
    )?;
    let mut out = HashMap::new();
    for v in tick
        .verdicts
        .iter()
        .filter(|v| v.liveness_class() == Some(crate::record::LivenessClass::Interrupted))
    {
        if let Some(t) = st.query_row([&v.session], |r| r.get::<_, Option<i64>>(0))? {
            out.insert(v.session.clone(), t);
        }
    }
    Ok(out)
}

fn load_marks(conn: &Connection, ep: &mut AlertEpisode) -> Result<()> {
    let mut st = conn.prepare_cached(
        "SELECT session, calls, calls_since_landed, cost_since_landed, last_call, loop_start, flagged, base_calls,
             base_cost, start
         FROM episode_sessions WHERE episode = ?1",
    )?;
    let rows = st.query_map([ep.id], |r| {
        Ok((
            r.get::<_, String>(0)?,
            SessionMark {
                calls: r.get::<_, i64>(1)? as u64,
                calls_since_landed: r.get::<_, i64>(2)? as u64,
                cost_since_landed: r.get(3)?,
                last_call: r.get(4)?,
                loop_start: r.get(5)?,
                flagged: r.get(6)?,
                base_calls: r.get::<_, i64>(7)? as u64,
                base_cost: r.get(8)?,
                start: r.get(9)?,
            },
        ))
    })?;
    for row in rows {
        let (s, m) = row?;
        ep.marks.insert(s, m);
    }
    Ok(())
}

pub fn open_episodes(conn: &Connection) -> Result<Vec<AlertEpisode>> {
    let mut st = conn.prepare(&format!(
        "SELECT {EPISODE_COLS} FROM episodes WHERE state = 'open' ORDER BY id"
    ))?;
    let mut eps = st
        .query_map([], episode_row)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    for e in eps.iter_mut() {
        load_place(conn, e)?;
    }
    for e in eps.iter_mut().filter(|e| e.kind == Some(AlertKind::Loop)) {
        load_marks(conn, e)?;
        load_stop(conn, e)?;
    }
    Ok(eps)
}

/// The last episode of each flagged tree that has no open one; with `done`, also the last done
/// notice of each session that finished a turn (its mark says which turn it told).
pub fn last_episodes(
    conn: &Connection,
    tick: &TickView,
    open: &[AlertEpisode],
    done: bool,
) -> Result<HashMap<String, AlertEpisode>> {
    let mut out = HashMap::new();
    let mut st = conn.prepare_cached(&format!(
        "SELECT {EPISODE_COLS} FROM episodes WHERE dedup_key = ?1 ORDER BY id DESC LIMIT 1"
    ))?;
    for v in tick.verdicts.iter().filter(|v| v.flagged) {
        let key = super::loop_key(v.root());
        if out.contains_key(&key) || open.iter().any(|e| e.key == key) {
            continue;
        }
        if let Some(mut e) = st.query_row([&key], episode_row).optional()? {
            load_marks(conn, &mut e)?;
            load_stop(conn, &mut e)?;
            load_place(conn, &mut e)?;
            out.insert(key, e);
        }
    }
    let finished = tick
        .verdicts
        .iter()
        .filter(|v| done && super::fresh_end(v, tick.t).is_some());
    for v in finished {
        let key = AlertKind::Done.key(&v.session);
        if let Some(mut e) = st.query_row([&key], episode_row).optional()? {
            load_marks(conn, &mut e)?;
            out.insert(key, e);
        }
    }
    Ok(out)
}

/// What was sent before of `ev`'s alert on channel `channel` (of its episode `episode`, for an
/// event of an open episode).
pub fn sent_before(
    conn: &Connection,
    ev: &Event,
    episode: Option<i64>,
    channel: &str,
) -> Result<SentBefore> {
    let mut key_last = conn.prepare_cached(
        "SELECT d.t, e.state = 'resolve' FROM deliveries d JOIN events e ON e.id = d.event
         WHERE e.dedup_key = ?1 AND d.channel = ?2 AND d.status = 'sent'
         ORDER BY d.t DESC, e.id DESC LIMIT 1",
    )?;
    let (key_last, key_resolved) = key_last
        .query_row(params![ev.dedup_key, channel], |r| {
            Ok((r.get::<_, Option<i64>>(0)?, r.get::<_, bool>(1)?))
        })
        .optional()?
        .unwrap_or((None, false));
    let mut episode_sent = conn.prepare_cached(
        "SELECT EXISTS (SELECT 1 FROM deliveries d JOIN events e ON e.id = d.event
         WHERE e.episode = ?1 AND d.channel = ?2 AND d.status IN ('sent', 'failed'))",
    )?;
    Ok(SentBefore {
        key_last,
        key_resolved,
        episode: match episode {
            Some(e) => episode_sent.query_row(params![e, channel], |r| r.get(0))?,
            None => false,
        },
    })
}
