//! Liveness: is a session progressing, silent, retrying, waiting on a person, interrupted, or
//! stopped with its own list unfinished? Judged on evidence opencode gives, never on the clock
//! alone: elapsed time only raises suspicion (soft threshold) or, much later and only for a busy
//! session with nothing else to explain its silence, makes it eligible for an alert (hard
//! threshold, never below 900 s). Nothing here acts on a session.
//!
//! In: the `session` record's evidence (status, retry, pending requests, open todos, from
//! oc-sessions) and the `activity` record oc-calls writes after a session's calls. Out: a
//! `liveness` object on the session's verdict.

use crate::config::{LivenessConfig, Severity};
use crate::record::{Ask, RunsIn};
pub use crate::record::{Liveness, LivenessAction, LivenessClass};
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use crate::record::{Activity, Running};

/// The evidence a session record carries.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct SessionEvidence {
    pub status: Option<String>,
    #[serde(default)]
    pub retry: Option<Value>,
    #[serde(default)]
    pub pending: Option<Pending>,
    #[serde(default)]
    pub todos_open: Option<i64>,
    /// `ended`: oc-sessions found no opencode process that could run the session (it read
    /// the database, looked for the processes, and none works in its directory); else what
    /// runs it, where it could tell: `tui`, `run` or `server` ([`crate::record::RunsIn`]).
    #[serde(default)]
    pub process: Option<String>,
    /// The agent program that ran the session (absent: opencode).
    #[serde(default)]
    pub program: Option<crate::record::Program>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
pub struct Pending {
    #[serde(default)]
    pub permissions: i64,
    #[serde(default)]
    pub questions: i64,
}

fn live(
    class: LivenessClass,
    silence: Option<i64>,
    ev: &SessionEvidence,
    evidence: String,
    alert: Option<Severity>,
) -> Liveness {
    Liveness {
        class,
        silence_s: silence,
        status: ev.status.clone(),
        evidence,
        alert,
        action: (class == LivenessClass::Suspect).then_some(LivenessAction::Probe),
        runs_in: crate::record::RunsIn::of(ev.process.as_deref()),
        turn: None,
    }
}

/// The error opencode records when a person interrupts a reply (Esc in the TUI, a server's
/// `POST /session/:id/abort`).
pub const USER_ABORT: &str = "MessageAbortedError";

/// The liveness evidence of a reply a person interrupted.
pub const BY_THE_USER: &str = "interrupted by the user";

/// Classifies one session at time `now` (ms): a person's or the provider's part first, then
/// a process that ended, then a busy session's silence, then how an idle one stopped. Its
/// latest turn goes with the class, for the done notice.
pub fn classify(
    ev: &SessionEvidence,
    act: Option<&Activity>,
    now: i64,
    cfg: &LivenessConfig,
) -> Liveness {
    Liveness {
        turn: act.and_then(|a| a.turn.clone()),
        ..class_of(ev, act, now, cfg)
    }
}

fn class_of(
    ev: &SessionEvidence,
    act: Option<&Activity>,
    now: i64,
    cfg: &LivenessConfig,
) -> Liveness {
    let silence = act
        .and_then(|a| a.last_progress)
        .map(|t| ((now - t) / 1000).max(0));
    if let Some(l) = awaiting_user(ev, silence) {
        return l;
    }
    let status = ev.status.as_deref();
    if status == Some("retry") {
        return retrying(ev, silence, cfg);
    }
    let Some(act) = act else {
        return live(
            LivenessClass::Unknown,
            None,
            ev,
            "no activity record for this session".into(),
            None,
        );
    };
    if status.is_none() && ev.process.as_deref() == Some("ended") {
        return ended(ev, act, silence);
    }
    if let Some(l) = asked_in_its_data(ev, act, now, silence) {
        return l;
    }
    let busy = match status {
        Some("busy") => true,
        Some("idle") => false,
        // the database cannot say; an assistant message still open is the evidence
        None => act.in_flight || !act.running.is_empty(),
        Some(other) => {
            return live(
                LivenessClass::Unknown,
                silence,
                ev,
                format!("status {other:?} not understood"),
                None,
            );
        }
    };
    if !busy {
        return stopped(ev, act, silence);
    }
    let Some(s) = silence else {
        return live(
            LivenessClass::Unknown,
            None,
            ev,
            "busy, but no time of last progress".into(),
            None,
        );
    };
    let b = Busy {
        ev,
        act,
        silence: s,
        now,
        cfg,
    };
    b.long_tool().unwrap_or_else(|| b.silent())
}

/// Permission or question requests pending: the session waits for a person, whatever else.
fn awaiting_user(ev: &SessionEvidence, silence: Option<i64>) -> Option<Liveness> {
    let p = ev.pending.as_ref()?;
    (p.permissions + p.questions > 0).then(|| {
        live(
            LivenessClass::AwaitingUser,
            silence,
            ev,
            format!(
                "{} permission and {} question request(s) wait for a person",
                p.permissions, p.questions
            ),
            Some(Severity::Info),
        )
    })
}

/// How long a `bash` call may run without output before it reads as waiting for a person's
/// permission: opencode records the output as soon as the command starts, a few milliseconds
/// after the call does, unless a person is asked first.
pub const ASK_GRACE_MS: i64 = 3_000;

/// A prompt that only the agent's own data shows (a TUI has no server to ask): a `question`
/// call running, or a `bash` call that has not started for [`ASK_GRACE_MS`] ([`Ask`]).
fn asked_in_its_data(
    ev: &SessionEvidence,
    act: &Activity,
    now: i64,
    silence: Option<i64>,
) -> Option<Liveness> {
    let asked = |r: &&Running| match r.asks {
        Some(Ask::Question) => true,
        Some(Ask::Permission) => now - r.t >= ASK_GRACE_MS,
        None => false,
    };
    let r = act.running.iter().find(asked)?;
    let what = match r.asks {
        Some(Ask::Question) => "a question waits for a person's answer".to_string(),
        _ => format!(
            "a {} call waits for a person's permission",
            if r.tool.is_empty() { "tool" } else { &r.tool }
        ),
    };
    let since = (now - r.t).max(0) / 1000;
    Some(live(
        LivenessClass::AwaitingUser,
        silence,
        ev,
        format!("{what} (for {since} s): {}", where_to_answer(ev)),
        Some(Severity::Info),
    ))
}

/// Where a person answers an opencode session's prompt, by what runs it.
fn where_to_answer(ev: &SessionEvidence) -> &'static str {
    match ev.process.as_deref().and_then(|p| RunsIn::of(Some(p))) {
        Some(RunsIn::Tui) => "answer it in its TUI",
        Some(RunsIn::Server) => {
            "answer it where its server is used (opencode web, or a TUI attached to it)"
        }
        // `opencode run` refuses every prompt itself (1.18.33: "auto-rejecting")
        Some(RunsIn::Run) => "answer it in the terminal of its `opencode run`",
        None => "answer it in the opencode TUI that runs it",
    }
}

/// The provider is being retried: worth a warning only after too many attempts or too long.
fn retrying(ev: &SessionEvidence, silence: Option<i64>, cfg: &LivenessConfig) -> Liveness {
    let r = ev.retry.clone().unwrap_or(Value::Null);
    let attempt = r.get("attempt").and_then(Value::as_i64).unwrap_or(0);
    let msg = r.get("message").and_then(Value::as_str).unwrap_or("");
    let over = attempt >= i64::try_from(cfg.retry_attempts_max).unwrap_or(i64::MAX)
        || silence.is_some_and(|s| s >= i64::try_from(cfg.retry_secs_max).unwrap_or(i64::MAX));
    live(
        LivenessClass::Retrying,
        silence,
        ev,
        format!(
            "provider retry attempt {attempt}: {}",
            msg.chars().take(120).collect::<String>()
        ),
        over.then_some(Severity::Warning),
    )
}

/// No process of its agent can run the session any more: it ended, perhaps mid-reply.
fn ended(ev: &SessionEvidence, act: &Activity, silence: Option<i64>) -> Liveness {
    let cut = if act.in_flight || !act.running.is_empty() {
        ", a reply cut off"
    } else {
        ""
    };
    live(
        LivenessClass::Ended,
        silence,
        ev,
        format!(
            "the {} process ended{cut}",
            ev.program
                .unwrap_or(crate::record::Program::Opencode)
                .display()
        ),
        None,
    )
}

/// A busy session silent for `silence` s, and what its silence is judged against.
struct Busy<'a> {
    ev: &'a SessionEvidence,
    act: &'a Activity,
    silence: i64,
    now: i64,
    cfg: &'a LivenessConfig,
}

impl Busy<'_> {
    /// `hard_secs` as a time to compare with (a huge one means "never stalled").
    fn hard(&self) -> i64 {
        i64::try_from(self.cfg.hard_secs).unwrap_or(i64::MAX)
    }

    /// A tool that declared a timeout explains the silence until that timeout and the grace
    /// have passed; past them, the hard clock starts at the deadline, not at the last progress.
    fn long_tool(&self) -> Option<Liveness> {
        let (ev, s, now) = (self.ev, self.silence, self.now);
        let tool = self.act.running.iter().max_by_key(|r| r.t)?;
        let timeout = tool.timeout?;
        // user-given seconds: saturate, never wrap (a huge grace means "never stalled")
        let grace = i64::try_from(self.cfg.tool_grace_secs)
            .unwrap_or(i64::MAX)
            .saturating_mul(1000);
        let deadline = tool.t.saturating_add(timeout).saturating_add(grace);
        if now < deadline {
            return Some(live(
                LivenessClass::LongTool,
                Some(s),
                ev,
                format!(
                    "{} running for {} s within its declared timeout of {} s",
                    tool.tool,
                    (now - tool.t) / 1000,
                    timeout / 1000
                ),
                None,
            ));
        }
        // past its timeout and grace: suspect first; the hard clock starts at the deadline
        let over = (now - deadline) / 1000;
        let (class, alert) = if over >= self.hard() {
            (LivenessClass::Stalled, Some(Severity::Warning))
        } else {
            (LivenessClass::Suspect, None)
        };
        Some(live(
            class,
            Some(s),
            ev,
            format!(
                "{} still running {over} s past its timeout of {} s and grace",
                tool.tool,
                timeout / 1000
            ),
            alert,
        ))
    }

    /// Silence with nothing to explain it: active under the soft threshold, suspect under the
    /// hard one, stalled (and alerted) past it.
    fn silent(&self) -> Liveness {
        let (ev, s) = (self.ev, self.silence);
        let soft = i64::try_from(self.cfg.soft_secs).unwrap_or(i64::MAX);
        let hard = self.hard();
        if s < soft {
            return live(
                LivenessClass::Active,
                Some(s),
                ev,
                format!("progress {s} s ago"),
                None,
            );
        }
        if s < hard {
            return live(
                LivenessClass::Suspect,
                Some(s),
                ev,
                format!("busy and silent for {s} s (soft threshold {soft} s)"),
                None,
            );
        }
        live(
            LivenessClass::Stalled,
            Some(s),
            ev,
            format!("busy and silent for {s} s (hard threshold {hard} s)"),
            Some(Severity::Warning),
        )
    }
}

/// A session that is not busy: interrupted (by a person or an error), stopped with its own
/// todo list unfinished, or idle with nothing pending.
fn stopped(ev: &SessionEvidence, act: &Activity, silence: Option<i64>) -> Liveness {
    if let Some(e) = &act.error {
        let why = if e == USER_ABORT {
            BY_THE_USER.to_string()
        } else {
            format!("stopped after an assistant error: {e}")
        };
        return live(
            LivenessClass::Interrupted,
            silence,
            ev,
            why,
            Some(Severity::Info),
        );
    }
    if let Some(n) = ev.todos_open.filter(|n| *n > 0) {
        return live(
            LivenessClass::NeedsFinalization,
            silence,
            ev,
            format!("stopped with {n} todo(s) still pending or in progress"),
            Some(Severity::Info),
        );
    }
    live(
        LivenessClass::Idle,
        silence,
        ev,
        "idle, nothing pending".into(),
        None,
    )
}

/// The version of the continuation prompt; part of every nudge's action id.
pub const NUDGE_VERSION: &str = "v1";

/// The neutral, versioned continuation prompt for a stalled or unfinished session. It states
/// only what was observed, asks for a check of the todo list and the working tree, and for the
/// work to be finished or the reason it cannot be; it blames nobody and claims nothing.
pub fn nudge_prompt(class: &str, evidence: &str) -> String {
    let what = match class {
        "stalled" => "this session has been busy without new output",
        _ => "this session stopped while its todo list still has open items",
    };
    format!(
        "[oc-watchdog nudge {NUDGE_VERSION}] Observed by the local watchdog: {what} ({evidence}). \
         Please check your todo list and the working tree, do not repeat actions that already \
         took effect, and either finish the remaining work or say briefly why you cannot."
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: i64 = 1_796_000_000_000;

    fn busy() -> SessionEvidence {
        SessionEvidence {
            status: Some("busy".into()),
            ..SessionEvidence::default()
        }
    }

    fn act(last: i64) -> Activity {
        Activity {
            session: "s".into(),
            last_progress: Some(last),
            in_flight: true,
            ..Activity::default()
        }
    }

    fn class_at(
        ev: &SessionEvidence,
        a: &Activity,
        secs: i64,
    ) -> (LivenessClass, Option<Severity>) {
        let l = classify(ev, Some(a), T + secs * 1000, &LivenessConfig::default());
        (l.class, l.alert)
    }

    #[test]
    fn a_tui_prompt_seen_only_in_the_database_needs_a_person() {
        // opencode 1.18.33 TUI, no server: its database shows the question tool running, or a
        // bash call running with no output recorded (its permission asked)
        let tui = SessionEvidence {
            process: Some("tui".into()),
            ..SessionEvidence::default()
        };
        let asking = |asks| {
            let mut a = act(T);
            a.running.push(Running {
                tool: if asks == Ask::Question {
                    "question"
                } else {
                    "bash"
                }
                .into(),
                t: T,
                timeout: None,
                asks: Some(asks),
            });
            a
        };
        let l = classify(
            &tui,
            Some(&asking(Ask::Question)),
            T + 1000,
            &LivenessConfig::default(),
        );
        assert_eq!(
            (l.class, l.alert),
            (LivenessClass::AwaitingUser, Some(Severity::Info))
        );
        assert_eq!(
            l.evidence,
            "a question waits for a person's answer (for 1 s): answer it in its TUI"
        );
        // a command about to start is no prompt; after ASK_GRACE_MS without output it is
        let ask = asking(Ask::Permission);
        let early = classify(
            &tui,
            Some(&ask),
            T + ASK_GRACE_MS - 1,
            &LivenessConfig::default(),
        );
        assert_eq!(early.class, LivenessClass::Active);
        // 35 minutes on, a person is still what is needed, not a stall
        let l = classify(&tui, Some(&ask), T + 2_100_000, &LivenessConfig::default());
        assert_eq!(
            (l.class, l.alert),
            (LivenessClass::AwaitingUser, Some(Severity::Info))
        );
        assert_eq!(
            l.evidence,
            "a bash call waits for a person's permission (for 2100 s): answer it in its TUI"
        );
        // its TUI gone, nobody can answer: the process ended
        let gone = SessionEvidence {
            process: Some("ended".into()),
            ..SessionEvidence::default()
        };
        let l = classify(&gone, Some(&ask), T + 2_100_000, &LivenessConfig::default());
        assert_eq!(l.class, LivenessClass::Ended);
    }

    #[test]
    fn soft_suspects_hard_alerts_and_not_a_second_before() {
        let a = act(T);
        assert_eq!(class_at(&busy(), &a, 299), (LivenessClass::Active, None));
        assert_eq!(class_at(&busy(), &a, 300), (LivenessClass::Suspect, None));
        assert_eq!(class_at(&busy(), &a, 899), (LivenessClass::Suspect, None));
        assert_eq!(
            class_at(&busy(), &a, 900),
            (LivenessClass::Stalled, Some(Severity::Warning))
        );
    }

    #[test]
    fn progress_resets_the_clock_and_runtime_is_irrelevant() {
        // a session progressing for 20 minutes: its last progress was 10 s ago
        let a = act(T + 1190 * 1000);
        assert_eq!(class_at(&busy(), &a, 1200), (LivenessClass::Active, None));
    }

    #[test]
    fn a_tool_inside_its_declared_timeout_is_left_alone() {
        let mut a = act(T);
        a.running.push(Running {
            tool: "bash".into(),
            t: T,
            timeout: Some(1_800_000),
            asks: None,
        });
        assert_eq!(class_at(&busy(), &a, 1500), (LivenessClass::LongTool, None));
        // past timeout + grace: suspect, and stalled only a hard threshold later
        assert_eq!(class_at(&busy(), &a, 1861), (LivenessClass::Suspect, None));
        assert_eq!(
            class_at(&busy(), &a, 1860 + 899),
            (LivenessClass::Suspect, None)
        );
        assert_eq!(
            class_at(&busy(), &a, 1860 + 900),
            (LivenessClass::Stalled, Some(Severity::Warning))
        );
    }

    #[test]
    fn a_session_whose_process_ended_is_ended_never_stalled() {
        // a killed `opencode run`: the database still shows its tool running, 2000 s on
        let mut a = act(T);
        a.in_flight = true;
        a.running.push(Running {
            tool: "bash".into(),
            t: T,
            timeout: None,
            asks: None,
        });
        let ev = SessionEvidence {
            process: Some("ended".into()),
            ..SessionEvidence::default()
        };
        let l = classify(&ev, Some(&a), T + 2000 * 1000, &LivenessConfig::default());
        assert_eq!(
            (l.class, l.alert, l.evidence.as_str()),
            (
                LivenessClass::Ended,
                None,
                "the opencode process ended, a reply cut off"
            )
        );
        // another agent's session names its own program (issue 39)
        let cc = SessionEvidence {
            program: Some(crate::record::Program::ClaudeCode),
            ..ev.clone()
        };
        let l = classify(&cc, Some(&a), T + 2000 * 1000, &LivenessConfig::default());
        assert_eq!(l.evidence, "the Claude Code process ended, a reply cut off");
        // without the mark, the same evidence is a stall
        let l = classify(
            &SessionEvidence::default(),
            Some(&a),
            T + 2000 * 1000,
            &LivenessConfig::default(),
        );
        assert_eq!(l.class, LivenessClass::Stalled);
    }

    #[test]
    fn an_enormous_tool_grace_never_wraps_into_stalled() {
        // 9223372036854775 s of grace overflowed the deadline into the past: stalled at once
        let mut a = act(T);
        a.running.push(Running {
            tool: "bash".into(),
            t: T,
            timeout: Some(1_800_000),
            asks: None,
        });
        let cfg = LivenessConfig {
            tool_grace_secs: 9_223_372_036_854_775,
            ..LivenessConfig::default()
        };
        let l = classify(&busy(), Some(&a), T + 5000 * 1000, &cfg);
        assert_eq!((l.class, l.alert), (LivenessClass::LongTool, None));
    }

    #[test]
    fn waiting_retrying_interrupted_unfinished() {
        let mut ev = busy();
        ev.pending = Some(Pending {
            permissions: 1,
            questions: 0,
        });
        assert_eq!(
            class_at(&ev, &act(T), 5000),
            (LivenessClass::AwaitingUser, Some(Severity::Info))
        );
        let ev = SessionEvidence {
            status: Some("retry".into()),
            retry: Some(serde_json::json!({"attempt": 2, "message": "overloaded"})),
            ..SessionEvidence::default()
        };
        assert_eq!(class_at(&ev, &act(T), 10), (LivenessClass::Retrying, None));
        let ev5 = SessionEvidence {
            retry: Some(serde_json::json!({"attempt": 5})),
            ..ev
        };
        assert_eq!(
            class_at(&ev5, &act(T), 10),
            (LivenessClass::Retrying, Some(Severity::Warning))
        );
        let idle = SessionEvidence {
            status: Some("idle".into()),
            todos_open: Some(2),
            ..SessionEvidence::default()
        };
        let mut a = act(T);
        a.in_flight = false;
        assert_eq!(
            class_at(&idle, &a, 10),
            (LivenessClass::NeedsFinalization, Some(Severity::Info))
        );
        a.error = Some("MessageAbortedError".into());
        assert_eq!(
            class_at(&idle, &a, 10),
            (LivenessClass::Interrupted, Some(Severity::Info))
        );
    }
}
