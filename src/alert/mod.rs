//! The alert lifecycle: verdicts of one tick in, alert transitions out.
//!
//! Decide, then apply: `decide` is a pure function from the open alert episodes, this tick's
//! verdicts and what the previous tick saw of each session (its marks) to a [`Plan`]; `apply`
//! writes the plan in one short transaction. In between, `stage` words each step's event
//! (`text`), routes it to the channels and decides its nudge; `lifecycle` runs one tick in
//! that order (reads in `load`, the optional second opinion in `opinion`), and `outbox`
//! delivers the recorded events through the channels (`crate::channels`) after it.
//!
//! Per root session (dedup key `loop:<root>`), one episode at a time: the first flagged
//! tick triggers (warning, critical on a "yes" second opinion). A later tick counts toward
//! escalation only when the tree's flagged sessions made new calls since the previous tick and
//! landed nothing; the episode escalates once, to critical, when `flagged_ticks` (1 at the
//! trigger) reaches `escalate_after_ticks` (in follow mode, whose ticks come every second or so:
//! `[follow] escalate_after_minutes` after the trigger or `escalate_after_calls` calls since it,
//! whichever first; `decide::Escalate`), or at once on a "yes" to the second question. It
//! resolves with a reason: `progress` (nothing in the tree is flagged any more), `stopped`
//! (every flagged session is idle and made no call since the previous tick, or its opencode
//! process ended, whatever it called before; in follow mode as soon as every one is idle, since
//! a turn that ended changes no row that would bring the tree into another tick before the next
//! full read; or a stop was carried out) or `gone` (the root
//! is no longer in an opencode that was read). A busy session that makes no call (a long tool, a
//! slow model) neither counts nor resolves. A tree that loops again after a resolve opens a new
//! episode. A tick that could not read opencode raises one "watchdog is blind" alert instead
//! of resolving anything, and that resolves (`readable`) with the next tick that reads.

pub mod apply;
pub mod decide;
pub mod follow;
pub mod lifecycle;
pub mod load;
pub mod opinion;
pub mod outbox;
pub mod policy;
pub mod stage;
pub mod text;

pub use decide::{decide, Plan, Step};

use crate::record::{LivenessClass, Verdict};
use crate::severity::Severity;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

pub use crate::event::{
    burned, duration, loop_key, AlertKind, Delivery, Event, Figures, Reason, Transition, BLIND_KEY,
    TEST_KEY,
};

/// Is a session doing something, by its liveness class?
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Occupancy {
    /// Busy, retrying, or waiting on a person: not stopped, even when it makes no call.
    Busy,
    /// Idle (also after an error, or with its todo list unfinished): nothing in flight.
    Idle,
    /// No liveness evidence.
    Unknown,
}

impl Occupancy {
    /// How busy a verdict says its session is.
    pub fn of(v: &Verdict) -> Occupancy {
        use LivenessClass as L;
        match v.liveness_class() {
            Some(L::Idle | L::Ended | L::Interrupted | L::NeedsFinalization) => Occupancy::Idle,
            Some(
                L::Active | L::Suspect | L::Stalled | L::LongTool | L::Retrying | L::AwaitingUser,
            ) => Occupancy::Busy,
            Some(L::Unknown) | None => Occupancy::Unknown,
        }
    }
}

/// How long after its end a finished turn is still news: a session first seen finished later
/// than this (the watchdog just installed, or down for a while) gets no done notice.
pub const DONE_FRESH_MS: i64 = 15 * 60_000;

/// The turn a verdict's session finished, when a done notice may tell it: a root session (a
/// subagent's turns are its parent's work), not flagged, idle or ended (its process gone) after
/// a turn that ended as its agent ends one: not stopped, interrupted, looping, stalled or
/// waiting for a person, nor stopped with its own todo list unfinished.
pub fn finished(v: &Verdict) -> Option<&crate::record::Turn> {
    let l = v.liveness.as_ref()?;
    let turn = l.turn.as_ref().filter(|t| t.end.is_some())?;
    let idle = matches!(l.class, LivenessClass::Idle | LivenessClass::Ended);
    (idle && !v.flagged && v.root() == v.session).then_some(turn)
}

/// When the turn a verdict's session finished ended, if a done notice may still tell it at
/// `now`: [`finished`], and within [`DONE_FRESH_MS`] of its end.
pub fn fresh_end(v: &Verdict, now: i64) -> Option<i64> {
    finished(v)?.end.filter(|end| *end >= now - DONE_FRESH_MS)
}

/// (alert kind, severity) a verdict's liveness asks for.
pub fn live_alert(v: &Verdict) -> Option<(AlertKind, Severity)> {
    let l = v.liveness.as_ref()?;
    Some((AlertKind::of_liveness(l.class)?, l.alert?))
}

/// What a tick saw of one session of an alert's tree, kept for the next tick.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct SessionMark {
    pub calls: u64,
    pub calls_since_landed: u64,
    pub cost_since_landed: f64,
    pub last_call: Option<i64>,
    pub loop_start: Option<i64>,
    pub flagged: bool,
    /// Of `calls_since_landed` and `cost_since_landed`, what an earlier episode of the tree
    /// already counted (a loop that starts again with nothing landed since it stopped); this
    /// episode's figures are the rest.
    pub base_calls: u64,
    pub base_cost: f64,
    /// With a base: this episode's first call of the session (else the loop start counts).
    pub start: Option<i64>,
}

impl SessionMark {
    /// What the previous tick keeps of a verdict.
    pub fn of(v: &Verdict) -> SessionMark {
        SessionMark {
            calls: v.calls,
            calls_since_landed: v.calls_since_landed,
            cost_since_landed: v.cost_since_landed,
            last_call: v.t,
            loop_start: v.loop_start(),
            flagged: v.flagged,
            ..SessionMark::default()
        }
    }
    /// This episode's calls of the session.
    pub fn episode_calls(&self) -> u64 {
        self.calls_since_landed.saturating_sub(self.base_calls)
    }
}

/// An episode as stored: open, or the last one of a key (to tell a loop that starts again
/// from one that merely has not moved since it resolved).
#[derive(Debug, Clone, Default)]
pub struct AlertEpisode {
    pub id: i64,
    pub key: String,
    pub kind: Option<AlertKind>,
    /// Root session (loops), session (liveness) or source (blind).
    pub subject: String,
    pub severity: Severity,
    pub flagged_ticks: u32,
    pub asked: u32,
    pub source: Option<String>,
    /// Every source the episode's tree was listed by so far (with `source`).
    pub sources: Vec<String>,
    pub opened: i64,
    pub title: String,
    pub agent: Option<String>,
    pub model: Option<String>,
    /// Closed episodes: why.
    pub reason: Option<Reason>,
    /// What the last tick saw of each session of the tree, by session id.
    pub marks: HashMap<String, SessionMark>,
    /// Loops: the figures at the trigger (the stop policy's caps count from there).
    pub trigger_calls: u64,
    pub trigger_cost: f64,
    /// Loops: when a change first landed in the tree since the trigger.
    pub landed: Option<i64>,
    /// Loops: a stop of this episode was asked (`stops`, any outcome): the policy asks once.
    pub stop_tried: bool,
    /// Loops: the stop of this episode that was carried out (the policy's or an operator's).
    pub stop: Option<StopSeen>,
    /// Loops: a stop of this episode asked for and not yet acknowledged (its `stopped` is when
    /// it was asked). The follow service can read the session's end before the stop's
    /// acknowledgement is recorded: that end is this stop's.
    pub stop_under_way: Option<StopSeen>,
    /// Where its session is, as its latest event told it (` "TITLE" in DIR`, or empty).
    pub place: String,
}

/// A carried-out stop of a loop episode (a row of the `stops` table), as its events tell it.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct StopSeen {
    pub action_id: String,
    pub session: String,
    /// `operator` (`wd-store stop`), `popup` (the popup's stop action) or the policy's trigger
    /// (`escalated`, `calls_cap`, `cost_cap`).
    pub by: String,
    /// When it was carried out, epoch ms.
    pub stopped: i64,
    pub via: Option<String>,
    pub pid: Option<u32>,
    /// Tool calls that started between the request and the stop.
    pub calls_after_request: Option<i64>,
}

impl StopSeen {
    /// Who stopped it, in words.
    pub fn who(&self) -> &'static str {
        match self.by.as_str() {
            "operator" => "the operator (wd-store stop)",
            "popup" => "the operator (the popup's stop action)",
            _ => "the watchdog",
        }
    }
}

impl AlertEpisode {
    /// Every source its tree was listed by (its first source first).
    pub fn seen_in(&self) -> Vec<String> {
        let mut v: Vec<String> = self.source.iter().cloned().collect();
        for s in &self.sources {
            if !v.contains(s) {
                v.push(s.clone());
            }
        }
        v
    }
}

/// What one tick saw.
#[derive(Debug, Default)]
pub struct TickView {
    /// One verdict per session (the last one wins when a session came twice).
    pub verdicts: Vec<Verdict>,
    /// (source, reason) of every blind record.
    pub blind: Vec<(String, String)>,
    /// Sources that answered.
    pub sources: Vec<String>,
    pub t: i64,
    /// Timer tick or follow mode's (which escalates by time and calls, not ticks).
    pub mode: crate::record::TickMode,
    /// A follow mode's partial tick: it listed only the sessions that changed (and, from
    /// wd-alert's cache, the rest of their trees) and read no source as a whole, so nothing
    /// absent is gone and a blind alert stays until a full tick reads.
    pub partial: bool,
    /// Follow mode: the tick's read on the monotonic clock (its sweep's `mono`).
    pub mono: Option<i64>,
    /// Follow mode: how long each open episode (by id) has been open, in ms on the monotonic
    /// clock ([`follow::Cache::measure`]); an episode not in it is measured by the tick's time.
    pub open_for: HashMap<i64, i64>,
}

impl TickView {
    /// How long episode `a` has been open at this tick (ms): on the monotonic clock where
    /// follow mode measured it, else by the wall clock.
    pub fn open_for(&self, a: &AlertEpisode) -> i64 {
        self.open_for
            .get(&a.id)
            .copied()
            .unwrap_or(self.t - a.opened)
    }

    /// Keeps the last verdict of each session, in the order sessions were first seen.
    pub fn dedup(&mut self) {
        let mut at: HashMap<String, usize> = HashMap::with_capacity(self.verdicts.len());
        let mut out: Vec<Verdict> = Vec::with_capacity(self.verdicts.len());
        for v in self.verdicts.drain(..) {
            match at.get(&v.session) {
                Some(&i) => out[i] = v,
                None => {
                    at.insert(v.session.clone(), out.len());
                    out.push(v);
                }
            }
        }
        self.verdicts = out;
    }
    /// Could this tick see opencode well enough to call an absent session gone? It read, with
    /// nothing blind, one of the sources that listed it (any source, when none is known): a
    /// session a server and the database both listed is gone when the database no longer
    /// has it, even once that server has exited.
    pub fn readable(&self, seen_in: &[String]) -> bool {
        self.blind.is_empty()
            && if seen_in.is_empty() {
                !self.sources.is_empty()
            } else {
                seen_in.iter().any(|s| self.sources.contains(s))
            }
    }
}
