//! Applying a plan: every episode change, event, outbox row and nudge of one tick in one short
//! write transaction. Everything that can be worked out before it (events, routes, opinions)
//! is worked out before it, so the write lock is held only for the inserts and updates.

use super::decide::{Hold, Plan, Step};
use super::{Delivery, Episode, Event, Kind, Mark, Verdict};
use crate::store::Store;
use anyhow::Result;
use rusqlite::{params, OptionalExtension};
use serde_json::json;
use std::collections::HashMap;

/// A continuation prompt decided this tick, recorded as `sending` in the transaction.
#[derive(Debug, Clone)]
pub struct Nudge {
    pub action: String,
    pub session: String,
    pub source: Option<String>,
    pub observation: String,
    pub prompt: String,
}

/// Everything the transaction writes, worked out beforehand; `events[i]`, `routes[i]` and
/// `nudges[i]` belong to `plan.steps[i]`.
pub struct Prepared<'a> {
    pub plan: &'a Plan,
    pub events: Vec<Option<Event>>,
    pub routes: Vec<Vec<(String, Delivery, String)>>,
    pub nudges: Vec<Option<Nudge>>,
    /// This tick's verdicts by root, for the marks of loop episodes.
    pub trees: &'a HashMap<&'a str, Vec<&'a Verdict>>,
    /// This tick's verdicts by session.
    pub sessions: &'a HashMap<&'a str, &'a Verdict>,
    /// Open episodes by id (titles, opened).
    pub open: &'a HashMap<i64, &'a Episode>,
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

/// Writes the plan. `None` when another run recorded this tick first (nothing is written).
pub fn apply(store: &mut Store, p: Prepared) -> Result<Option<(Vec<Event>, Vec<Nudge>)>> {
    let now = p.now;
    let tx = store.write()?;
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
    {
        let mut mark = tx.prepare_cached(
            "INSERT INTO episode_sessions (episode, session, calls, calls_since_landed, cost_since_landed, last_call,
                 loop_start, flagged, base_calls, base_cost, start) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)
             ON CONFLICT (episode, session) DO UPDATE SET calls = ?3, calls_since_landed = ?4, cost_since_landed = ?5,
                 last_call = ?6, loop_start = ?7, flagged = ?8, base_calls = ?9, base_cost = ?10, start = ?11",
        )?;
        let mut put_marks = |episode: i64, marks: &[(String, Mark)]| -> Result<()> {
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
        };
        let mut sources = tx.prepare_cached("UPDATE episodes SET sources = ?2 WHERE id = ?1")?;
        let mut put_sources = |episode: i64, root: &str| -> Result<()> {
            let known = p
                .open
                .get(&episode)
                .map(|e| e.seen_in())
                .unwrap_or_default();
            let tree = p.trees.get(root).into_iter().flatten().copied();
            sources.execute(params![episode, seen_in(known, tree)])?;
            Ok(())
        };
        let mut ins_event = tx.prepare_cached(
            "INSERT INTO events (dedup_key, t, state, severity, body, episode, reason) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        )?;
        let mut ins_delivery = tx.prepare_cached(
            "INSERT INTO deliveries (event, channel, status, attempts, t, detail) VALUES (?1, ?2, ?3, 0, ?4, ?5)",
        )?;
        let mut opinion_of =
            tx.prepare_cached("UPDATE verdicts SET opinion = ?3 WHERE tick = ?1 AND session = ?2")?;
        for (i, step) in p.plan.steps.iter().enumerate() {
            let mut episode: Option<i64> = None;
            match step {
                Step::Open {
                    kind,
                    key,
                    subject,
                    session,
                    severity,
                    figures,
                    opinion,
                    marks,
                    ..
                } => {
                    let ev = p.events[i].as_ref();
                    let v = session.as_deref().and_then(|s| p.sessions.get(s).copied());
                    let evidence = match kind {
                        Kind::Loop => None,
                        Kind::Blind => ev
                            .and_then(|e| e.details.get("reasons"))
                            .and_then(|r| r.as_array())
                            .map(|r| {
                                r.iter()
                                    .filter_map(|x| x.as_str())
                                    .collect::<Vec<_>>()
                                    .join("; ")
                            }),
                        _ => v.map(|v| v.liveness_evidence().to_string()),
                    };
                    tx.execute(
                        "INSERT INTO episodes (dedup_key, kind, root, state, severity, peak_severity, opened, last_fired,
                             flagged_ticks, asked, agent, model, title, top_target, evidence, calls, cost, duration_ms,
                             opinion, source, last_decision, sources)
                         VALUES (?1, ?2, ?3, 'open', ?4, ?4, ?5, ?5, 1, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16,
                             'triggered', ?17)",
                        params![
                            key,
                            kind.as_str(),
                            subject,
                            severity.as_str(),
                            now,
                            opinion.is_some() as i64,
                            v.and_then(|v| v.agent.clone()),
                            v.and_then(|v| v.model.clone()),
                            ev.map(|e| e.title.clone()).unwrap_or_default(),
                            v.filter(|_| *kind == Kind::Loop).and_then(|v| v.top_target()),
                            evidence,
                            figures.map(|f| f.calls as i64),
                            figures.map(|f| f.cost),
                            figures.map(|f| f.duration_ms),
                            opinion.as_ref().map(|o| json!(o).to_string()),
                            v.and_then(|v| v.source.clone()).or_else(|| (*kind == Kind::Blind).then(|| subject.clone())),
                            match kind {
                                Kind::Loop => seen_in(Vec::new(), p.trees.get(subject.as_str()).into_iter().flatten().copied()),
                                Kind::Blind => None,
                                _ => seen_in(Vec::new(), v.into_iter()),
                            },
                        ],
                    )?;
                    let id = tx.last_insert_rowid();
                    episode = Some(id);
                    put_marks(id, marks)?;
                    if let (Some(t), Some(o), Some(v)) = (p.tick_id, opinion, v) {
                        opinion_of.execute(params![t, v.session, json!(o).to_string()])?;
                    }
                }
                Step::Count {
                    episode: id,
                    root,
                    flagged_ticks,
                    escalate,
                    figures,
                    opinion,
                    marks,
                    ..
                } => {
                    let v = p.trees.get(root.as_str()).and_then(|t| {
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
                            params![id, now, p.events[i].as_ref().map(|e| e.title.clone())],
                        )?;
                    }
                    put_marks(*id, marks)?;
                    put_sources(*id, root)?;
                    if let (Some(t), Some(o), Some(v)) = (p.tick_id, opinion, v) {
                        opinion_of.execute(params![t, v.session, json!(o).to_string()])?;
                    }
                    episode = Some(*id);
                }
                Step::Hold {
                    episode: id,
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
                        params![id, d],
                    )?;
                    put_marks(*id, marks)?;
                    put_sources(*id, root)?;
                }
                Step::Resolve {
                    episode: id,
                    reason,
                    figures,
                    marks,
                    ..
                } => {
                    let opened = p.open.get(id).map(|e| e.opened).unwrap_or(now);
                    tx.execute(
                        "UPDATE episodes SET state = 'resolved', severity = 'info', resolved = ?2, last_fired = ?2,
                             reason = ?3, calls = coalesce(?4, calls), cost = coalesce(?5, cost), duration_ms = ?6,
                             last_decision = 'resolved'
                         WHERE id = ?1",
                        params![
                            id,
                            now,
                            reason.as_str(),
                            figures.map(|f| f.calls as i64),
                            figures.map(|f| f.cost),
                            figures.map(|f| f.duration_ms).unwrap_or(now - opened),
                        ],
                    )?;
                    put_marks(*id, marks)?;
                    episode = Some(*id);
                }
                Step::StillBlind {
                    episode: id,
                    reasons,
                } => {
                    tx.execute(
                        "UPDATE episodes SET flagged_ticks = flagged_ticks + 1, evidence = ?2 WHERE id = ?1",
                        params![id, super::text::blind_evidence(reasons)],
                    )?;
                }
            }
            if let Some(mut ev) = p.events[i].clone() {
                ev.episode = episode;
                ins_event.execute(params![
                    ev.dedup_key,
                    now,
                    ev.state.as_str(),
                    ev.severity.as_str(),
                    serde_json::to_string(&ev)?,
                    episode,
                    ev.reason.map(|r| r.as_str()),
                ])?;
                let event_id = tx.last_insert_rowid();
                for (channel, status, detail) in &p.routes[i] {
                    ins_delivery.execute(params![
                        event_id,
                        channel,
                        status.as_str(),
                        now,
                        detail
                    ])?;
                }
                events.push(ev);
            }
            if let Some(n) = &p.nudges[i] {
                // one prompt per alert episode, recorded before anything is sent; a rerun finds
                // the row and sends nothing
                let fresh = tx.execute(
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
                )? == 1;
                if fresh {
                    nudges.push(n.clone());
                }
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
    tx.commit()?;
    Ok(Some((events, nudges)))
}
