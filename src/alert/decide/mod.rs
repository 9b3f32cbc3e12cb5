//! The lifecycle rules as one pure function: (open episodes, this tick's verdicts, what the
//! previous tick saw of each session) in, a [`Plan`] out. No I/O; `apply` writes the plan.
//! The rules are listed in the module docs of `alert`; the table test below has one row each.

use super::opinion::Opinion;
use super::{
    AlertEpisode, AlertKind, Figures, Occupancy, Reason, SessionMark, TickView, Verdict, BLIND_KEY,
};
use crate::record::{LivenessClass, TickMode};
use crate::severity::Severity;
use std::collections::{BTreeMap, HashMap, HashSet};

pub mod stopped;

/// Everything a decision depends on.
pub struct DecisionInput<'a> {
    /// The open episodes.
    pub open: &'a [AlertEpisode],
    /// The last closed episode of a key, for flagged trees without an open one.
    pub last: &'a HashMap<String, AlertEpisode>,
    pub tick: &'a TickView,
    /// Second opinions by root, when asked this tick.
    pub answers: &'a HashMap<String, Opinion>,
    pub escalate: Escalate,
    /// Sessions whose run a stop carried out, and when (`stopped::interrupt_of_stop`).
    pub stopped: &'a HashMap<String, i64>,
    /// `[alert] notify_done`: tell each finished turn.
    pub done: bool,
}

/// When a loop that goes on (new calls, nothing landed) becomes critical.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Escalate {
    /// The timer's ticks: at this many flagged ticks (1 at the trigger), `[alert]
    /// escalate_after_ticks`.
    Ticks(u32),
    /// Follow mode, whose ticks come every second or so: this many minutes after the trigger
    /// (on the monotonic clock, [`TickView::open_for`]) or this many calls of the tree's flagged sessions made since it,
    /// whichever comes first (`[follow] escalate_after_minutes`, `escalate_after_calls`).
    After { minutes: u64, calls: u64 },
}

impl Escalate {
    /// Does the loop escalate already at its trigger?
    fn at_trigger(self) -> bool {
        match self {
            Escalate::Ticks(n) => n <= 1,
            Escalate::After { minutes, calls } => minutes == 0 || calls == 0,
        }
    }

    /// Is it due at `flagged_ticks`, `since_ms` after the trigger, `calls` calls since it?
    fn due(self, flagged_ticks: u32, since_ms: i64, calls: u64) -> bool {
        match self {
            Escalate::Ticks(n) => flagged_ticks >= n,
            Escalate::After {
                minutes,
                calls: most,
            } => since_ms >= (minutes as i64).saturating_mul(60_000) || calls >= most,
        }
    }
}

/// Why a loop episode neither counts nor resolves this tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hold {
    /// A flagged session is busy (a long tool, a slow model, a retry, a question) but made no call.
    Quiet,
    /// A flagged session landed a change among its new calls, yet the tree is still flagged.
    Landed,
    /// No call, and no liveness evidence to tell idle from busy.
    Unknown,
}

/// One decided step.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Open an episode. `session` is the verdict it is about (loops: the most telling one).
    Open {
        kind: AlertKind,
        key: String,
        subject: String,
        session: Option<String>,
        severity: Severity,
        figures: Option<Figures>,
        /// Loops: a second opinion is wanted.
        ask: bool,
        opinion: Option<Opinion>,
        /// Loops: what this tick keeps of each session of the tree.
        marks: Marks,
    },
    /// The loop went on this tick: count it; `escalate` says why it becomes critical now.
    Count {
        episode: i64,
        root: String,
        flagged_ticks: u32,
        escalate: Option<Reason>,
        figures: Figures,
        ask: bool,
        opinion: Option<Opinion>,
        marks: Marks,
    },
    /// Neither count nor resolve.
    Hold {
        episode: i64,
        root: String,
        why: Hold,
        marks: Marks,
    },
    /// Close the episode.
    Resolve {
        episode: i64,
        key: String,
        reason: Reason,
        /// One line for people.
        why: String,
        figures: Option<Figures>,
        marks: Marks,
    },
    /// The blind alert stays open; its evidence is refreshed.
    StillBlind {
        episode: i64,
        reasons: Vec<(String, String)>,
    },
}

/// What a tick keeps of the sessions of a loop episode's tree, by session.
pub type Marks = Vec<(String, SessionMark)>;

/// The decided steps, in a stable order: open episodes first (as given), then new ones.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    pub steps: Vec<Step>,
}

impl Plan {
    /// Roots whose second opinion the plan wants.
    pub fn questions(&self) -> Vec<&str> {
        self.steps
            .iter()
            .filter_map(|s| match s {
                Step::Open {
                    kind: AlertKind::Loop,
                    ask: true,
                    subject,
                    ..
                } => Some(subject.as_str()),
                Step::Count {
                    ask: true, root, ..
                } => Some(root.as_str()),
                _ => None,
            })
            .collect()
    }
}

/// The sessions of one tree this tick.
struct Tree<'a> {
    all: Vec<&'a Verdict>,
    flagged: Vec<&'a Verdict>,
}

/// Calls since the previous tick, and whether a change landed among them.
fn moved(v: &Verdict, marks: &HashMap<String, SessionMark>) -> (u64, bool) {
    let new = match marks.get(&v.session) {
        Some(m) => v.calls.saturating_sub(m.calls),
        None => v.calls,
    };
    (new, new > 0 && v.calls_since_landed < new)
}

/// What this tick keeps of a session of a loop episode's tree. `prev`: what the episode's
/// previous tick kept of it (its base carries on while nothing lands). `before`: for an
/// episode that opens now, what the tree's previous episode left of a session it flagged; when
/// nothing landed since, that episode's count becomes this one's base, so a loop that starts
/// again after a `stopped` resolve reports its own calls, cost and time, not the earlier ones.
pub fn mark_of(
    v: &Verdict,
    prev: Option<&SessionMark>,
    before: Option<&SessionMark>,
) -> SessionMark {
    let mut m = SessionMark::of(v);
    // nothing landed since `p`: every call since then is still "since the last landing"
    let unlanded = |p: &SessionMark| {
        v.calls >= p.calls && v.calls_since_landed >= p.calls_since_landed + (v.calls - p.calls)
    };
    match (prev, before) {
        (Some(p), _) if p.base_calls > 0 && unlanded(p) => {
            m.base_calls = p.base_calls;
            m.base_cost = p.base_cost;
            m.start = p.start;
        }
        (Some(_), _) => {}
        (None, Some(b)) if b.flagged && unlanded(b) => {
            m.base_calls = b.calls_since_landed;
            m.base_cost = b.cost_since_landed;
            m.start = v.first_call_after(b.calls);
        }
        _ => {}
    }
    m
}

pub(super) fn marks_of<'a>(
    vs: &[&Verdict],
    prev: impl Fn(&str) -> Option<&'a SessionMark>,
    before: impl Fn(&str) -> Option<&'a SessionMark>,
) -> Marks {
    vs.iter()
        .map(|v| {
            let s = v.session.as_str();
            (v.session.clone(), mark_of(v, prev(s), before(s)))
        })
        .collect()
}

fn flagged_of(marks: &Marks) -> impl Iterator<Item = &SessionMark> {
    marks.iter().map(|(_, m)| m).filter(|m| m.flagged)
}

/// What the loop burned: over the given flagged sessions' marks.
pub fn figures<'a>(
    flagged: impl Iterator<Item = &'a SessionMark>,
    opened: i64,
    flagged_ticks: u32,
) -> Figures {
    let mut f = Figures {
        flagged_ticks,
        ..Figures::default()
    };
    let (mut first, mut last): (Option<i64>, Option<i64>) = (None, None);
    for m in flagged {
        let calls = m.episode_calls();
        f.calls += calls;
        f.cost += (m.cost_since_landed - m.base_cost).max(0.0);
        let start = if m.base_calls > 0 {
            if calls == 0 {
                // all its calls belong to an earlier episode: no part of this one's time
                continue;
            }
            m.start.or(m.last_call)
        } else {
            m.loop_start
        };
        first = match (first, start) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        last = last.max(m.last_call);
    }
    f.cost = (f.cost * 1e6).round() / 1e6;
    let start = first.unwrap_or(opened).min(opened);
    f.duration_ms = last.map(|l| (l - start).max(0)).unwrap_or(0);
    f
}

/// The lifecycle rules.
pub fn decide(i: &DecisionInput) -> Plan {
    let tick = i.tick;
    let trees = trees_of(tick);
    let sessions: HashMap<&str, &Verdict> = tick
        .verdicts
        .iter()
        .map(|v| (v.session.as_str(), v))
        .collect();
    let mut steps = Vec::new();
    let mut open_loops: HashSet<&str> = HashSet::new();
    let mut open_keys: HashSet<&str> = HashSet::new();
    for a in i.open {
        open_keys.insert(a.key.as_str());
        match a.kind {
            Some(AlertKind::Loop) => {
                open_loops.insert(a.subject.as_str());
                steps.extend(loop_step(i, a, trees.get(a.subject.as_str())));
            }
            Some(k) if k.is_liveness() => steps.extend(live_step(
                i,
                a,
                k,
                sessions.get(a.subject.as_str()).copied(),
            )),
            _ => {}
        }
    }
    new_loops(i, &trees, &open_loops, &mut steps);
    new_live(i, &open_keys, &mut steps);
    if i.done {
        new_done(i, &trees, &open_loops, &mut steps);
    }
    steps.extend(blind_step(i));
    Plan { steps }
}

/// This tick's trees by root, the most telling flagged verdict first.
fn trees_of(tick: &TickView) -> BTreeMap<&str, Tree<'_>> {
    let mut trees: BTreeMap<&str, Tree> = BTreeMap::new();
    for v in &tick.verdicts {
        let t = trees.entry(v.root()).or_insert_with(|| Tree {
            all: Vec::new(),
            flagged: Vec::new(),
        });
        t.all.push(v);
        if v.flagged {
            t.flagged.push(v);
        }
    }
    for t in trees.values_mut() {
        // the most telling verdict first
        t.flagged
            .sort_by_key(|v| std::cmp::Reverse(v.calls_since_landed));
    }
    trees
}

/// New loop episodes: flagged trees without one, unless it is the last one, unmoved.
fn new_loops(
    i: &DecisionInput,
    trees: &BTreeMap<&str, Tree>,
    open_loops: &HashSet<&str>,
    steps: &mut Vec<Step>,
) {
    for (root, t) in trees {
        if t.flagged.is_empty() || open_loops.contains(root) {
            continue;
        }
        let key = super::loop_key(root);
        let last = i.last.get(&key);
        if let Some(last) = last {
            if !t.flagged.iter().any(|v| moved(v, &last.marks).0 > 0)
                || stopped::quiet_since_stop(last, &t.flagged)
            {
                continue;
            }
        }
        let opinion = i.answers.get(*root).cloned();
        let severity = if opinion.as_ref().is_some_and(Opinion::yes) || i.escalate.at_trigger() {
            Severity::Critical
        } else {
            Severity::Warning
        };
        let marks = marks_of(&t.all, |_| None, |s| last.and_then(|l| l.marks.get(s)));
        steps.push(Step::Open {
            kind: AlertKind::Loop,
            key,
            subject: root.to_string(),
            session: Some(t.flagged[0].session.clone()),
            severity,
            figures: Some(figures(flagged_of(&marks), i.tick.t, 1)),
            ask: true,
            opinion,
            marks,
        });
    }
}

/// New liveness episodes, one per key.
fn new_live(i: &DecisionInput, open_keys: &HashSet<&str>, steps: &mut Vec<Step>) {
    let mut live_new: HashSet<String> = HashSet::new();
    for v in &i.tick.verdicts {
        if let Some((kind, severity)) = super::live_alert(v) {
            let key = kind.key(&v.session);
            if open_keys.contains(key.as_str()) || !live_new.insert(key.clone()) {
                continue;
            }
            // the interrupt a stop leaves is the stop's event, not news
            if kind == AlertKind::Interrupted && stopped::interrupt_of_stop(i.stopped, v) {
                continue;
            }
            // a person's own Esc is news only about a session with an open alert of its own
            // (stalled, waiting, ...): its loop's resolve says who stopped it, and a second
            // popup, which stayed open until the TUI quit, said it again (an operator's journey)
            let loop_key = super::loop_key(&v.root);
            if kind == AlertKind::Interrupted
                && v.liveness_evidence() == crate::liveness::BY_THE_USER
                && !open_keys
                    .iter()
                    .any(|k| *k != loop_key && k.ends_with(&format!(":{}", v.session)))
            {
                continue;
            }
            steps.push(Step::Open {
                kind,
                key,
                subject: v.session.clone(),
                session: Some(v.session.clone()),
                severity,
                figures: None,
                ask: false,
                opinion: None,
                marks: Vec::new(),
            });
        }
    }
}

/// Done notices: one per turn a root session finished, told once (its end is kept in the
/// notice's mark, `last_call`), while it is news ([`super::DONE_FRESH_MS`]), and never for a
/// tree that loops (its loop's resolve tells how it ended).
fn new_done(
    i: &DecisionInput,
    trees: &BTreeMap<&str, Tree>,
    open_loops: &HashSet<&str>,
    steps: &mut Vec<Step>,
) {
    for v in &i.tick.verdicts {
        let Some(end) = super::fresh_end(v, i.tick.t) else {
            continue;
        };
        let key = AlertKind::Done.key(&v.session);
        let told = i
            .last
            .get(&key)
            .and_then(|l| l.marks.get(&v.session))
            .and_then(|m| m.last_call);
        let looping = open_loops.contains(v.root())
            || trees.get(v.root()).is_some_and(|t| !t.flagged.is_empty());
        if told.is_some_and(|t| t >= end) || looping {
            continue;
        }
        steps.push(Step::Open {
            kind: AlertKind::Done,
            key,
            subject: v.session.clone(),
            session: Some(v.session.clone()),
            severity: Severity::Info,
            figures: None,
            ask: false,
            opinion: None,
            marks: vec![(
                v.session.clone(),
                SessionMark {
                    last_call: Some(end),
                    ..SessionMark::of(v)
                },
            )],
        });
    }
}

/// Blind: one alert while any source is unreadable; resolved by the next tick that reads.
fn blind_step(i: &DecisionInput) -> Option<Step> {
    let tick = i.tick;
    let blind_open = i.open.iter().find(|a| a.key == BLIND_KEY);
    match (tick.blind.is_empty(), blind_open) {
        (false, Some(a)) => Some(Step::StillBlind {
            episode: a.id,
            reasons: tick.blind.clone(),
        }),
        (false, None) => Some(Step::Open {
            kind: AlertKind::Blind,
            key: BLIND_KEY.into(),
            subject: tick.blind[0].0.clone(),
            session: None,
            severity: Severity::Warning,
            figures: None,
            ask: false,
            opinion: None,
            marks: Vec::new(),
        }),
        // a partial tick read only what changed: the source that was blind may still be
        (true, Some(_)) if tick.partial => None,
        (true, Some(a)) => Some(Step::Resolve {
            episode: a.id,
            key: a.key.clone(),
            reason: Reason::Readable,
            why: "every source is readable again".into(),
            figures: None,
            marks: Vec::new(),
        }),
        (true, None) => None,
    }
}

fn loop_step(i: &DecisionInput, a: &AlertEpisode, tree: Option<&Tree>) -> Option<Step> {
    if a.stop.is_some() {
        return stopped_step(a, tree);
    }
    let resolve = |reason: Reason, why: &str, f: Figures, marks: Marks| Step::Resolve {
        episode: a.id,
        key: a.key.clone(),
        reason,
        why: why.into(),
        figures: Some(f),
        marks,
    };
    let marked = || {
        figures(
            a.marks.values().filter(|m| m.flagged),
            a.opened,
            a.flagged_ticks,
        )
    };
    let Some(t) = tree else {
        // nothing of the tree in this tick: gone, if the tick could see its source
        return i.tick.readable(&a.seen_in()).then(|| {
            resolve(
                Reason::Gone,
                "the root session is no longer in the sources that listed it",
                marked(),
                Vec::new(),
            )
        });
    };
    let marks = marks_of(&t.all, |s| a.marks.get(s), |_| None);
    if t.flagged.is_empty() {
        // a stop asked for this episode, not yet acknowledged: the call it aborts answers
        // unlike the loop's, so the detector lets go of the loop before the stop is recorded.
        // Once the sessions that looped are no longer busy that is the stop's end; while they
        // are, the stop's record or their end comes in a later tick
        if let Some(stop) = &a.stop_under_way {
            let looped: Vec<&Verdict> = t
                .all
                .iter()
                .copied()
                .filter(|v| a.marks.get(&v.session).is_some_and(|m| m.flagged))
                .collect();
            let looped = if looped.is_empty() { &t.all } else { &looped };
            if looped.iter().all(|v| Occupancy::of(v) == Occupancy::Idle) {
                return Some(resolve(
                    Reason::Stopped,
                    &stopped::stopped_why(stop),
                    marked(),
                    marks,
                ));
            }
            // the held marks keep which sessions looped: the stop's resolve counts their calls
            let marks = marks
                .into_iter()
                .map(|(s, mut m)| {
                    m.flagged |= a.marks.get(&s).is_some_and(|p| p.flagged);
                    (s, m)
                })
                .collect();
            return Some(Step::Hold {
                episode: a.id,
                root: a.subject.clone(),
                why: Hold::Quiet,
                marks,
            });
        }
        // said as it happened: a change that landed, or calls that no longer repeat (new
        // calls, an output that moved) with nothing landed
        let landed = t.all.iter().any(|v| moved(v, &a.marks).1);
        let why = if landed {
            "a change landed: no session of the tree is flagged any more"
        } else {
            "its calls no longer repeat, though nothing landed: no session of the tree is flagged any more"
        };
        return Some(resolve(Reason::Progress, why, marked(), marks));
    }
    let mut new_calls = 0;
    let mut landed = false;
    for v in &t.flagged {
        let (n, l) = moved(v, &a.marks);
        new_calls += n;
        landed |= l;
    }
    let acts: Vec<Occupancy> = t.flagged.iter().map(|v| Occupancy::of(v)).collect();
    let all_idle = acts.iter().all(|x| *x == Occupancy::Idle);
    // every flagged session's process ended: the loop cannot go on, whatever it did since the
    // last tick, and the follow service may read nothing more of it (no change comes) to resolve
    let all_ended = t
        .flagged
        .iter()
        .all(|v| v.liveness_class() == Some(LivenessClass::Ended));
    // The timer's next tick comes anyway and resolves a loop that ended with these calls.
    // Follow mode's next tick of this tree comes only when its rows change again, which an
    // ended turn's do not, so waiting for "no call since the last tick" held the resolve to
    // the next full read (a minute, by default), and a loop whose last calls and end came in
    // one read (a poll after a suspend, a fast model) escalated as still looping meanwhile.
    let ended_now = all_ended || (all_idle && i.tick.mode == TickMode::Follow);
    if new_calls > 0 && !landed && !ended_now {
        return Some(count_step(i, a, marks));
    }
    if landed {
        return Some(Step::Hold {
            episode: a.id,
            root: a.subject.clone(),
            why: Hold::Landed,
            marks,
        });
    }
    if all_idle {
        let ended = t
            .flagged
            .iter()
            .any(|v| v.liveness_class() == Some(LivenessClass::Ended));
        // Ctrl-C to `opencode run` records the abort before the process exits: which of the
        // two a read sees first is a race
        let by_user = t
            .flagged
            .iter()
            .any(|v| v.liveness_evidence() == crate::liveness::BY_THE_USER);
        // another agent's session (Claude Code, Codex) has neither opencode's process nor its keys
        let opencode = t.flagged.iter().all(|v| {
            v.program
                .map_or(true, |p| p == crate::record::Program::Opencode)
        });
        // a stop asked for this episode ended it, its acknowledgement not recorded yet (the
        // operator's, from the popup or `wd-store stop`, read by the follow service as it ends)
        if let Some(stop) = &a.stop_under_way {
            return Some(resolve(
                Reason::Stopped,
                &stopped::stopped_why(stop),
                figures(flagged_of(&marks), a.opened, a.flagged_ticks),
                marks,
            ));
        }
        return Some(resolve(
            Reason::Stopped,
            if ended && opencode {
                "the opencode process ended: no flagged session runs any more"
            } else if ended {
                "the agent's process ended: no flagged session runs any more"
            } else if by_user && opencode {
                "interrupted by the user (Esc in the TUI, Ctrl-C to opencode run): no flagged session runs any more"
            } else if by_user {
                "interrupted by the user (Esc in its session, or Ctrl-C): no flagged session runs any more"
            } else if new_calls > 0 {
                "the loop stopped: every flagged session is idle, its turn over"
            } else {
                "the loop stopped: every flagged session is idle and made no call since the last tick"
            },
            figures(flagged_of(&marks), a.opened, a.flagged_ticks),
            marks,
        ));
    }
    Some(Step::Hold {
        episode: a.id,
        root: a.subject.clone(),
        why: if acts.contains(&Occupancy::Busy) {
            Hold::Quiet
        } else {
            Hold::Unknown
        },
        marks,
    })
}

/// The episode's stop was carried out: it resolves, with this tick's marks of its tree.
fn stopped_step(a: &AlertEpisode, tree: Option<&Tree>) -> Option<Step> {
    let marks = tree.map(|t| marks_of(&t.all, |s| a.marks.get(s), |_| None));
    stopped::stopped_step(a, marks)
}

/// The steps of the episodes `ids` whose stop was carried out since the plan of this tick was
/// applied: each resolves now (`policy`), on this tick's verdicts.
pub fn decide_stopped(i: &DecisionInput, ids: &[i64]) -> Plan {
    let trees = trees_of(i.tick);
    let steps = i
        .open
        .iter()
        .filter(|a| ids.contains(&a.id) && a.kind == Some(AlertKind::Loop))
        .filter_map(|a| stopped_step(a, trees.get(a.subject.as_str())))
        .collect();
    Plan { steps }
}

/// The loop went on: count the tick, and escalate when the [`Escalate`] rule says it is due
/// or the second opinion says yes.
fn count_step(i: &DecisionInput, a: &AlertEpisode, marks: Marks) -> Step {
    let n = a.flagged_ticks + 1;
    let critical = a.severity == Severity::Critical;
    let opinion = i.answers.get(&a.subject).cloned();
    let figures = figures(flagged_of(&marks), a.opened, n);
    let since_trigger = figures.calls.saturating_sub(a.trigger_calls);
    let escalate = if critical {
        None
    } else if i.escalate.due(n, i.tick.open_for(a), since_trigger) {
        Some(Reason::StillLooping)
    } else if opinion.as_ref().is_some_and(Opinion::yes) {
        Some(Reason::SecondOpinion)
    } else {
        None
    };
    Step::Count {
        episode: a.id,
        root: a.subject.clone(),
        flagged_ticks: n,
        escalate,
        figures,
        ask: !critical && a.asked == 1 && escalate != Some(Reason::StillLooping),
        opinion,
        marks,
    }
}

fn live_step(
    i: &DecisionInput,
    a: &AlertEpisode,
    kind: AlertKind,
    v: Option<&Verdict>,
) -> Option<Step> {
    let resolve = |reason: Reason, why: String| Step::Resolve {
        episode: a.id,
        key: a.key.clone(),
        reason,
        why,
        figures: None,
        marks: Vec::new(),
    };
    match v {
        Some(v) if super::live_alert(v).map(|x| x.0) == Some(kind) => None,
        Some(v) => match v.liveness_class() {
            Some(LivenessClass::Ended) => Some(resolve(
                Reason::Stopped,
                format!(
                    "the {} process ended",
                    v.program
                        .unwrap_or(crate::record::Program::Opencode)
                        .display()
                ),
            )),
            Some(class) if class != LivenessClass::Unknown => {
                let (reason, why) = liveness_end(v, class);
                Some(resolve(reason, why))
            }
            _ => None,
        },
        None if i.tick.readable(&a.seen_in()) => Some(resolve(
            Reason::Gone,
            "the session is no longer in the sources that listed it".into(),
        )),
        None => None,
    }
}

/// Why a liveness alert ends when its session is in `class` now (not its own alert's class, not
/// ended, not unknown): a person or an error stopped it (stopped), it is in a state that has its
/// own alert (changed), or it makes progress again or finished its turn (recovered).
fn liveness_end(v: &Verdict, class: LivenessClass) -> (Reason, String) {
    let evidence = v.liveness.as_ref().map_or("", |l| l.evidence.as_str());
    match class {
        LivenessClass::Interrupted => (Reason::Stopped, format!("the session stopped: {evidence}")),
        c if AlertKind::of_liveness(c).is_some() => (
            Reason::Changed,
            format!("the session is {} now: {evidence}", c.as_str()),
        ),
        c => (
            Reason::Recovered,
            format!("the session is {} now", c.as_str()),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{CallRef, Liveness};
    use serde_json::json;

    const T: i64 = 1_796_000_000_000;
    const SRC: &str = "http://s";

    /// A verdict: session, flagged, total calls, liveness class.
    fn v(session: &str, flagged: bool, calls: u64, class: &str) -> Verdict {
        Verdict {
            session: session.into(),
            root: "r".into(),
            flagged,
            calls,
            calls_since_landed: calls,
            cost_since_landed: calls as f64 * 0.01,
            t: Some(T + calls as i64 * 1000),
            first_flag: Some(CallRef {
                index: 0,
                t: T,
                id: "prt_1".into(),
            }),
            source: Some(SRC.into()),
            liveness: (!class.is_empty()).then(|| Liveness {
                class: serde_json::from_value(json!(class)).unwrap(),
                ..Liveness::default()
            }),
            ..Verdict::default()
        }
    }

    /// An open loop episode on root `r` whose previous tick saw `marks` (session, calls).
    fn open(ticks: u32, sev: Severity, marks: &[(&str, u64)]) -> AlertEpisode {
        AlertEpisode {
            id: 7,
            key: "loop:r".into(),
            kind: Some(AlertKind::Loop),
            subject: "r".into(),
            severity: sev,
            flagged_ticks: ticks,
            asked: 0,
            source: Some(SRC.into()),
            opened: T,
            marks: marks
                .iter()
                .map(|(s, c)| {
                    (
                        s.to_string(),
                        SessionMark {
                            calls: *c,
                            calls_since_landed: *c,
                            flagged: true,
                            ..SessionMark::default()
                        },
                    )
                })
                .collect(),
            ..AlertEpisode::default()
        }
    }

    fn tick(vs: Vec<Verdict>) -> TickView {
        TickView {
            verdicts: vs,
            sources: vec![SRC.into()],
            t: T + 300_000,
            ..TickView::default()
        }
    }

    fn run(open: Vec<AlertEpisode>, t: TickView) -> Vec<Step> {
        run_with(open, HashMap::new(), t, HashMap::new())
    }

    fn run_with(
        open: Vec<AlertEpisode>,
        last: HashMap<String, AlertEpisode>,
        t: TickView,
        answers: HashMap<String, Opinion>,
    ) -> Vec<Step> {
        decide(&DecisionInput {
            open: &open,
            last: &last,
            tick: &t,
            answers: &answers,
            escalate: Escalate::Ticks(3),
            stopped: &HashMap::new(),
            done: false,
        })
        .steps
    }

    /// A compact name for a step, for the table.
    fn name(s: &Step) -> String {
        match s {
            Step::Open { kind, severity, .. } => {
                format!("open {} {}", kind.as_str(), severity.as_str())
            }
            Step::Count {
                flagged_ticks,
                escalate,
                ..
            } => match escalate {
                Some(r) => format!("escalate {} at {flagged_ticks}", r.as_str()),
                None => format!("count {flagged_ticks}"),
            },
            Step::Hold { why, .. } => format!("hold {why:?}"),
            Step::Resolve { reason, .. } => format!("resolve {}", reason.as_str()),
            Step::StillBlind { .. } => "still blind".into(),
        }
    }

    fn yes() -> Opinion {
        Opinion {
            answer: "yes".into(),
            line: "yes".into(),
            model: "m".into(),
        }
    }

    /// A loop unflagged says truly why: "a change landed" only when one did (it said so for a
    /// re-read loop unflagged by a killed run's last call, with nothing landed).
    #[test]
    fn a_loop_that_is_no_longer_flagged_says_whether_a_change_landed() {
        let why = |v: Verdict| match &run(
            vec![open(2, Severity::Warning, &[("r", 52)])],
            tick(vec![v]),
        )[..]
        {
            [Step::Resolve { reason, why, .. }] => (reason.as_str(), why.clone()),
            other => panic!("{:?}", other.iter().map(name).collect::<Vec<_>>()),
        };
        // 8 calls since the mark, 3 since a landing
        let landed = Verdict {
            calls_since_landed: 3,
            ..v("r", false, 60, "active")
        };
        assert_eq!(
            why(landed),
            (
                "progress",
                "a change landed: no session of the tree is flagged any more".into()
            )
        );
        // 8 calls since the mark, none landed
        let unlanded = Verdict {
            calls_since_landed: 60,
            ..v("r", false, 60, "active")
        };
        assert_eq!(
            why(unlanded),
            (
                "progress",
                "its calls no longer repeat, though nothing landed: no session of the tree is flagged any more".into()
            )
        );
    }

    /// Regression (#41): every liveness alert that ended because its session changed state
    /// resolved "recovered": a retrying session that stalled, a stalled one the operator
    /// aborted. Each now says why it ended: (alert, session's class now, evidence) -> resolve.
    #[test]
    fn a_liveness_alert_ends_saying_truly_why() {
        let rows = [
            (
                AlertKind::Retrying,
                "stalled",
                "busy and silent for 950 s (hard threshold 900 s)",
                "changed",
                "the session is stalled now: busy and silent for 950 s (hard threshold 900 s)",
            ),
            (
                AlertKind::Stalled,
                "interrupted",
                crate::liveness::BY_THE_USER,
                "stopped",
                "the session stopped: interrupted by the user",
            ),
            (
                AlertKind::Stalled,
                "awaiting_user",
                "1 permission and 0 question request(s) wait for a person",
                "changed",
                "the session is awaiting_user now: 1 permission and 0 question request(s) wait for a person",
            ),
            (
                AlertKind::Stalled,
                "active",
                "progress 3 s ago",
                "recovered",
                "the session is active now",
            ),
            (
                AlertKind::Retrying,
                "idle",
                "idle, nothing pending",
                "recovered",
                "the session is idle now",
            ),
        ];
        for (kind, class, evidence, reason, why) in rows {
            let mut s = v("s", false, 3, class);
            s.liveness.as_mut().unwrap().evidence = evidence.into();
            let a = AlertEpisode {
                id: 9,
                key: kind.key("s"),
                kind: Some(kind),
                subject: "s".into(),
                source: Some(SRC.into()),
                ..AlertEpisode::default()
            };
            let steps = run(vec![a], tick(vec![s]));
            let got: Vec<(String, String)> = steps
                .iter()
                .filter_map(|st| match st {
                    Step::Resolve { reason, why, .. } => {
                        Some((reason.as_str().to_string(), why.clone()))
                    }
                    _ => None,
                })
                .collect();
            assert_eq!(
                got,
                [(reason.to_string(), why.to_string())],
                "{} -> {class}",
                kind.as_str()
            );
        }
    }

    #[test]
    fn one_row_per_rule() {
        let w = Severity::Warning;
        let blind = || {
            let mut t = tick(vec![]);
            t.blind.push((SRC.into(), "shape".into()));
            t
        };
        let rows: Vec<(&str, Vec<AlertEpisode>, TickView, &str)> = vec![
            (
                "the first flagged tick triggers, once per tree",
                vec![],
                tick(vec![
                    v("c1", true, 40, "active"),
                    v("c2", true, 30, "active"),
                    v("r", false, 3, "active"),
                ]),
                "open loop warning",
            ),
            (
                "a flagged tree that made new calls counts (2 of 3)",
                vec![open(1, w, &[("r", 40)])],
                tick(vec![v("r", true, 52, "active")]),
                "count 2",
            ),
            (
                "the third flagged tick escalates",
                vec![open(2, w, &[("r", 52)])],
                tick(vec![v("r", true, 64, "active")]),
                "escalate still_looping at 3",
            ),
            (
                "critical already: counted, never escalated twice",
                vec![open(3, Severity::Critical, &[("r", 64)])],
                tick(vec![v("r", true, 70, "active")]),
                "count 4",
            ),
            (
                "busy but quiet (a long tool): neither counts nor resolves",
                vec![open(2, w, &[("r", 52)])],
                tick(vec![v("r", true, 52, "long_tool")]),
                "hold Quiet",
            ),
            (
                "one flagged session idle, another busy and quiet: held",
                vec![open(2, w, &[("r", 52), ("c", 9)])],
                tick(vec![v("r", true, 52, "idle"), v("c", true, 9, "retrying")]),
                "hold Quiet",
            ),
            (
                "no call and no liveness evidence: held, not resolved",
                vec![open(2, w, &[("r", 52)])],
                tick(vec![v("r", true, 52, "")]),
                "hold Unknown",
            ),
            (
                "every flagged session idle with no new call: resolved stopped",
                vec![open(1, w, &[("r", 52), ("c", 9)])],
                tick(vec![
                    v("r", true, 52, "idle"),
                    v("c", true, 9, "needs_finalization"),
                    v("k", false, 2, "active"),
                ]),
                "resolve stopped",
            ),
            (
                "idle but it made calls since the last tick: still counts",
                vec![open(1, w, &[("r", 40)])],
                tick(vec![v("r", true, 52, "idle")]),
                "count 2",
            ),
            (
                "follow mode: idle with its last calls in this tick: resolved stopped, not counted",
                vec![open(1, w, &[("r", 40)])],
                TickView {
                    mode: TickMode::Follow,
                    ..tick(vec![v("r", true, 52, "idle")])
                },
                "resolve stopped",
            ),
            (
                "follow mode: still busy with new calls: counts",
                vec![open(1, w, &[("r", 40)])],
                TickView {
                    mode: TickMode::Follow,
                    ..tick(vec![v("r", true, 52, "active")])
                },
                "count 2",
            ),
            (
                "follow mode: idle after a landed change: held, as the timer",
                vec![open(1, w, &[("r", 40)])],
                TickView {
                    mode: TickMode::Follow,
                    ..tick(vec![Verdict {
                        calls_since_landed: 5,
                        ..v("r", true, 52, "idle")
                    }])
                },
                "hold Landed",
            ),
            (
                "every flagged session's process ended, with calls since the last tick: resolved stopped",
                vec![open(1, w, &[("r", 40)])],
                tick(vec![v("r", true, 52, "ended")]),
                "resolve stopped",
            ),
            (
                "nothing flagged any more: resolved progress",
                vec![open(2, w, &[("r", 52)])],
                tick(vec![v("r", false, 60, "active")]),
                "resolve progress",
            ),
            (
                "the tree is gone from a readable opencode: resolved gone",
                vec![open(2, w, &[("r", 52)])],
                tick(vec![Verdict {
                    root: "x".into(),
                    ..v("x", false, 1, "idle")
                }]),
                "resolve gone",
            ),
            (
                "a blind tick resolves nothing and opens the blind alert",
                vec![open(2, w, &[("r", 52)])],
                blind(),
                "open blind warning",
            ),
        ];
        for (rule, open, t, want) in rows {
            let got: Vec<String> = run(open, t).iter().map(name).collect();
            assert_eq!(got, [want], "{rule}");
        }
    }

    #[test]
    fn a_change_that_lands_in_a_still_flagged_tree_holds() {
        let mut l = v("r", true, 60, "active");
        l.calls_since_landed = 3; // 8 new calls, a landing 3 calls ago
        let got = run(
            vec![open(2, Severity::Warning, &[("r", 52)])],
            tick(vec![l]),
        );
        assert_eq!(got.iter().map(name).collect::<Vec<_>>(), ["hold Landed"]);
    }

    #[test]
    fn a_second_yes_escalates_at_once_and_the_second_question_is_asked_once() {
        let mut a = open(1, Severity::Warning, &[("r", 40)]);
        a.asked = 1;
        let t = tick(vec![v("r", true, 52, "active")]);
        let plan = decide(&DecisionInput {
            open: std::slice::from_ref(&a),
            last: &HashMap::new(),
            tick: &t,
            answers: &HashMap::new(),
            escalate: Escalate::Ticks(3),
            stopped: &HashMap::new(),
            done: false,
        });
        assert_eq!(plan.questions(), ["r"]);
        let answers = HashMap::from([("r".to_string(), yes())]);
        let got = run_with(vec![a.clone()], HashMap::new(), t, answers);
        assert_eq!(
            got.iter().map(name).collect::<Vec<_>>(),
            ["escalate second_opinion at 2"]
        );
        a.asked = 2;
        let t = tick(vec![v("r", true, 64, "active")]);
        let plan = decide(&DecisionInput {
            open: &[a],
            last: &HashMap::new(),
            tick: &t,
            answers: &HashMap::new(),
            escalate: Escalate::Ticks(3),
            stopped: &HashMap::new(),
            done: false,
        });
        assert!(plan.questions().is_empty());
    }

    /// Follow mode escalates by the time since the trigger or the calls since it, whichever
    /// first, however many ticks counted (hundreds, at one a second); the timer by ticks.
    #[test]
    fn follow_mode_escalates_by_minutes_or_calls_since_the_trigger_not_by_ticks() {
        let follow = Escalate::After {
            minutes: 5,
            calls: 100,
        };
        let step = |ticks: u32, at: i64, calls: u64, rule: Escalate| {
            // triggered at T with 30 calls since the last landing; one new call this tick
            let mut a = open(ticks, Severity::Warning, &[("r", calls - 1)]);
            a.trigger_calls = 30;
            let mut t = tick(vec![v("r", true, calls, "active")]);
            t.t = T + at;
            let got = decide(&DecisionInput {
                open: &[a],
                last: &HashMap::new(),
                tick: &t,
                answers: &HashMap::new(),
                escalate: rule,
                stopped: &HashMap::new(),
                done: false,
            });
            name(&got.steps[0])
        };
        const MIN: i64 = 60_000;
        // 400 ticks in, 4 min 59 s and 99 calls after the trigger: still counting
        assert_eq!(step(400, 5 * MIN - 1000, 129, follow), "count 401");
        // 5 minutes after it
        assert_eq!(
            step(400, 5 * MIN, 201, follow),
            "escalate still_looping at 401"
        );
        // 100 calls after it (130 since the last landing, 30 of them before the trigger)
        assert_eq!(step(2, 40_000, 130, follow), "escalate still_looping at 3");
        // the timer's rule reads only the ticks
        assert_eq!(
            step(2, 40_000, 201, Escalate::Ticks(3)),
            "escalate still_looping at 3"
        );
        assert_eq!(step(1, 20 * MIN, 500, Escalate::Ticks(3)), "count 2");
        // issue 42: the wall clock stepped an hour forward a minute after the trigger; the
        // monotonic clock says a minute
        let mut a = open(60, Severity::Warning, &[("r", 40)]);
        a.trigger_calls = 30;
        let mut t = tick(vec![v("r", true, 41, "active")]);
        t.t = T + 61 * MIN;
        let decided = |t: &TickView| {
            name(
                &decide(&DecisionInput {
                    open: std::slice::from_ref(&a),
                    last: &HashMap::new(),
                    tick: t,
                    answers: &HashMap::new(),
                    escalate: follow,
                    stopped: &HashMap::new(),
                    done: false,
                })
                .steps[0],
            )
        };
        assert_eq!(decided(&t), "escalate still_looping at 61");
        t.open_for.insert(a.id, MIN);
        assert_eq!(decided(&t), "count 61");
        // zero of either: critical at the trigger, as escalate_after_ticks = 1 does
        assert!(Escalate::After {
            minutes: 0,
            calls: 100
        }
        .at_trigger());
        assert!(!follow.at_trigger());
    }

    #[test]
    fn a_yes_at_the_trigger_opens_critical() {
        let answers = HashMap::from([("r".to_string(), yes())]);
        let got = run_with(
            vec![],
            HashMap::new(),
            tick(vec![v("r", true, 40, "active")]),
            answers,
        );
        assert_eq!(
            got.iter().map(name).collect::<Vec<_>>(),
            ["open loop critical"]
        );
    }

    #[test]
    fn a_stopped_loop_opens_no_new_episode_until_it_loops_again() {
        let mut last = open(2, Severity::Warning, &[("r", 52)]);
        last.reason = Some(Reason::Stopped);
        let lasts = HashMap::from([(last.key.clone(), last)]);
        let unmoved = run_with(
            vec![],
            lasts.clone(),
            tick(vec![v("r", true, 52, "idle")]),
            HashMap::new(),
        );
        assert_eq!(unmoved, []);
        let again = run_with(
            vec![],
            lasts,
            tick(vec![v("r", true, 60, "active")]),
            HashMap::new(),
        );
        assert_eq!(
            again.iter().map(name).collect::<Vec<_>>(),
            ["open loop warning"]
        );
    }

    /// Regression (#41): a click on the popup's stop action ended a real `opencode run`, and
    /// the follow service read its end before the click helper recorded the plugin's
    /// acknowledgement: the loop resolved "the opencode process ended", saying nothing of who
    /// stopped it or how to resume. A stop under way ends the loop as that stop; while the loop
    /// goes on it is not news yet.
    #[test]
    fn a_loop_that_ends_while_its_stop_is_under_way_resolves_as_that_stop() {
        let mut a = open(1, Severity::Warning, &[("r", 5)]);
        a.stop_tried = true;
        a.stop_under_way = Some(crate::alert::StopSeen {
            action_id: "stop:r:episode:7".into(),
            session: "r".into(),
            by: "popup".into(),
            stopped: T + 6_000,
            via: Some("plugin".into()),
            ..crate::alert::StopSeen::default()
        });
        match &run(vec![a.clone()], tick(vec![v("r", true, 6, "ended")]))[..] {
            [Step::Resolve { reason, why, .. }] => assert_eq!(
                (reason.as_str(), why.as_str()),
                (
                    "stopped",
                    "session r stopped by the operator (the popup's stop action)"
                )
            ),
            other => panic!("{other:?}"),
        }
        let going_on: Vec<String> = run(vec![a.clone()], tick(vec![v("r", true, 9, "active")]))
            .iter()
            .map(name)
            .collect();
        assert_eq!(going_on, ["count 2"]);
        // Regression (#41, stop 47's CI): the call the stop aborted answered unlike the loop's,
        // the detector let go of the loop, and the loop resolved "its calls no longer repeat"
        // before the click helper recorded the stop. Unflagged and idle, it ends as the stop
        match &run(vec![a.clone()], tick(vec![v("r", false, 6, "idle")]))[..] {
            [Step::Resolve {
                reason,
                why,
                figures: Some(f),
                ..
            }] => assert_eq!(
                (reason.as_str(), why.as_str(), f.calls),
                (
                    "stopped",
                    "session r stopped by the operator (the popup's stop action)",
                    5
                )
            ),
            other => panic!("{other:?}"),
        }
        // unflagged while still busy: held, and the held marks still say which session looped
        match &run(vec![a], tick(vec![v("r", false, 6, "active")]))[..] {
            [Step::Hold {
                why: Hold::Quiet,
                marks,
                ..
            }] => assert!(marks[0].1.flagged, "{marks:?}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_users_interrupt_alerts_only_about_a_session_already_alerted_on() {
        let interrupted = |session: &str, evidence: &str| {
            let mut x = v(session, false, 5, "interrupted");
            x.root = session.into();
            x.liveness = Some(Liveness {
                class: LivenessClass::Interrupted,
                alert: Some(Severity::Info),
                evidence: evidence.into(),
                ..Liveness::default()
            });
            x
        };
        let by_user = crate::liveness::BY_THE_USER;
        // Esc in a session nothing was said about: no alert
        let got: Vec<String> = run(vec![], tick(vec![interrupted("q", by_user)]))
            .iter()
            .map(name)
            .collect();
        assert!(got.is_empty(), "{got:?}");
        // Esc in the looping session `r`: its loop resolves, saying so (below), and nothing
        // more opens
        let mut r = interrupted("r", by_user);
        r.flagged = true;
        let got: Vec<String> = run(vec![open(1, Severity::Warning, &[("r", 5)])], tick(vec![r]))
            .iter()
            .map(name)
            .collect();
        assert_eq!(got, ["resolve stopped"]);
        // and the resolve says who stopped it (Ctrl-C's abort can be read before its process
        // is seen gone)
        let mut r = interrupted("r", by_user);
        r.flagged = true;
        match &run(vec![open(1, Severity::Warning, &[("r", 5)])], tick(vec![r]))[0] {
            Step::Resolve { why, .. } => assert_eq!(
                why,
                "interrupted by the user (Esc in the TUI, Ctrl-C to opencode run): no flagged session runs any more"
            ),
            other => panic!("{other:?}"),
        }
        // Esc in an interactive Claude Code session: no opencode words
        let mut r = interrupted("r", by_user);
        r.flagged = true;
        r.program = Some(crate::record::Program::ClaudeCode);
        match &run(vec![open(1, Severity::Warning, &[("r", 5)])], tick(vec![r]))[0] {
            Step::Resolve { why, .. } => assert_eq!(
                why,
                "interrupted by the user (Esc in its session, or Ctrl-C): no flagged session runs any more"
            ),
            other => panic!("{other:?}"),
        }
        // a provider's error is news either way
        let got: Vec<String> = run(
            vec![],
            tick(vec![interrupted(
                "q",
                "stopped after an assistant error: APIError",
            )]),
        )
        .iter()
        .map(name)
        .collect();
        assert_eq!(got, ["open interrupted info"]);
    }

    #[test]
    fn two_verdicts_for_one_session_give_one_trigger_per_key() {
        let mut stalled = v("s", false, 5, "stalled");
        stalled.liveness = Some(Liveness {
            class: LivenessClass::Stalled,
            alert: Some(Severity::Warning),
            ..Liveness::default()
        });
        let mut t = tick(vec![
            stalled.clone(),
            stalled,
            v("r", true, 40, "active"),
            v("r", true, 41, "active"),
        ]);
        t.dedup();
        let got: Vec<String> = run(vec![], t).iter().map(name).collect();
        assert_eq!(got, ["open loop warning", "open stalled warning"]);
    }

    #[test]
    fn the_stopped_resolve_says_what_the_loop_burned() {
        let got = run(
            vec![open(2, Severity::Warning, &[("r", 52)])],
            tick(vec![v("r", true, 52, "idle")]),
        );
        let Step::Resolve {
            figures: Some(f), ..
        } = &got[0]
        else {
            panic!("{got:?}")
        };
        // 52 calls at $0.01 since the last landing; first flagged at T, last call 52 s later
        assert_eq!(
            *f,
            Figures {
                calls: 52,
                cost: 0.52,
                duration_ms: 52_000,
                flagged_ticks: 2
            }
        );
    }

    /// `r` after `calls` calls, the last `fresh` of them an hour after the rest (a loop that
    /// starts again after a stop); the detector's loop start is call 13, before the stop.
    fn again(calls: u64, fresh: u64, since_landed: u64, class: &str) -> Verdict {
        const HOUR: i64 = 3_600_000;
        let at = |i: u64| {
            if i + fresh > calls {
                T + HOUR + (i + fresh - calls) as i64 * 1000
            } else {
                T + i as i64 * 1000
            }
        };
        let call = |i: u64| CallRef {
            index: i,
            t: at(i),
            id: format!("prt_{i}"),
        };
        Verdict {
            calls_since_landed: since_landed,
            cost_since_landed: since_landed as f64 * 0.01,
            t: Some(at(calls)),
            evidence: Some(crate::record::Evidence {
                loop_start: Some(call(13)),
                last_landed: None,
                calls: (calls.saturating_sub(11)..=calls).map(call).collect(),
            }),
            ..v("r", true, calls, class)
        }
    }

    /// A tick an hour and a minute after `T`, after the calls of [`again`].
    fn later(vs: Vec<Verdict>) -> TickView {
        TickView {
            t: T + 3_660_000,
            ..tick(vs)
        }
    }

    fn figures_of(s: &Step) -> Figures {
        match s {
            Step::Open {
                figures: Some(f), ..
            }
            | Step::Count { figures: f, .. }
            | Step::Resolve {
                figures: Some(f), ..
            } => *f,
            s => panic!("{s:?}"),
        }
    }

    fn marks(s: &Step) -> HashMap<String, SessionMark> {
        match s {
            Step::Open { marks, .. }
            | Step::Count { marks, .. }
            | Step::Hold { marks, .. }
            | Step::Resolve { marks, .. } => marks.iter().cloned().collect(),
            s => panic!("{s:?}"),
        }
    }

    #[test]
    fn a_loop_that_starts_again_after_a_stop_reports_its_own_calls_cost_and_time() {
        // the previous episode stopped after 52 calls, nothing landed since
        let mut last = open(2, Severity::Warning, &[("r", 52)]);
        last.reason = Some(Reason::Stopped);
        last.marks.get_mut("r").unwrap().cost_since_landed = 0.52;
        let lasts = HashMap::from([(last.key.clone(), last.clone())]);
        // an hour later: 8 more calls, 1 s apart
        let got = run_with(
            vec![],
            lasts.clone(),
            later(vec![again(60, 8, 60, "active")]),
            HashMap::new(),
        );
        assert_eq!(
            got.iter().map(name).collect::<Vec<_>>(),
            ["open loop warning"]
        );
        // its own 8 calls over 7 s, not 60 calls over an hour
        assert_eq!(
            figures_of(&got[0]),
            Figures {
                calls: 8,
                cost: 0.08,
                duration_ms: 7_000,
                flagged_ticks: 1
            }
        );
        let m = marks(&got[0])["r"];
        assert_eq!((m.base_calls, m.base_cost), (52, 0.52));
        assert_eq!(m.start, Some(T + 3_600_000 + 1_000));
        // the next tick carries the base: 12 more calls
        let mut ep = open(1, Severity::Warning, &[]);
        ep.opened = T + 3_600_000 + 10_000;
        ep.marks.insert("r".into(), m);
        let got = run(vec![ep.clone()], later(vec![again(72, 20, 72, "active")]));
        assert_eq!(name(&got[0]), "count 2");
        assert_eq!(
            figures_of(&got[0]),
            Figures {
                calls: 20,
                cost: 0.2,
                duration_ms: 19_000,
                flagged_ticks: 2
            }
        );
        // and the stopped resolve says what this episode burned
        ep.marks.insert("r".into(), marks(&got[0])["r"]);
        let got = run(vec![ep], later(vec![again(72, 20, 72, "idle")]));
        assert_eq!(name(&got[0]), "resolve stopped");
        assert_eq!(figures_of(&got[0]).calls, 20);
        assert_eq!(figures_of(&got[0]).duration_ms, 19_000);

        // a change landed in between: everything since it is this episode's (5 calls)
        let got = run_with(
            vec![],
            lasts,
            later(vec![again(60, 8, 5, "active")]),
            HashMap::new(),
        );
        assert_eq!(figures_of(&got[0]).calls, 5);
        assert_eq!(marks(&got[0])["r"].base_calls, 0);
        // the previous episode ended unflagged (progress): no base either
        last.marks.get_mut("r").unwrap().flagged = false;
        let lasts = HashMap::from([(last.key.clone(), last)]);
        let got = run_with(
            vec![],
            lasts,
            later(vec![again(60, 8, 60, "active")]),
            HashMap::new(),
        );
        assert_eq!(figures_of(&got[0]).calls, 60);
    }

    #[test]
    fn a_landing_inside_an_episode_ends_its_base() {
        let base = SessionMark {
            calls: 60,
            calls_since_landed: 60,
            cost_since_landed: 0.6,
            flagged: true,
            base_calls: 52,
            base_cost: 0.52,
            start: Some(T),
            ..SessionMark::default()
        };
        // 10 more calls, nothing landed: the base carries on
        let m = mark_of(&again(70, 10, 70, "active"), Some(&base), None);
        assert_eq!((m.base_calls, m.episode_calls()), (52, 18));
        // 10 more calls, a landing 4 calls ago: all 4 are this episode's
        let m = mark_of(&again(70, 10, 4, "active"), Some(&base), None);
        assert_eq!((m.base_calls, m.episode_calls(), m.start), (0, 4, None));
    }

    #[test]
    fn gone_needs_a_source_that_listed_the_tree_read_this_tick() {
        const DB: &str = "/h/.local/share/opencode/opencode.db";
        let mut both = open(2, Severity::Warning, &[("r", 52)]);
        both.sources = vec![SRC.into(), DB.into()];
        let mut only_server = both.clone();
        only_server.sources.clear();
        let mut t = tick(vec![]);
        t.sources = vec![DB.into()];
        // the server that also listed it has exited; the database, read, no longer has it
        let got: Vec<String> = run(vec![both], t).iter().map(name).collect();
        assert_eq!(got, ["resolve gone"]);
        let mut t = tick(vec![]);
        t.sources = vec![DB.into()];
        assert_eq!(run(vec![only_server.clone()], t), []);
        assert_eq!(
            run(vec![only_server], tick(vec![]))
                .iter()
                .map(name)
                .collect::<Vec<_>>(),
            ["resolve gone"]
        );
    }

    #[test]
    fn blind_stays_one_alert_and_resolves_readable() {
        let b = AlertEpisode {
            id: 3,
            key: BLIND_KEY.into(),
            kind: Some(AlertKind::Blind),
            subject: SRC.into(),
            ..AlertEpisode::default()
        };
        let mut t = tick(vec![]);
        t.blind.push((SRC.into(), "shape".into()));
        assert_eq!(
            run(vec![b.clone()], t).iter().map(name).collect::<Vec<_>>(),
            ["still blind"]
        );
        assert_eq!(
            run(vec![b], tick(vec![]))
                .iter()
                .map(name)
                .collect::<Vec<_>>(),
            ["resolve readable"]
        );
    }

    /// Issue 41, done: each turn a root session finished is one info notice, told once (its end
    /// kept in the notice's mark); never a subagent's, a flagged tree's, an interrupted turn's,
    /// a stale one's, or any with `[alert] notify_done` off.
    #[test]
    fn a_finished_turn_is_told_once_and_never_a_looping_interrupted_stale_or_subagent_one() {
        use crate::record::Turn;
        let done = |session: &str, class: &str, end: Option<i64>| {
            let mut x = v(session, false, 9, class);
            x.root = session.into();
            if let Some(l) = &mut x.liveness {
                l.turn = Some(Turn {
                    start: T,
                    end,
                    landed: 2,
                    targets: vec!["write /p/a.md".into()],
                });
            }
            x
        };
        let t = T + 300_000;
        let decide_done = |vs: Vec<Verdict>, last: HashMap<String, AlertEpisode>, on: bool| {
            let names: Vec<String> = decide(&DecisionInput {
                open: &[],
                last: &last,
                tick: &tick(vs),
                answers: &HashMap::new(),
                escalate: Escalate::Ticks(3),
                stopped: &HashMap::new(),
                done: on,
            })
            .steps
            .iter()
            .map(|s| match s {
                Step::Open {
                    kind, key, marks, ..
                } => format!(
                    "{} {key} {:?}",
                    kind.as_str(),
                    marks.iter().map(|m| m.1.last_call).collect::<Vec<_>>()
                ),
                s => name(s),
            })
            .collect();
            names
        };
        let fin = done("a", "idle", Some(t - 1000));
        assert_eq!(
            decide_done(vec![fin.clone()], HashMap::new(), true),
            [format!("done done:a [Some({})]", t - 1000)]
        );
        // the knob off: nothing
        assert!(decide_done(vec![fin.clone()], HashMap::new(), false).is_empty());
        // an `opencode run` that ended after its turn finished
        assert_eq!(
            decide_done(
                vec![done("a", "ended", Some(t - 1000))],
                HashMap::new(),
                true
            )
            .len(),
            1
        );
        // told already: the same turn is not told again; the next one is
        let told = AlertEpisode {
            key: "done:a".into(),
            kind: Some(AlertKind::Done),
            marks: HashMap::from([(
                "a".to_string(),
                SessionMark {
                    last_call: Some(t - 1000),
                    ..SessionMark::default()
                },
            )]),
            ..AlertEpisode::default()
        };
        let last = HashMap::from([("done:a".to_string(), told)]);
        assert!(decide_done(vec![fin.clone()], last.clone(), true).is_empty());
        assert_eq!(
            decide_done(vec![done("a", "idle", Some(t - 10))], last, true).len(),
            1
        );
        // not finished: cut off or interrupted (no end), busy, waiting; nor stale
        for (class, end) in [
            ("idle", None),
            ("interrupted", Some(t - 1000)),
            ("active", Some(t - 1000)),
            ("awaiting_user", Some(t - 1000)),
            ("needs_finalization", Some(t - 1000)),
            ("idle", Some(t - crate::alert::DONE_FRESH_MS - 1)),
        ] {
            assert!(
                decide_done(vec![done("a", class, end)], HashMap::new(), true).is_empty(),
                "{class} {end:?}"
            );
        }
        // a subagent's turn is its parent's work
        let mut child = done("c", "idle", Some(t - 1000));
        child.root = "a".into();
        child.parent = Some("a".into());
        assert!(decide_done(vec![child], HashMap::new(), true).is_empty());
        // a tree that loops: its loop tells how it ends
        let mut looping_child = v("c", true, 40, "idle");
        looping_child.root = "a".into();
        assert_eq!(
            decide_done(vec![fin, looping_child], HashMap::new(), true),
            [format!(
                "loop loop:a [Some({}), Some({})]",
                T + 9000,
                T + 40_000
            )]
        );
    }
}
