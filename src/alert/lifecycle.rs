//! One tick of the lifecycle, in order: ask the second opinions the plan wants (when they are
//! on, without the lock); then in one write transaction load what is open (`load`), decide the
//! plan (`decide`), word it and route it (`stage`, pure but for the delivery history it reads)
//! and write it (`apply`); then send the nudges it recorded fresh (`outbox`), deliver what it
//! recorded for the episodes not to be stopped, carry out the stops the policy wants (`policy`, bounded in time) and, in a second short transaction,
//! resolve the episodes whose stop was carried out, so the stop is this tick's event.

use super::apply::{self, Prepared};
use super::decide::{self, DecisionInput, Escalate, Plan};
use super::opinion::{self, Opinion};
use super::policy::{self, Wanted};
use super::stage::{self, Nudge, Staged, TickIndex, Wording};
use super::{load, outbox, AlertEpisode, Event, TickView, Verdict};
use crate::channels::route::local_hour;
use crate::channels::EffectiveChannel;
use crate::config::Config;
use crate::record::TickMode;
use crate::store::Store;
use anyhow::Result;
use rusqlite::Connection;
use std::collections::HashMap;

/// Decides this tick's transitions and records them with their outbox. The state is read,
/// decided on and written in one write transaction (`BEGIN IMMEDIATE`), so two alerters never
/// decide on the same state: each episode opens once and no tick's decisions are lost. Second
/// opinions, the only slow part, are asked before it, on the state as it was then.
/// `key` names the tick (a rerun of it sends nothing); the events recorded come back.
pub fn run(
    store: &mut Store,
    cfg: &Config,
    chans: &[EffectiveChannel],
    tick: &TickView,
    key: &str,
    tick_id: Option<i64>,
    now: i64,
) -> Result<Vec<Event>> {
    if load::processed(&store.conn, key)? {
        eprintln!("wd-alert: {key} was already processed; nothing new to send");
        return Ok(Vec::new());
    }
    let index = TickIndex::of(tick);
    let answers = second_opinions(&store.conn, cfg, tick, &index)?;
    let tx = store.write()?;
    let written = decide_and_apply(&tx, cfg, chans, tick, &index, &answers, key, tick_id, now)?;
    tx.commit()?;
    let Some((mut events, nudges, stops)) = written else {
        eprintln!("wd-alert: {key} was already processed; nothing new to send");
        return Ok(Vec::new());
    };
    for n in nudges {
        outbox::send_nudge(store, &n)?;
    }
    if !stops.is_empty() {
        // the tick's other alerts go out before its stops, which may wait seconds for a server
        // or the plugin: they waited for every stop, one after another. A stopped episode's
        // own escalation waits, as its stop supersedes it
        let held: Vec<i64> = stops.iter().map(|w| w.episode).collect();
        outbox::deliver_pending_but(store, chans, now, &held)?;
    }
    let stopped = policy::carry_out(store, cfg, &stops)?;
    if !stopped.is_empty() {
        let tx = store.write()?;
        let more = resolve_stopped(&tx, cfg, chans, tick, &index, &stopped, key, tick_id, now)?;
        tx.commit()?;
        events.extend(more);
    }
    for ev in &events {
        outbox::log(ev);
    }
    Ok(events)
}

/// The written plan: its events, the nudges to send and the stops to carry out.
type Written = (Vec<Event>, Vec<Nudge>, Vec<Wanted>);

/// Inside a second write transaction, after the stops: resolves the episodes `ids` whose stop
/// was carried out, on this tick's verdicts, with their events and outbox.
#[allow(clippy::too_many_arguments)]
fn resolve_stopped(
    tx: &Connection,
    cfg: &Config,
    chans: &[EffectiveChannel],
    tick: &TickView,
    index: &TickIndex,
    ids: &[i64],
    key: &str,
    tick_id: Option<i64>,
    now: i64,
) -> Result<Vec<Event>> {
    let open = load::open_episodes(tx)?;
    let (last, answers, stopped) = (HashMap::new(), HashMap::new(), HashMap::new());
    let plan = decide::decide_stopped(&input(cfg, tick, &open, &last, &answers, &stopped), ids);
    let by_id: HashMap<i64, &AlertEpisode> = open.iter().map(|e| (e.id, e)).collect();
    let wording = Wording {
        cfg,
        tick,
        index,
        open: &by_id,
        now,
    };
    let mut steps = stage::stage(&wording, plan);
    route(tx, &mut steps, chans, now)?;
    let written = apply::apply(
        tx,
        Prepared {
            steps: &steps,
            index,
            open: &by_id,
            tick_key: &format!("{key}:stopped"),
            tick_id,
            now,
        },
    )?;
    Ok(written.map(|w| w.0).unwrap_or_default())
}

/// Inside the write transaction: reads what is open, decides, words, routes and writes.
#[allow(clippy::too_many_arguments)]
fn decide_and_apply(
    tx: &Connection,
    cfg: &Config,
    chans: &[EffectiveChannel],
    tick: &TickView,
    index: &TickIndex,
    answers: &HashMap<String, Opinion>,
    key: &str,
    tick_id: Option<i64>,
    now: i64,
) -> Result<Option<Written>> {
    let open = load::open_episodes(tx)?;
    let last = load::last_episodes(tx, tick, &open, cfg.alert.notify_done)?;
    let stopped = load::stopped_sessions(tx, tick)?;
    let plan = decide::decide(&input(cfg, tick, &open, &last, answers, &stopped));
    let by_id: HashMap<i64, &AlertEpisode> = open.iter().map(|e| (e.id, e)).collect();
    let stops = policy::wanted(&cfg.stop, &plan.steps, &by_id, index);
    let wording = Wording {
        cfg,
        tick,
        index,
        open: &by_id,
        now,
    };
    let mut steps = stage::stage(&wording, plan);
    route(tx, &mut steps, chans, now)?;
    let written = apply::apply(
        tx,
        Prepared {
            steps: &steps,
            index,
            open: &by_id,
            tick_key: key,
            tick_id,
            now,
        },
    )?;
    Ok(written.map(|(events, nudges)| (events, nudges, stops)))
}

fn input<'a>(
    cfg: &Config,
    tick: &'a TickView,
    open: &'a [AlertEpisode],
    last: &'a HashMap<String, AlertEpisode>,
    answers: &'a HashMap<String, Opinion>,
    stopped: &'a HashMap<String, i64>,
) -> DecisionInput<'a> {
    DecisionInput {
        open,
        last,
        tick,
        answers,
        escalate: escalate_rule(cfg, tick),
        stopped,
        done: cfg.alert.notify_done,
    }
}

/// The timer's ticks escalate by their count; the follow service's by time or calls.
fn escalate_rule(cfg: &Config, tick: &TickView) -> Escalate {
    match tick.mode {
        TickMode::Timer => Escalate::Ticks(cfg.alert.escalate_after_ticks),
        TickMode::Follow => Escalate::After {
            minutes: cfg.follow.escalate_after_minutes,
            calls: cfg.follow.escalate_after_calls,
        },
    }
}

/// The second opinions this tick's plan wants, when they are on: asked without the write lock
/// (they are HTTP calls), on the state as read now. A tree the plan in the transaction asks
/// about that was not asked here is decided without one.
fn second_opinions(
    conn: &Connection,
    cfg: &Config,
    tick: &TickView,
    index: &TickIndex,
) -> Result<HashMap<String, Opinion>> {
    if !cfg.second_opinion.enabled {
        return Ok(HashMap::new());
    }
    let open = load::open_episodes(conn)?;
    let last = load::last_episodes(conn, tick, &open, cfg.alert.notify_done)?;
    let (none, stopped) = (HashMap::new(), HashMap::new());
    let plan: Plan = decide::decide(&input(cfg, tick, &open, &last, &none, &stopped));
    let roots: Vec<String> = plan.questions().iter().map(|s| s.to_string()).collect();
    if roots.is_empty() {
        return Ok(HashMap::new());
    }
    let asked: Vec<Verdict> = roots
        .iter()
        .map(|r| index.trees[r.as_str()][0].clone())
        .collect();
    let got = opinion::ask_all(&cfg.second_opinion, &asked);
    Ok(roots.into_iter().zip(got).collect())
}

/// Routes every staged event on every channel, by what each was sent of its alert before.
fn route(
    conn: &Connection,
    steps: &mut [Staged],
    chans: &[EffectiveChannel],
    now: i64,
) -> Result<()> {
    let hour = local_hour(now);
    for s in steps.iter_mut() {
        let Some(ev) = &s.event else { continue };
        let episode = stage::episode_of(&s.step);
        let sent = chans
            .iter()
            .map(|c| load::sent_before(conn, ev, episode, &c.cfg.name))
            .collect::<Result<Vec<_>>>()?;
        s.routes = stage::routes(ev, chans, &sent, hour, now);
    }
    Ok(())
}
