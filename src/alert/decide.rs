//! The lifecycle rules as one pure function: (open episodes, this tick's verdicts, what the
//! previous tick saw of each session) in, a [`Plan`] out. No I/O; `apply` writes the plan.
//! The rules are listed in the module docs of `alert`; the table test below has one row each.

use super::opinion::Opinion;
use super::{Activity, Episode, Figures, Kind, Mark, Reason, TickView, Verdict, BLIND_KEY};
use crate::config::Severity;
use crate::record::LivenessClass;
use std::collections::{BTreeMap, HashMap, HashSet};

/// Everything a decision depends on.
pub struct Input<'a> {
    /// The open episodes.
    pub open: &'a [Episode],
    /// The last closed episode of a key, for flagged trees without an open one.
    pub last: &'a HashMap<String, Episode>,
    pub tick: &'a TickView,
    /// Second opinions by root, when asked this tick.
    pub answers: &'a HashMap<String, Opinion>,
    pub escalate_after: u32,
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
        kind: Kind,
        key: String,
        subject: String,
        session: Option<String>,
        severity: Severity,
        figures: Option<Figures>,
        /// Loops: a second opinion is wanted.
        ask: bool,
        opinion: Option<Opinion>,
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
    },
    /// Neither count nor resolve.
    Hold {
        episode: i64,
        root: String,
        why: Hold,
    },
    /// Close the episode.
    Resolve {
        episode: i64,
        key: String,
        reason: Reason,
        /// One line for people.
        why: String,
        figures: Option<Figures>,
    },
    /// The blind alert stays open; its evidence is refreshed.
    StillBlind {
        episode: i64,
        reasons: Vec<(String, String)>,
    },
}

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
                    kind: Kind::Loop,
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
fn moved(v: &Verdict, marks: &HashMap<String, Mark>) -> (u64, bool) {
    let new = match marks.get(&v.session) {
        Some(m) => v.calls.saturating_sub(m.calls),
        None => v.calls,
    };
    (new, new > 0 && v.calls_since_landed < new)
}

/// What the loop burned: over the given flagged sessions' marks.
pub fn figures<'a>(
    flagged: impl Iterator<Item = &'a Mark>,
    opened: i64,
    flagged_ticks: u32,
) -> Figures {
    let mut f = Figures {
        flagged_ticks,
        ..Figures::default()
    };
    let (mut first, mut last): (Option<i64>, Option<i64>) = (None, None);
    for m in flagged {
        f.calls += m.calls_since_landed;
        f.cost += m.cost_since_landed;
        first = match (first, m.loop_start) {
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
pub fn decide(i: &Input) -> Plan {
    let tick = i.tick;
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
            Some(Kind::Loop) => {
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
    // new loop episodes: flagged trees without one, unless it is the last one, unmoved
    for (root, t) in &trees {
        if t.flagged.is_empty() || open_loops.contains(root) {
            continue;
        }
        let key = super::loop_key(root);
        if let Some(last) = i.last.get(&key) {
            if !t.flagged.iter().any(|v| moved(v, &last.marks).0 > 0) {
                continue;
            }
        }
        let opinion = i.answers.get(*root).cloned();
        let severity = if opinion.as_ref().is_some_and(Opinion::yes) || i.escalate_after <= 1 {
            Severity::Critical
        } else {
            Severity::Warning
        };
        let marks: Vec<Mark> = t.flagged.iter().map(|v| v.mark()).collect();
        steps.push(Step::Open {
            kind: Kind::Loop,
            key,
            subject: root.to_string(),
            session: Some(t.flagged[0].session.clone()),
            severity,
            figures: Some(figures(marks.iter(), tick.t, 1)),
            ask: true,
            opinion,
        });
    }
    // new liveness episodes, one per key
    let mut live_new: HashSet<String> = HashSet::new();
    for v in &tick.verdicts {
        if let Some((kind, severity)) = v.live_alert() {
            let key = kind.key(&v.session);
            if open_keys.contains(key.as_str()) || !live_new.insert(key.clone()) {
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
            });
        }
    }
    // blind: one alert while any source is unreadable; resolved by the next tick that reads
    let blind_open = i.open.iter().find(|a| a.key == BLIND_KEY);
    match (tick.blind.is_empty(), blind_open) {
        (false, Some(a)) => steps.push(Step::StillBlind {
            episode: a.id,
            reasons: tick.blind.clone(),
        }),
        (false, None) => steps.push(Step::Open {
            kind: Kind::Blind,
            key: BLIND_KEY.into(),
            subject: tick.blind[0].0.clone(),
            session: None,
            severity: Severity::Warning,
            figures: None,
            ask: false,
            opinion: None,
        }),
        (true, Some(a)) => steps.push(Step::Resolve {
            episode: a.id,
            key: a.key.clone(),
            reason: Reason::Readable,
            why: "opencode is readable again".into(),
            figures: None,
        }),
        (true, None) => {}
    }
    Plan { steps }
}

fn loop_step(i: &Input, a: &Episode, tree: Option<&Tree>) -> Option<Step> {
    let resolve = |reason: Reason, why: &str, f: Figures| Step::Resolve {
        episode: a.id,
        key: a.key.clone(),
        reason,
        why: why.into(),
        figures: Some(f),
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
        return i.tick.readable(a.source.as_deref()).then(|| {
            resolve(
                Reason::Gone,
                "the root session is no longer in opencode",
                marked(),
            )
        });
    };
    if t.flagged.is_empty() {
        return Some(resolve(
            Reason::Progress,
            "a change landed: no session of the tree is flagged any more",
            marked(),
        ));
    }
    let mut new_calls = 0;
    let mut landed = false;
    for v in &t.flagged {
        let (n, l) = moved(v, &a.marks);
        new_calls += n;
        landed |= l;
    }
    let current: Vec<Mark> = t.flagged.iter().map(|v| v.mark()).collect();
    if new_calls > 0 && !landed {
        let n = a.flagged_ticks + 1;
        let critical = a.severity == Severity::Critical;
        let opinion = i.answers.get(&a.subject).cloned();
        let escalate = if critical {
            None
        } else if n >= i.escalate_after {
            Some(Reason::StillLooping)
        } else if opinion.as_ref().is_some_and(Opinion::yes) {
            Some(Reason::SecondOpinion)
        } else {
            None
        };
        return Some(Step::Count {
            episode: a.id,
            root: a.subject.clone(),
            flagged_ticks: n,
            escalate,
            figures: figures(current.iter(), a.opened, n),
            ask: !critical && a.asked == 1 && escalate != Some(Reason::StillLooping),
            opinion,
        });
    }
    if landed {
        return Some(Step::Hold {
            episode: a.id,
            root: a.subject.clone(),
            why: Hold::Landed,
        });
    }
    let acts: Vec<Activity> = t.flagged.iter().map(|v| v.activity()).collect();
    if acts.iter().all(|x| *x == Activity::Idle) {
        return Some(resolve(
            Reason::Stopped,
            "the loop stopped: every flagged session is idle and made no call since the last tick",
            figures(current.iter(), a.opened, a.flagged_ticks),
        ));
    }
    Some(Step::Hold {
        episode: a.id,
        root: a.subject.clone(),
        why: if acts.contains(&Activity::Busy) {
            Hold::Quiet
        } else {
            Hold::Unknown
        },
    })
}

fn live_step(i: &Input, a: &Episode, kind: Kind, v: Option<&Verdict>) -> Option<Step> {
    let resolve = |reason: Reason, why: String| Step::Resolve {
        episode: a.id,
        key: a.key.clone(),
        reason,
        why,
        figures: None,
    };
    match v {
        Some(v) if v.live_alert().map(|x| x.0) == Some(kind) => None,
        Some(v) => match v.liveness_class() {
            Some(class) if class != LivenessClass::Unknown => Some(resolve(
                Reason::Recovered,
                format!("the session is {} now", class.as_str()),
            )),
            _ => None,
        },
        None if i.tick.readable(a.source.as_deref()) => Some(resolve(
            Reason::Gone,
            "the session is no longer in opencode".into(),
        )),
        None => None,
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
    fn open(ticks: u32, sev: Severity, marks: &[(&str, u64)]) -> Episode {
        Episode {
            id: 7,
            key: "opencode-loop:r".into(),
            kind: Some(Kind::Loop),
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
                        Mark {
                            calls: *c,
                            calls_since_landed: *c,
                            flagged: true,
                            ..Mark::default()
                        },
                    )
                })
                .collect(),
            ..Episode::default()
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

    fn run(open: Vec<Episode>, t: TickView) -> Vec<Step> {
        run_with(open, HashMap::new(), t, HashMap::new())
    }

    fn run_with(
        open: Vec<Episode>,
        last: HashMap<String, Episode>,
        t: TickView,
        answers: HashMap<String, Opinion>,
    ) -> Vec<Step> {
        decide(&Input {
            open: &open,
            last: &last,
            tick: &t,
            answers: &answers,
            escalate_after: 3,
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

    #[test]
    fn one_row_per_rule() {
        let w = Severity::Warning;
        let blind = || {
            let mut t = tick(vec![]);
            t.blind.push((SRC.into(), "shape".into()));
            t
        };
        let rows: Vec<(&str, Vec<Episode>, TickView, &str)> = vec![
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
        let plan = decide(&Input {
            open: std::slice::from_ref(&a),
            last: &HashMap::new(),
            tick: &t,
            answers: &HashMap::new(),
            escalate_after: 3,
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
        let plan = decide(&Input {
            open: &[a],
            last: &HashMap::new(),
            tick: &t,
            answers: &HashMap::new(),
            escalate_after: 3,
        });
        assert!(plan.questions().is_empty());
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

    #[test]
    fn blind_stays_one_alert_and_resolves_readable() {
        let b = Episode {
            id: 3,
            key: BLIND_KEY.into(),
            kind: Some(Kind::Blind),
            subject: SRC.into(),
            ..Episode::default()
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
}
