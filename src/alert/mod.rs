//! The alert lifecycle: verdicts of one tick in, alert transitions out.
//!
//! Decide, then apply: `decide` is a pure function from the open alert episodes, this tick's
//! verdicts and what the previous tick saw of each session (its marks) to a [`Plan`]; `apply`
//! writes the plan in one short transaction; `cmd` reads the input, asks the optional second
//! opinion (`opinion`), and delivers the recorded events through the `channels`.
//!
//! Per root session (dedup key `opencode-loop:<root>`), one episode at a time: the first flagged
//! tick triggers (warning, critical on a "yes" second opinion). A later tick counts toward
//! escalation only when the tree's flagged sessions made new calls since the previous tick and
//! landed nothing; the episode escalates once, to critical, when `flagged_ticks` (1 at the
//! trigger) reaches `escalate_after_ticks`, or at once on a "yes" to the second question. It
//! resolves with a reason: `progress` (nothing in the tree is flagged any more), `stopped`
//! (every flagged session is idle and made no call since the previous tick) or `gone` (the root
//! is no longer in an opencode that was read). A busy session that makes no call (a long tool, a
//! slow model) neither counts nor resolves. A tree that loops again after a resolve opens a new
//! episode. A tick that could not read opencode raises one "watchdog is blind" alert instead
//! of resolving anything, and that resolves (`readable`) with the next tick that reads.

pub mod apply;
pub mod channels;
pub mod cmd;
pub mod decide;
pub mod opinion;
pub mod text;

pub use decide::{decide, Plan, Step};

use crate::config::Severity;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::HashMap;

/// What an alert is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    Loop,
    Blind,
    Stalled,
    Retrying,
    Waiting,
    Interrupted,
    Unfinished,
    /// `wd-alert --test`; never stored as an episode.
    Test,
}

impl Kind {
    pub const ALL: [Kind; 8] = [
        Kind::Loop,
        Kind::Blind,
        Kind::Stalled,
        Kind::Retrying,
        Kind::Waiting,
        Kind::Interrupted,
        Kind::Unfinished,
        Kind::Test,
    ];
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Loop => "loop",
            Kind::Blind => "blind",
            Kind::Stalled => "stalled",
            Kind::Retrying => "retrying",
            Kind::Waiting => "waiting",
            Kind::Interrupted => "interrupted",
            Kind::Unfinished => "unfinished",
            Kind::Test => "test",
        }
    }
    pub fn parse(s: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.as_str() == s)
    }
    /// The alert kind a liveness class asks for.
    pub fn of_liveness(class: &str) -> Option<Kind> {
        Some(match class {
            "stalled" => Kind::Stalled,
            "retrying" => Kind::Retrying,
            "awaiting_user" => Kind::Waiting,
            "interrupted" => Kind::Interrupted,
            "needs_finalization" => Kind::Unfinished,
            _ => return None,
        })
    }
    pub fn is_liveness(self) -> bool {
        !matches!(self, Kind::Loop | Kind::Blind | Kind::Test)
    }
    /// The dedup key of this kind's alert about `subject` (root, session or nothing).
    pub fn key(self, subject: &str) -> String {
        match self {
            Kind::Blind => BLIND_KEY.into(),
            Kind::Test => TEST_KEY.into(),
            k => format!("opencode-{}:{subject}", k.as_str()),
        }
    }
}

pub const BLIND_KEY: &str = "watchdog-blind";
pub const TEST_KEY: &str = "oc-watchdog-test";

pub fn loop_key(root: &str) -> String {
    Kind::Loop.key(root)
}

/// The transition an event announces (PagerDuty's `event_action` is trigger for the first two).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Transition {
    Trigger,
    Escalate,
    Resolve,
}

impl Transition {
    pub fn as_str(self) -> &'static str {
        match self {
            Transition::Trigger => "trigger",
            Transition::Escalate => "escalate",
            Transition::Resolve => "resolve",
        }
    }
}

/// Why an episode escalated or resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// Escalate: the loop went on for `escalate_after_ticks` flagged ticks.
    StillLooping,
    /// Escalate: the local model said "yes" when asked again.
    SecondOpinion,
    /// Resolve: a landed change; nothing in the tree is flagged any more.
    Progress,
    /// Resolve: every flagged session is idle and made no call since the previous tick.
    Stopped,
    /// Resolve: the root (or the session) is no longer in an opencode that was read.
    Gone,
    /// Resolve (blind): the tick read opencode again.
    Readable,
    /// Resolve (liveness): the session is in another state now.
    Recovered,
}

impl Reason {
    pub const ALL: [Reason; 7] = [
        Reason::StillLooping,
        Reason::SecondOpinion,
        Reason::Progress,
        Reason::Stopped,
        Reason::Gone,
        Reason::Readable,
        Reason::Recovered,
    ];
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::StillLooping => "still_looping",
            Reason::SecondOpinion => "second_opinion",
            Reason::Progress => "progress",
            Reason::Stopped => "stopped",
            Reason::Gone => "gone",
            Reason::Readable => "readable",
            Reason::Recovered => "recovered",
        }
    }
    pub fn parse(s: &str) -> Option<Reason> {
        Reason::ALL.into_iter().find(|r| r.as_str() == s)
    }
}

/// Where a delivery stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Delivery {
    Pending,
    Sent,
    Failed,
    Deferred,
    Skipped,
}

impl Delivery {
    pub fn as_str(self) -> &'static str {
        match self {
            Delivery::Pending => "pending",
            Delivery::Sent => "sent",
            Delivery::Failed => "failed",
            Delivery::Deferred => "deferred",
            Delivery::Skipped => "skipped",
        }
    }
    pub fn parse(s: &str) -> Option<Delivery> {
        [
            Delivery::Pending,
            Delivery::Sent,
            Delivery::Failed,
            Delivery::Deferred,
            Delivery::Skipped,
        ]
        .into_iter()
        .find(|d| d.as_str() == s)
    }
}

/// What a loop burned: calls and cost since the last landed change over the tree's flagged
/// sessions, and for how long it was seen looping (first flag to last call).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Figures {
    pub calls: u64,
    pub cost: f64,
    pub duration_ms: i64,
    pub flagged_ticks: u32,
}

/// An alert event. Maps one to one onto PagerDuty Events v2 (`dedup_key`, `severity`,
/// `event_action` from `state`, `summary`, `source`, `custom_details` from `details`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Event {
    pub dedup_key: String,
    pub severity: Severity,
    pub state: Transition,
    pub title: String,
    pub summary: String,
    pub details: Map<String, Value>,
    pub source: String,
    /// When the event was decided, epoch ms.
    pub t: i64,
    /// What kind of alert this is.
    pub alert: Kind,
    pub root: String,
    /// Why it escalated or resolved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<Reason>,
    /// Loops: what the loop burned so far.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub figures: Option<Figures>,
    /// The episode (`wd-store alerts`) this event belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub episode: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<String>,
}

/// What wd-alert needs of a verdict.
#[derive(Debug, Clone, Deserialize, Default)]
pub struct VerdictIn {
    pub session: String,
    #[serde(default)]
    pub root: Option<String>,
    #[serde(default)]
    pub agent: Option<String>,
    #[serde(default)]
    pub title: Option<String>,
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub flagged: bool,
    #[serde(default)]
    pub reasons: Vec<String>,
    #[serde(default)]
    pub signals: Map<String, Value>,
    #[serde(default)]
    pub calls: u64,
    #[serde(default)]
    pub calls_since_landed: u64,
    #[serde(default)]
    pub cost_since_landed: f64,
    /// Time of the session's last call.
    #[serde(default)]
    pub t: Option<i64>,
    #[serde(default)]
    pub first_flag: Option<FlagPoint>,
    #[serde(default)]
    pub source: Option<String>,
    #[serde(default)]
    pub digest: Vec<String>,
    #[serde(default)]
    pub liveness: Option<Value>,
}

#[derive(Debug, Clone, Deserialize, Default, PartialEq)]
pub struct FlagPoint {
    #[serde(default)]
    pub t: Option<i64>,
}

/// Is a session doing something, by its liveness class?
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activity {
    /// Busy, retrying, or waiting on a person: not stopped, even when it makes no call.
    Busy,
    /// Idle (also after an error, or with its todo list unfinished): nothing in flight.
    Idle,
    /// No liveness evidence.
    Unknown,
}

impl VerdictIn {
    pub fn root(&self) -> &str {
        self.root.as_deref().unwrap_or(&self.session)
    }
    fn sig_str(&self, k: &str) -> Option<&str> {
        self.signals.get(k).and_then(Value::as_str)
    }
    pub fn top_target(&self) -> Option<&str> {
        self.sig_str("top_target")
    }
    /// What it repeats: the most-worked target, the slow call, or the re-read file.
    pub fn repeats(&self) -> String {
        if self.reasons.iter().any(|r| r == "coverage")
            && !self.reasons.iter().any(|r| r == "top" || r == "dup")
        {
            if let Some(f) = self.sig_str("coverage_file") {
                let c = self
                    .signals
                    .get("coverage")
                    .and_then(Value::as_f64)
                    .unwrap_or(0.0);
                return format!("re-reads {f} ({c:.1}x its length)");
            }
        }
        match self.sig_str("top_target").or(self.sig_str("slow_call")) {
            Some(t) => format!("repeats {t}"),
            None => "loops".into(),
        }
    }
    pub fn liveness_class(&self) -> Option<&str> {
        self.liveness.as_ref()?.get("class")?.as_str()
    }
    pub fn liveness_evidence(&self) -> &str {
        self.liveness
            .as_ref()
            .and_then(|l| l.get("evidence"))
            .and_then(Value::as_str)
            .unwrap_or("")
    }
    pub fn activity(&self) -> Activity {
        match self.liveness_class() {
            Some("idle" | "interrupted" | "needs_finalization") => Activity::Idle,
            Some("active" | "suspect" | "stalled" | "long_tool" | "retrying" | "awaiting_user") => {
                Activity::Busy
            }
            _ => Activity::Unknown,
        }
    }
    /// (alert kind, severity) this verdict's liveness asks for.
    pub fn live_alert(&self) -> Option<(Kind, Severity)> {
        let l = self.liveness.as_ref()?;
        let sev = match l.get("alert").and_then(Value::as_str)? {
            "warning" => Severity::Warning,
            "critical" => Severity::Critical,
            _ => Severity::Info,
        };
        Some((Kind::of_liveness(self.liveness_class()?)?, sev))
    }
    /// What the previous tick keeps of this verdict.
    pub fn mark(&self) -> Mark {
        Mark {
            calls: self.calls,
            calls_since_landed: self.calls_since_landed,
            cost_since_landed: self.cost_since_landed,
            last_call: self.t,
            first_flag: self.first_flag.as_ref().and_then(|f| f.t),
            flagged: self.flagged,
        }
    }
}

/// What a tick saw of one session of an alert's tree, kept for the next tick.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Mark {
    pub calls: u64,
    pub calls_since_landed: u64,
    pub cost_since_landed: f64,
    pub last_call: Option<i64>,
    pub first_flag: Option<i64>,
    pub flagged: bool,
}

/// An episode as stored: open, or the last one of a key (to tell a loop that starts again
/// from one that merely has not moved since it resolved).
#[derive(Debug, Clone, Default)]
pub struct Episode {
    pub id: i64,
    pub key: String,
    pub kind: Option<Kind>,
    /// Root session (loops), session (liveness) or source (blind).
    pub subject: String,
    pub severity: Severity,
    pub flagged_ticks: u32,
    pub asked: u32,
    pub source: Option<String>,
    pub opened: i64,
    pub title: String,
    pub agent: Option<String>,
    pub model: Option<String>,
    /// Closed episodes: why.
    pub reason: Option<Reason>,
    /// What the last tick saw of each session of the tree, by session id.
    pub marks: HashMap<String, Mark>,
}

/// What one tick saw.
#[derive(Debug, Default)]
pub struct TickView {
    /// One verdict per session (the last one wins when a session came twice).
    pub verdicts: Vec<VerdictIn>,
    /// (source, reason) of every blind record.
    pub blind: Vec<(String, String)>,
    /// Sources that answered.
    pub sources: Vec<String>,
    pub t: i64,
}

impl TickView {
    /// Keeps the last verdict of each session, in the order sessions were first seen.
    pub fn dedup(&mut self) {
        let mut at: HashMap<String, usize> = HashMap::with_capacity(self.verdicts.len());
        let mut out: Vec<VerdictIn> = Vec::with_capacity(self.verdicts.len());
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
    /// Could this tick see opencode well enough to call an absent session gone?
    pub fn readable(&self, source: Option<&str>) -> bool {
        self.blind.is_empty()
            && match source {
                Some(s) => self.sources.iter().any(|x| x == s),
                None => !self.sources.is_empty(),
            }
    }
}
