//! One tick of the lifecycle, in order: load what is open (`load`, no write lock), decide the
//! plan (`decide`, with the second opinion when wanted), word it and route it (`stage`, pure
//! but for the delivery history it reads), write it in one transaction (`apply`), then send
//! the nudges it recorded fresh (`outbox`).

use super::apply::{self, Prepared};
use super::decide::{self, Input, Plan};
use super::opinion::{self, Opinion};
use super::stage::{self, Staged, TickIndex, Wording};
use super::{load, outbox, AlertEpisode, Event, TickView, Verdict};
use crate::channels::route::local_hour;
use crate::channels::EffectiveChannel;
use crate::config::Config;
use crate::store::Store;
use anyhow::Result;
use std::collections::HashMap;

/// Decides this tick's transitions and records them with their outbox, in one transaction.
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
    if load::processed(store, key)? {
        eprintln!("wd-alert: {key} was already processed; nothing new to send");
        return Ok(Vec::new());
    }
    let open = load::open_episodes(store)?;
    let last = load::last_episodes(store, tick, &open)?;
    let index = TickIndex::of(tick);
    let plan = plan(cfg, tick, &open, &last, &index);
    let by_id: HashMap<i64, &AlertEpisode> = open.iter().map(|e| (e.id, e)).collect();
    let wording = Wording {
        cfg,
        tick,
        index: &index,
        open: &by_id,
        now,
    };
    let mut steps = stage::stage(&wording, plan);
    route(store, &mut steps, chans, now)?;
    let written = apply::apply(
        store,
        Prepared {
            steps: &steps,
            index: &index,
            open: &by_id,
            tick_key: key,
            tick_id,
            now,
        },
    )?;
    let Some((events, nudges)) = written else {
        eprintln!("wd-alert: {key} was already processed; nothing new to send");
        return Ok(Vec::new());
    };
    for ev in &events {
        outbox::log(ev);
    }
    for n in nudges {
        outbox::send_nudge(store, &n)?;
    }
    Ok(events)
}

/// The plan; decided again with the answers when it wants second opinions and they are on.
fn plan(
    cfg: &Config,
    tick: &TickView,
    open: &[AlertEpisode],
    last: &HashMap<String, AlertEpisode>,
    index: &TickIndex,
) -> Plan {
    let input = |answers| Input {
        open,
        last,
        tick,
        answers,
        escalate_after: cfg.alert.escalate_after_ticks,
    };
    let no_answers = HashMap::new();
    let plan = decide::decide(&input(&no_answers));
    if !cfg.second_opinion.enabled {
        return plan;
    }
    let roots: Vec<String> = plan.questions().iter().map(|s| s.to_string()).collect();
    if roots.is_empty() {
        return plan;
    }
    let asked: Vec<Verdict> = roots
        .iter()
        .map(|r| index.trees[r.as_str()][0].clone())
        .collect();
    let got = opinion::ask_all(&cfg.second_opinion, &asked);
    let answers: HashMap<String, Opinion> = roots.into_iter().zip(got).collect();
    decide::decide(&input(&answers))
}

/// Routes every staged event on every channel, by what each was sent of its alert before.
fn route(store: &Store, steps: &mut [Staged], chans: &[EffectiveChannel], now: i64) -> Result<()> {
    let hour = local_hour(now);
    for s in steps.iter_mut() {
        let Some(ev) = &s.event else { continue };
        let episode = stage::episode_of(&s.step);
        let sent = chans
            .iter()
            .map(|c| load::sent_before(store, ev, episode, &c.cfg.name))
            .collect::<Result<Vec<_>>>()?;
        s.routes = stage::routes(ev, chans, &sent, hour, now);
    }
    Ok(())
}
