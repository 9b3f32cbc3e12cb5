//! The alert lifecycle: verdicts of one tick in, transitions out. Pure rules over the open
//! alerts and what the tick saw; I/O lives in `cmd` (state), `channels` (delivery) and
//! `opinion` (the local second opinion).
//!
//! Per root session (dedup key `opencode-loop:<root>`): the first flagged tick triggers
//! (warning, or critical on a "yes" second opinion); staying flagged counts ticks and escalates
//! to critical once, at `escalate_after_ticks` or on a second "yes"; a tree with no flagged
//! session, or a root gone from an opencode that was readable, resolves (info). A tick that
//! could not read opencode (`blind`) raises one "watchdog is blind" warning instead of
//! resolving anything.

pub mod channels;
pub mod cmd;
pub mod opinion;

use crate::config::Severity;
use crate::record::{LivenessClass, Signal, Verdict};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, HashSet};

/// An alert event. Maps one to one onto PagerDuty Events v2 (`dedup_key`, `severity`,
/// `event_action` from `state`, `summary`, `source`, `custom_details` from `details`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Event {
    pub dedup_key: String,
    pub severity: Severity,
    /// `trigger`, `escalate` or `resolve`.
    pub state: String,
    pub title: String,
    pub summary: String,
    pub details: Map<String, Value>,
    pub source: String,
    /// When the event was decided, epoch ms.
    pub t: i64,
    /// `loop`, `blind`, `stalled`, `waiting`, ... (what kind of alert this is).
    pub alert: String,
    pub root: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<String>,
}

/// What a verdict repeats, in words, for alert titles: the most-worked target, the slow call,
/// or the re-read file.
impl Verdict {
    pub fn repeats(&self) -> String {
        let has = |s: Signal| self.reasons.contains(&s);
        if has(Signal::Coverage) && !has(Signal::Top) && !has(Signal::Dup) {
            if let Some(f) = self.signals.what(Signal::Coverage) {
                let c = self.signals.value(Signal::Coverage);
                return format!("re-reads {f} ({c:.1}x its length)");
            }
        }
        match self
            .signals
            .what(Signal::Top)
            .or(self.signals.what(Signal::Slow))
        {
            Some(t) => format!("repeats {t}"),
            None => "loops".into(),
        }
    }
}

/// An open alert as stored.
#[derive(Debug, Clone, Default)]
pub struct Open {
    pub dedup_key: String,
    pub kind: String,
    pub root: String,
    pub severity: Severity,
    pub flagged_ticks: u32,
    pub asked: u32,
    pub source: Option<String>,
}

/// What one tick saw.
#[derive(Debug, Default)]
pub struct TickView {
    pub verdicts: Vec<Verdict>,
    /// (source, reason) of every blind record.
    pub blind: Vec<(String, String)>,
    /// Sources that answered.
    pub sources: Vec<String>,
    pub t: i64,
}

impl TickView {
    /// Flagged verdicts grouped by root; per root the most telling verdict first.
    pub fn flagged_roots(&self) -> BTreeMap<String, Vec<&Verdict>> {
        let mut m: BTreeMap<String, Vec<&Verdict>> = BTreeMap::new();
        for v in self.verdicts.iter().filter(|v| v.flagged) {
            m.entry(v.root().to_string()).or_default().push(v);
        }
        for vs in m.values_mut() {
            vs.sort_by_key(|v| std::cmp::Reverse(v.calls_since_landed));
        }
        m
    }
    fn seen_roots(&self) -> HashSet<&str> {
        self.verdicts.iter().map(|v| v.root()).collect()
    }
    /// Could this tick see opencode well enough to call an absent root gone?
    fn readable(&self, source: Option<&str>) -> bool {
        self.blind.is_empty()
            && match source {
                Some(s) => self.sources.iter().any(|x| x == s),
                None => !self.sources.is_empty(),
            }
    }
}

/// A decided transition, before the second opinion settles its severity.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// Open a loop alert for this root.
    Trigger { root: String },
    /// Still flagged: count it; `escalate` when it crosses the threshold.
    Continue {
        key: String,
        root: String,
        flagged_ticks: u32,
        escalate: bool,
        ask_again: bool,
    },
    /// Close it, saying why.
    Resolve { key: String, why: String },
    /// Open (or keep) the blind alert.
    Blind { reasons: Vec<(String, String)> },
    /// Open a liveness alert (stalled, retrying, waiting, interrupted, unfinished) for a session.
    Live {
        session: String,
        kind: &'static str,
        severity: Severity,
    },
}

/// The alert kind a liveness class asks for.
pub fn live_kind(class: LivenessClass) -> Option<&'static str> {
    Some(match class {
        LivenessClass::Stalled => "stalled",
        LivenessClass::Retrying => "retrying",
        LivenessClass::AwaitingUser => "waiting",
        LivenessClass::Interrupted => "interrupted",
        LivenessClass::NeedsFinalization => "unfinished",
        _ => return None,
    })
}

pub const LIVE_KINDS: &[&str] = &[
    "stalled",
    "retrying",
    "waiting",
    "interrupted",
    "unfinished",
];

impl Verdict {
    /// (alert kind, severity) this verdict's liveness asks for.
    pub fn live_alert(&self) -> Option<(&'static str, Severity)> {
        let l = self.liveness.as_ref()?;
        Some((live_kind(l.class)?, l.alert?))
    }
}

pub fn live_key(kind: &str, session: &str) -> String {
    format!("opencode-{kind}:{session}")
}

pub fn loop_key(root: &str) -> String {
    format!("opencode-loop:{root}")
}

pub const BLIND_KEY: &str = "watchdog-blind";

/// The lifecycle rules. `open` are the alerts open before this tick.
pub fn decide(open: &[Open], tick: &TickView, escalate_after: u32) -> Vec<Decision> {
    let flagged = tick.flagged_roots();
    let seen = tick.seen_roots();
    let mut out = Vec::new();
    let mut handled: HashSet<&str> = HashSet::new();
    for a in open.iter().filter(|a| a.kind == "loop") {
        handled.insert(a.root.as_str());
        if flagged.contains_key(&a.root) {
            let n = a.flagged_ticks + 1;
            out.push(Decision::Continue {
                key: a.dedup_key.clone(),
                root: a.root.clone(),
                flagged_ticks: n,
                // the trigger tick is flagged tick 1: escalate after `escalate_after` more
                escalate: a.severity != Severity::Critical && n > escalate_after,
                ask_again: a.severity != Severity::Critical && a.asked == 1,
            });
        } else if seen.contains(a.root.as_str()) {
            out.push(Decision::Resolve {
                key: a.dedup_key.clone(),
                why: "no session of the tree is flagged any more".into(),
            });
        } else if tick.readable(a.source.as_deref()) {
            out.push(Decision::Resolve {
                key: a.dedup_key.clone(),
                why: "the session is gone from opencode or has gone quiet".into(),
            });
        }
    }
    for root in flagged.keys() {
        if !handled.contains(root.as_str()) {
            out.push(Decision::Trigger { root: root.clone() });
        }
    }
    // liveness alerts, one per session and kind
    let by_session: std::collections::HashMap<&str, &Verdict> = tick
        .verdicts
        .iter()
        .map(|v| (v.session.as_str(), v))
        .collect();
    let mut live_open: HashSet<(String, String)> = HashSet::new();
    for a in open
        .iter()
        .filter(|a| LIVE_KINDS.contains(&a.kind.as_str()))
    {
        live_open.insert((a.root.clone(), a.kind.clone()));
        match by_session.get(a.root.as_str()) {
            Some(v) if v.live_alert().map(|x| x.0) == Some(a.kind.as_str()) => {}
            Some(v) => {
                let class = v
                    .liveness
                    .as_ref()
                    .map_or(LivenessClass::Unknown, |l| l.class);
                if class != LivenessClass::Unknown {
                    out.push(Decision::Resolve {
                        key: a.dedup_key.clone(),
                        why: format!("the session is {} now", class.as_str()),
                    });
                }
            }
            None if tick.readable(a.source.as_deref()) => out.push(Decision::Resolve {
                key: a.dedup_key.clone(),
                why: "the session is gone from opencode or has gone quiet".into(),
            }),
            None => {}
        }
    }
    for v in &tick.verdicts {
        if let Some((kind, severity)) = v.live_alert() {
            if !live_open.contains(&(v.session.clone(), kind.to_string())) {
                out.push(Decision::Live {
                    session: v.session.clone(),
                    kind,
                    severity,
                });
            }
        }
    }
    let blind_open = open.iter().any(|a| a.dedup_key == BLIND_KEY);
    if !tick.blind.is_empty() {
        out.push(Decision::Blind {
            reasons: tick.blind.clone(),
        });
    } else if blind_open {
        out.push(Decision::Resolve {
            key: BLIND_KEY.into(),
            why: "opencode is readable again".into(),
        });
    }
    out
}

/// Signals and counts of a verdict, never content.
pub fn details_of(v: &Verdict, tree: &[&Verdict]) -> Map<String, Value> {
    let mut d = Map::new();
    d.insert("session".into(), json!(v.session));
    d.insert("root".into(), json!(v.root()));
    d.insert("agent".into(), json!(v.agent));
    d.insert("model".into(), json!(v.model));
    d.insert("reasons".into(), json!(v.reasons));
    d.insert("signals".into(), Value::Object(v.signals.to_map()));
    d.insert("calls".into(), json!(v.calls));
    d.insert("calls_since_landed".into(), json!(v.calls_since_landed));
    d.insert("cost_since_landed".into(), json!(v.cost_since_landed));
    d.insert(
        "flagged_sessions".into(),
        json!(tree.iter().map(|t| t.session.clone()).collect::<Vec<_>>()),
    );
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(session: &str, root: &str, flagged: bool) -> Verdict {
        Verdict {
            session: session.into(),
            root: root.into(),
            flagged,
            ..Verdict::default()
        }
    }

    fn open(root: &str, ticks: u32, sev: Severity) -> Open {
        Open {
            dedup_key: loop_key(root),
            kind: "loop".into(),
            root: root.into(),
            severity: sev,
            flagged_ticks: ticks,
            asked: 1,
            source: Some("http://s".into()),
        }
    }

    fn tick(vs: Vec<Verdict>) -> TickView {
        TickView {
            verdicts: vs,
            sources: vec!["http://s".into()],
            ..TickView::default()
        }
    }

    #[test]
    fn first_flag_triggers_per_root_not_per_session() {
        let d = decide(
            &[],
            &tick(vec![
                v("c1", "r", true),
                v("c2", "r", true),
                v("r", "r", false),
            ]),
            3,
        );
        assert_eq!(d, [Decision::Trigger { root: "r".into() }]);
    }

    #[test]
    fn third_flagged_tick_after_the_trigger_escalates_once() {
        let d = decide(
            &[open("r", 2, Severity::Warning)],
            &tick(vec![v("r", "r", true)]),
            3,
        );
        assert!(matches!(
            &d[0],
            Decision::Continue {
                escalate: false,
                flagged_ticks: 3,
                ..
            }
        ));
        let d = decide(
            &[open("r", 3, Severity::Warning)],
            &tick(vec![v("r", "r", true)]),
            3,
        );
        assert!(matches!(
            &d[0],
            Decision::Continue {
                escalate: true,
                flagged_ticks: 4,
                ..
            }
        ));
        let d = decide(
            &[open("r", 4, Severity::Critical)],
            &tick(vec![v("r", "r", true)]),
            3,
        );
        assert!(matches!(
            &d[0],
            Decision::Continue {
                escalate: false,
                flagged_ticks: 5,
                ..
            }
        ));
    }

    #[test]
    fn resolve_when_unflagged_or_gone_but_not_when_blind() {
        let d = decide(
            &[open("r", 1, Severity::Warning)],
            &tick(vec![v("r", "r", false)]),
            3,
        );
        assert!(matches!(&d[0], Decision::Resolve { .. }));
        let d = decide(&[open("r", 1, Severity::Warning)], &tick(vec![]), 3);
        assert!(matches!(&d[0], Decision::Resolve { why, .. } if why.contains("gone")));
        let mut blind = tick(vec![]);
        blind.blind.push(("http://s".into(), "shape".into()));
        let d = decide(&[open("r", 1, Severity::Warning)], &blind, 3);
        assert_eq!(d.len(), 1);
        assert!(matches!(&d[0], Decision::Blind { .. }));
    }
}
