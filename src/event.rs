//! An alert event and its vocabulary: what the lifecycle ([`crate::alert`]) decides and the
//! channels ([`crate::channels`]) deliver. Its own module so that the channels, the store and
//! the page read events without reaching into the lifecycle that makes them.

use crate::record::LivenessClass;
use crate::severity::Severity;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// What an alert is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AlertKind {
    Loop,
    Blind,
    Stalled,
    Retrying,
    Waiting,
    Interrupted,
    Unfinished,
    /// A root session finished a turn (`[alert] notify_done`): a notice, closed as it is sent.
    Done,
    /// `wd-alert --test`; never stored as an episode.
    Test,
}

impl AlertKind {
    pub const ALL: [AlertKind; 9] = [
        AlertKind::Loop,
        AlertKind::Blind,
        AlertKind::Stalled,
        AlertKind::Retrying,
        AlertKind::Waiting,
        AlertKind::Interrupted,
        AlertKind::Unfinished,
        AlertKind::Done,
        AlertKind::Test,
    ];
    pub fn as_str(self) -> &'static str {
        match self {
            AlertKind::Loop => "loop",
            AlertKind::Blind => "blind",
            AlertKind::Stalled => "stalled",
            AlertKind::Retrying => "retrying",
            AlertKind::Waiting => "waiting",
            AlertKind::Interrupted => "interrupted",
            AlertKind::Unfinished => "unfinished",
            AlertKind::Done => "done",
            AlertKind::Test => "test",
        }
    }
    pub fn parse(s: &str) -> Option<AlertKind> {
        AlertKind::ALL.into_iter().find(|k| k.as_str() == s)
    }
    /// The alert kind a liveness class asks for.
    pub fn of_liveness(class: LivenessClass) -> Option<AlertKind> {
        Some(match class {
            LivenessClass::Stalled => AlertKind::Stalled,
            LivenessClass::Retrying => AlertKind::Retrying,
            LivenessClass::AwaitingUser => AlertKind::Waiting,
            LivenessClass::Interrupted => AlertKind::Interrupted,
            LivenessClass::NeedsFinalization => AlertKind::Unfinished,
            _ => return None,
        })
    }
    pub fn is_liveness(self) -> bool {
        !matches!(
            self,
            AlertKind::Loop | AlertKind::Blind | AlertKind::Done | AlertKind::Test
        )
    }
    /// A notice: its episode closes as it opens (reason `done`), with nothing to resolve later.
    pub fn is_notice(self) -> bool {
        self == AlertKind::Done
    }
    /// The dedup key of this kind's alert about `subject` (root, session or nothing):
    /// `loop:<root>`, `stalled:<session>`, whatever agent program runs it.
    pub fn key(self, subject: &str) -> String {
        match self {
            AlertKind::Blind => BLIND_KEY.into(),
            AlertKind::Test => TEST_KEY.into(),
            k => format!("{}:{subject}", k.as_str()),
        }
    }
}

/// What the dedup keys of loop and liveness alerts began with before schema 13
/// (`opencode-loop:<root>`). An episode announced under such a key keeps it toward the outside
/// systems (PagerDuty's `dedup_key`, Alertmanager's alert) until it ends: see
/// `announced_keys` in the store.
pub const LEGACY_KEY_PREFIX: &str = "opencode-";

pub const BLIND_KEY: &str = "watchdog-blind";
pub const TEST_KEY: &str = "oc-watchdog-test";

pub fn loop_key(root: &str) -> String {
    AlertKind::Loop.key(root)
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
    /// Resolve: every flagged session is idle and made no call since the previous tick, or its
    /// process ended; or a stop was carried out.
    Stopped,
    /// Resolve: the root (or the session) is no longer in an opencode that was read.
    Gone,
    /// Resolve (blind): the tick read opencode again.
    Readable,
    /// Resolve (liveness): the session makes progress again, or finished its turn.
    Recovered,
    /// Resolve (liveness): the session is in another state that has its own alert now (a
    /// retrying session stalled, a stalled one waits for a person): not a recovery.
    Changed,
    /// Closed (a done notice): told as it opened, nothing to resolve.
    Done,
}

impl Reason {
    pub const ALL: [Reason; 9] = [
        Reason::StillLooping,
        Reason::SecondOpinion,
        Reason::Progress,
        Reason::Stopped,
        Reason::Gone,
        Reason::Readable,
        Reason::Recovered,
        Reason::Changed,
        Reason::Done,
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
            Reason::Changed => "changed",
            Reason::Done => "done",
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

/// What a loop episode burned: calls and cost over the tree's flagged sessions since the last
/// landed change, less what an earlier episode of the tree already counted when it starts again
/// with nothing landed; and for how long it looped (its first call to its last).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Figures {
    pub calls: u64,
    pub cost: f64,
    pub duration_ms: i64,
    pub flagged_ticks: u32,
}

/// A duration in the words of the events: "40 s", "12 min", "2 h 05 min".
pub fn duration(ms: i64) -> String {
    let s = ms.max(0) / 1000;
    if s < 60 {
        format!("{s} s")
    } else if s < 3600 {
        format!("{} min", s / 60)
    } else {
        format!("{} h {:02} min", s / 3600, s % 3600 / 60)
    }
}

/// What a loop burned, in the words of every channel: "41 calls and $0.37 over 12 min".
pub fn burned(f: &Figures) -> String {
    format!(
        "{} and ${:.2} over {}",
        calls(f.calls),
        f.cost,
        duration(f.duration_ms)
    )
}

/// "1 call", "41 calls".
pub fn calls(n: u64) -> String {
    if n == 1 {
        "1 call".into()
    } else {
        format!("{n} calls")
    }
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
    pub alert: AlertKind,
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
