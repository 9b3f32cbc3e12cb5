//! Between deciding and applying, without I/O: each step of the plan with what it sends, its
//! event in words (`text`), where the event goes on each channel (`channels::route`) and the
//! nudge it decides. `apply` writes them as they are; nothing here holds the write lock.

use super::decide::{Marks, Plan, Step};
use super::opinion::Opinion;
use super::{
    text, AlertEpisode, AlertKind, Delivery, Event, Figures, TickView, Transition, Verdict,
};
use crate::channels::route::{route, SentBefore};
use crate::channels::EffectiveChannel;
use crate::config::Config;
use crate::record::TickMode;
use crate::severity::Severity;
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

/// Where an event goes on one channel, recorded as one row of the outbox.
#[derive(Debug, Clone, PartialEq)]
pub struct Route {
    pub channel: String,
    pub status: Delivery,
    pub detail: String,
}

/// One step of the plan with what it sends: its event (if it announces one), the event's
/// route on every channel, and its nudge.
#[derive(Debug, Clone)]
pub struct Staged {
    pub step: Step,
    pub event: Option<Event>,
    pub routes: Vec<Route>,
    pub nudge: Option<Nudge>,
}

/// This tick's verdicts by root (flagged first, then by calls since the last landed change)
/// and by session.
pub struct TickIndex<'a> {
    pub trees: HashMap<&'a str, Vec<&'a Verdict>>,
    pub sessions: HashMap<&'a str, &'a Verdict>,
}

impl<'a> TickIndex<'a> {
    pub fn of(tick: &'a TickView) -> TickIndex<'a> {
        let mut trees: HashMap<&str, Vec<&Verdict>> = HashMap::new();
        for v in &tick.verdicts {
            trees.entry(v.root()).or_default().push(v);
        }
        for t in trees.values_mut() {
            t.sort_by_key(|v| std::cmp::Reverse((v.flagged, v.calls_since_landed)));
        }
        let sessions = tick
            .verdicts
            .iter()
            .map(|v| (v.session.as_str(), v))
            .collect();
        TickIndex { trees, sessions }
    }
    /// The flagged sessions of a tree.
    fn flagged(&self, root: &str) -> Vec<&'a Verdict> {
        self.trees
            .get(root)
            .map(|t| t.iter().copied().filter(|v| v.flagged).collect())
            .unwrap_or_default()
    }
}

/// What the words of the events depend on.
pub struct Wording<'a> {
    pub cfg: &'a Config,
    pub tick: &'a TickView,
    pub index: &'a TickIndex<'a>,
    /// Open episodes by id.
    pub open: &'a HashMap<i64, &'a AlertEpisode>,
    pub now: i64,
}

/// Every step of the plan with its event and nudge; its routes are added by [`routes`].
pub fn stage(w: &Wording, plan: Plan) -> Vec<Staged> {
    plan.steps
        .into_iter()
        .map(|step| Staged {
            event: event_of(w, &step),
            nudge: nudge_of(w, &step),
            routes: Vec::new(),
            step,
        })
        .collect()
}

/// Do the figures count from an earlier episode's end (a loop that started again)?
fn again(marks: &Marks) -> bool {
    marks.iter().any(|(_, m)| m.flagged && m.base_calls > 0)
}

/// The event a step announces, in words.
fn event_of(w: &Wording, step: &Step) -> Option<Event> {
    let (cfg, now) = (w.cfg, w.now);
    match step {
        Step::Open {
            kind: AlertKind::Loop,
            subject,
            severity,
            figures,
            opinion,
            marks,
            ..
        } => {
            let news = text::LoopNews {
                state: Transition::Trigger,
                severity: *severity,
                opened: now,
                figures: figures.unwrap_or_default(),
                reason: None,
                again: again(marks),
                since_trigger: None,
            };
            Some(loop_event(w, news, subject, opinion.as_ref()))
        }
        Step::Open {
            kind: AlertKind::Blind,
            ..
        } => Some(text::blind_event(cfg, &w.tick.blind, now)),
        Step::Open {
            kind,
            subject,
            severity,
            ..
        } => {
            let v = w.index.sessions[subject.as_str()];
            Some(text::live_event(cfg, *kind, *severity, v, now))
        }
        Step::Count {
            episode,
            root,
            escalate: Some(reason),
            figures,
            opinion,
            marks,
            ..
        } => {
            let news = text::LoopNews {
                state: Transition::Escalate,
                severity: Severity::Critical,
                opened: w.open.get(episode).map(|e| e.opened).unwrap_or(now),
                figures: *figures,
                reason: Some(*reason),
                again: again(marks),
                since_trigger: since_trigger(w, *episode, figures),
            };
            let mut ev = loop_event(w, news, root, opinion.as_ref());
            ev.episode = Some(*episode);
            Some(ev)
        }
        Step::Resolve {
            episode,
            reason,
            why,
            figures,
            ..
        } => w.open.get(episode).map(|ep| {
            let counts_ticks = w.tick.mode == crate::record::TickMode::Timer;
            text::resolve_event(cfg, ep, *reason, why, *figures, counts_ticks, now)
        }),
        Step::Count { .. } | Step::Hold { .. } | Step::StillBlind { .. } => None,
    }
}

/// A loop's trigger or escalation about the flagged sessions of `root`'s tree, with the second
/// opinion that was asked, if any, in its details.
fn loop_event(w: &Wording, news: text::LoopNews, root: &str, opinion: Option<&Opinion>) -> Event {
    let mut ev = text::loop_event(w.cfg, news, &w.index.flagged(root), w.now);
    if let Some(o) = opinion {
        ev.details.insert("opinion".into(), json!(o));
    }
    ev
}

/// How long (on the monotonic clock where follow mode measured it) and how many calls after its
/// trigger an escalation comes, in follow mode, which escalates by time and calls, not by ticks.
fn since_trigger(w: &Wording, episode: i64, figures: &Figures) -> Option<(i64, u64)> {
    (w.tick.mode == TickMode::Follow).then(|| {
        let ep = w.open.get(&episode);
        let at = ep.map_or(0, |e| e.trigger_calls);
        let open_for = ep.map_or(0, |e| w.tick.open_for(e));
        (open_for, figures.calls.saturating_sub(at))
    })
}

/// The nudge a step decides: one continuation prompt into a session that stalled or stopped
/// unfinished, when `[liveness] nudge` is on.
fn nudge_of(w: &Wording, step: &Step) -> Option<Nudge> {
    let Step::Open { kind, subject, .. } = step else {
        return None;
    };
    if !w.cfg.liveness.nudge || !matches!(kind, AlertKind::Stalled | AlertKind::Unfinished) {
        return None;
    }
    let v = w.index.sessions[subject.as_str()];
    let class = v.liveness_class().map_or("", |c| c.as_str()).to_string();
    Some(Nudge {
        action: crate::scrub::hash_str(&format!(
            "{subject}|{class}|{}|{}",
            w.now,
            crate::liveness::NUDGE_VERSION
        )),
        session: subject.clone(),
        source: v.source.clone(),
        prompt: crate::liveness::nudge_prompt(&class, v.liveness_evidence()),
        observation: class,
    })
}

/// The open episode a step's event belongs to (none for a new one).
pub fn episode_of(step: &Step) -> Option<i64> {
    match step {
        Step::Count { episode, .. } | Step::Resolve { episode, .. } => Some(*episode),
        _ => None,
    }
}

/// Where `ev` goes on each channel; `sent` is what each of `chans` was sent of it before.
pub fn routes(
    ev: &Event,
    chans: &[EffectiveChannel],
    sent: &[SentBefore],
    hour: Option<u8>,
    now: i64,
) -> Vec<Route> {
    chans
        .iter()
        .zip(sent)
        .map(|(c, s)| {
            let (status, detail) = route(c, ev, *s, hour, now);
            Route {
                channel: c.cfg.name.clone(),
                status,
                detail,
            }
        })
        .collect()
}
