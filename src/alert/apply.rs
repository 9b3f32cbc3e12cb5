//! Applying a plan: every episode change, event, outbox row and nudge of one tick, in the
//! write transaction the plan's state was read in. The slow part (second opinions) is asked
//! before it; reading, deciding, wording and routing are in-process and take milliseconds.

use super::decide::{Hold, Marks, Step};
use super::stage::{Nudge, Staged, TickIndex};
use super::{AlertEpisode, AlertKind, Event, Verdict};
use anyhow::Result;
use rusqlite::{params, Connection, OptionalExtension};
use serde_json::json;
use std::collections::HashMap;

/// Everything the transaction writes, worked out beforehand.
pub struct Prepared<'a> {
    /// The plan's steps, each with its event, routes and nudge.
    pub steps: &'a [Staged],
    /// This tick's verdicts by root and by session, for the episodes' columns and marks.
    pub index: &'a TickIndex<'a>,
    /// Open episodes by id (titles, opened).
    pub open: &'a HashMap<i64, &'a AlertEpisode>,
    pub tick_key: &'a str,
    pub tick_id: Option<i64>,
    pub now: i64,
}

/// Every source an episode's tree was listed by: what it knew, and this tick's verdicts.
fn seen_in<'a>(known: Vec<String>, vs: impl Iterator<Item = &'a Verdict>) -> Option<String> {
    let mut all = known;
    for v in vs {
        for s in v.seen_in() {
            if !all.contains(s) {
                all.push(s.clone());
            }
        }
    }
    (!all.is_empty()).then(|| json!(all).to_string())
}

/// Writes the plan inside `tx`, the write transaction its state was read in (the caller
/// commits): its events, and the nudges recorded fresh (a rerun finds the row and sends
/// nothing). `None` when another run recorded this tick first (nothing is written).
pub fn apply(tx: &Connection, p: Prepared) -> Result<Option<(Vec<Event>, Vec<Nudge>)>> {
    let now = p.now;
    let seen: Option<i64> = tx
        .query_row(
            "SELECT t FROM alert_ticks WHERE tick_key = ?1",
            [p.tick_key],
            |r| r.get(0),
        )
        .optional()?;
    if seen.is_some() {
        return Ok(None);
    }
    let mut events = Vec::new();
    let mut nudges = Vec::new();
    for s in p.steps {
        let episode = write_step(tx, &p, s)?;
        if let Some(ev) = &s.event {
            events.push(write_event(tx, s, ev, episode, now)?);
        }
        if let Some(n) = &s.nudge {
            if write_nudge(tx, n, now)? {
                nudges.push(n.clone());
            }
        }
    }
    tx.execute(
        "INSERT INTO alert_ticks (tick_key, t) VALUES (?1, ?2)",
        params![p.tick_key, now],
    )?;
    tx.execute(
        "DELETE FROM alert_ticks WHERE t < ?1",
        params![now - 30 * 86_400_000],
    )?;
    Ok(Some((events, nudges)))
}

/// Writes a step's episode change; the episode its event belongs to.
fn write_step(tx: &Connection, p: &Prepared, s: &Staged) -> Result<Option<i64>> {
    Ok(match &s.step {
        Step::Open { .. } => Some(open_episode(tx, p, s)?),
        Step::Count { episode, .. } => {
            count(tx, p, s)?;
            Some(*episode)
        }
        Step::Hold {
            episode,
            root,
            why,
            marks,
        } => {
            let d = match why {
                Hold::Quiet => "held_busy",
                Hold::Landed => "held_landed",
                Hold::Unknown => "held_no_evidence",
            };
            tx.execute(
                "UPDATE episodes SET last_decision = ?2 WHERE id = ?1",
                params![episode, d],
            )?;
            if *why == Hold::Landed {
                // the stop policy never stops a loop that landed a change since its trigger
                tx.execute(
                    "UPDATE episodes SET landed = coalesce(landed, ?2) WHERE id = ?1",
                    params![episode, p.now],
                )?;
            }
            put_marks(tx, *episode, marks)?;
            put_sources(tx, p, *episode, root)?;
            None
        }
        Step::Resolve {
            episode,
            reason,
            figures,
            marks,
            ..
        } => {
            let now = p.now;
            let opened = p.open.get(episode).map(|e| e.opened).unwrap_or(now);
            tx.execute(
                "UPDATE episodes SET state = 'resolved', severity = 'info', resolved = ?2, last_fired = ?2,
                     reason = ?3, calls = coalesce(?4, calls), cost = coalesce(?5, cost), duration_ms = ?6,
                     last_decision = 'resolved'
                 WHERE id = ?1",
                params![
                    episode,
                    now,
                    reason.as_str(),
                    figures.map(|f| f.calls as i64),
                    figures.map(|f| f.cost),
                    figures.map(|f| f.duration_ms).unwrap_or(now - opened),
                ],
            )?;
            put_marks(tx, *episode, marks)?;
            Some(*episode)
        }
        Step::StillBlind { episode, reasons } => {
            tx.execute(
                "UPDATE episodes SET flagged_ticks = flagged_ticks + 1, evidence = ?2 WHERE id = ?1",
                params![episode, super::text::blind_evidence(reasons)],
            )?;
            None
        }
    })
}

/// What an episode of `kind` keeps as evidence: a blind alert its reasons, a liveness alert
/// its session's liveness evidence, a loop none.
fn evidence(kind: AlertKind, ev: Option<&Event>, v: Option<&Verdict>) -> Option<String> {
    match kind {
        AlertKind::Loop => None,
        AlertKind::Blind => ev
            .and_then(|e| e.details.get("reasons"))
            .and_then(|r| r.as_array())
            .map(|r| {
                r.iter()
                    .filter_map(|x| x.as_str())
                    .collect::<Vec<_>>()
                    .join("; ")
            }),
        _ => v.map(|v| v.liveness_evidence().to_string()),
    }
}

/// Inserts the episode a step opens; its id.
fn open_episode(tx: &Connection, p: &Prepared, s: &Staged) -> Result<i64> {
    let Step::Open {
        kind,
        key,
        subject,
        session,
        severity,
        figures,
        opinion,
        marks,
        ..
    } = &s.step
    else {
        unreachable!("open_episode is given an Open step")
    };
    let ev = s.event.as_ref();
    let v = session
        .as_deref()
        .and_then(|s| p.index.sessions.get(s).copied());
    let tree = || {
        p.index
            .trees
            .get(subject.as_str())
            .into_iter()
            .flatten()
            .copied()
    };
    tx.execute(
        "INSERT INTO episodes (dedup_key, kind, root, state, severity, peak_severity, opened, last_fired,
             flagged_ticks, asked, agent, model, title, top_target, evidence, calls, cost, duration_ms,
             opinion, source, last_decision, sources, trigger_calls, trigger_cost)
         VALUES (?1, ?2, ?3, 'open', ?4, ?4, ?5, ?5, 1, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16,
             'triggered', ?17, coalesce(?12, 0), ?13)",
        params![
            key,
            kind.as_str(),
            subject,
            severity.as_str(),
            p.now,
            opinion.is_some() as i64,
            v.and_then(|v| v.agent.clone()),
            v.and_then(|v| v.model.clone()),
            ev.map(|e| e.title.clone()).unwrap_or_default(),
            v.filter(|_| *kind == AlertKind::Loop).and_then(|v| v.top_target()),
            evidence(*kind, ev, v),
            figures.map(|f| f.calls as i64),
            figures.map(|f| f.cost),
            figures.map(|f| f.duration_ms),
            opinion.as_ref().map(|o| json!(o).to_string()),
            v.and_then(|v| v.source.clone()).or_else(|| (*kind == AlertKind::Blind).then(|| subject.clone())),
            match kind {
                AlertKind::Loop => seen_in(Vec::new(), tree()),
                AlertKind::Blind => None,
                _ => seen_in(Vec::new(), v.into_iter()),
            },
        ],
    )?;
    let id = tx.last_insert_rowid();
    if kind.is_notice() {
        // told as it opens: nothing stays open, nothing is resolved later
        tx.execute(
            "UPDATE episodes SET state = 'resolved', resolved = ?2, reason = ?3, duration_ms = 0,
                 last_decision = 'resolved' WHERE id = ?1",
            params![id, p.now, super::Reason::Done.as_str()],
        )?;
    }
    put_marks(tx, id, marks)?;
    if let (Some(t), Some(o), Some(v)) = (p.tick_id, opinion, v) {
        put_opinion(tx, t, &v.session, &json!(o).to_string())?;
    }
    Ok(id)
}

/// Counts a flagged tick of an open loop episode, escalating it when the step says so.
fn count(tx: &Connection, p: &Prepared, s: &Staged) -> Result<()> {
    let Step::Count {
        episode: id,
        root,
        flagged_ticks,
        escalate,
        figures,
        opinion,
        marks,
        ..
    } = &s.step
    else {
        unreachable!("count is given a Count step")
    };
    let v = p.index.trees.get(root.as_str()).and_then(|t| {
        t.iter()
            .filter(|v| v.flagged)
            .max_by_key(|v| v.calls_since_landed)
    });
    tx.execute(
        "UPDATE episodes SET flagged_ticks = ?2, agent = coalesce(?3, agent), model = coalesce(?4, model),
             top_target = coalesce(?5, top_target), calls = ?6, cost = ?7, duration_ms = ?8,
             asked = asked + ?9, opinion = coalesce(?10, opinion),
             last_decision = ?11
         WHERE id = ?1",
        params![
            id,
            flagged_ticks,
            v.and_then(|v| v.agent.clone()),
            v.and_then(|v| v.model.clone()),
            v.and_then(|v| v.top_target()),
            figures.calls as i64,
            figures.cost,
            figures.duration_ms,
            opinion.is_some() as i64,
            opinion.as_ref().map(|o| json!(o).to_string()),
            if escalate.is_some() { "escalated" } else { "counted" },
        ],
    )?;
    if escalate.is_some() {
        tx.execute(
            "UPDATE episodes SET severity = 'critical', peak_severity = 'critical', last_fired = ?2,
                 title = coalesce(?3, title) WHERE id = ?1",
            params![id, p.now, s.event.as_ref().map(|e| e.title.clone())],
        )?;
    }
    put_marks(tx, *id, marks)?;
    put_sources(tx, p, *id, root)?;
    if let (Some(t), Some(o), Some(v)) = (p.tick_id, opinion, v) {
        put_opinion(tx, t, &v.session, &json!(o).to_string())?;
    }
    Ok(())
}

/// What this tick saw of each session of an episode's tree.
fn put_marks(tx: &Connection, episode: i64, marks: &Marks) -> Result<()> {
    let mut mark = tx.prepare_cached(
        "INSERT INTO episode_sessions (episode, session, calls, calls_since_landed, cost_since_landed, last_call,
             loop_start, flagged, base_calls, base_cost, start) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)
         ON CONFLICT (episode, session) DO UPDATE SET calls = ?3, calls_since_landed = ?4, cost_since_landed = ?5,
             last_call = ?6, loop_start = ?7, flagged = ?8, base_calls = ?9, base_cost = ?10, start = ?11",
    )?;
    for (session, m) in marks {
        mark.execute(params![
            episode,
            session,
            m.calls as i64,
            m.calls_since_landed as i64,
            m.cost_since_landed,
            m.last_call,
            m.loop_start,
            m.flagged,
            m.base_calls as i64,
            m.base_cost,
            m.start
        ])?;
    }
    Ok(())
}

/// Every source an open episode's tree was listed by, with this tick's.
fn put_sources(tx: &Connection, p: &Prepared, episode: i64, root: &str) -> Result<()> {
    let known = p
        .open
        .get(&episode)
        .map(|e| e.seen_in())
        .unwrap_or_default();
    let tree = p.index.trees.get(root).into_iter().flatten().copied();
    tx.prepare_cached("UPDATE episodes SET sources = ?2 WHERE id = ?1")?
        .execute(params![episode, seen_in(known, tree)])?;
    Ok(())
}

/// The second opinion on the verdict it was asked about.
fn put_opinion(tx: &Connection, tick: i64, session: &str, opinion: &str) -> Result<()> {
    tx.prepare_cached("UPDATE verdicts SET opinion = ?3 WHERE tick = ?1 AND session = ?2")?
        .execute(params![tick, session, opinion])?;
    Ok(())
}

/// Records a step's event and one outbox row per channel; the event as recorded.
fn write_event(
    tx: &Connection,
    s: &Staged,
    ev: &Event,
    episode: Option<i64>,
    now: i64,
) -> Result<Event> {
    let mut ev = ev.clone();
    ev.episode = episode;
    tx.prepare_cached(
        "INSERT INTO events (dedup_key, t, state, severity, body, episode, reason) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )?
    .execute(params![
        ev.dedup_key,
        now,
        ev.state.as_str(),
        ev.severity.as_str(),
        serde_json::to_string(&ev)?,
        episode,
        ev.reason.map(|r| r.as_str()),
    ])?;
    let event_id = tx.last_insert_rowid();
    let mut ins = tx.prepare_cached(
        "INSERT INTO deliveries (event, channel, status, attempts, t, detail) VALUES (?1, ?2, ?3, 0, ?4, ?5)",
    )?;
    for r in &s.routes {
        ins.execute(params![
            event_id,
            r.channel,
            r.status.as_str(),
            now,
            r.detail
        ])?;
    }
    Ok(ev)
}

/// Records a nudge as `sending` before anything is sent: one prompt per alert episode. Is it
/// new (a rerun finds the row)?
fn write_nudge(tx: &Connection, n: &Nudge, now: i64) -> Result<bool> {
    Ok(tx.execute(
        "INSERT OR IGNORE INTO actions (action_id, session, observation, prompt_version, prompt, t, status)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'sending')",
        params![
            n.action,
            n.session,
            n.observation,
            crate::liveness::NUDGE_VERSION,
            n.prompt,
            now
        ],
    )? == 1)
}
