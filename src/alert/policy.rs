//! The stop policy (`[stop]`, issue 28, off by default) and the stop as an event of its episode.
//!
//! One pure rule and one edge:
//! * [`wanted`]: which loops this tick's plan asks to stop. A loop that went on this tick (a
//!   `Count` step: new calls, nothing landed) is stopped when its episode escalates or is
//!   critical (`at_escalation`), or once its calls or cost since the trigger pass a cap
//!   (`after_calls`, `after_cost`); never when a change landed in its tree since the trigger,
//!   never twice for one episode (a stop asked before, whatever became of it), and only its
//!   flagged sessions that are active (a stalled, waiting or unknown session stays an alert).
//! * the stop as an event of its episode is the plan's ([`super::decide::stopped`]): an open loop
//!   episode whose stop was carried out resolves at once with reason `stopped`.
//! * [`carry_out`]: after the transaction that decided them commits, each wanted stop through
//!   [`crate::stop::stop`], bounded by `[stop] wait_secs`; a refusal is recorded as a `failed`
//!   stop of the episode, so the policy does not ask again, and logged.

use super::decide::Step;
use super::stage::TickIndex;
use super::{AlertEpisode, Verdict};
use crate::config::{Config, StopConfig};
use crate::record::LivenessClass;
use crate::severity::Severity;
use crate::store::Store;
use anyhow::Result;
use rusqlite::params;
use std::collections::HashMap;
use std::time::Duration;

/// Why the policy stops a loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// Its episode escalated (or is critical and went on).
    Escalated,
    /// Its calls since the trigger reached `[stop] after_calls`.
    CallsCap,
    /// Its cost since the trigger reached `[stop] after_cost`.
    CostCap,
}

impl StopReason {
    /// The `stops.reason` it is recorded with.
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::Escalated => "escalated",
            StopReason::CallsCap => "calls_cap",
            StopReason::CostCap => "cost_cap",
        }
    }
}

/// A stop the policy wants: one flagged, active session of a loop episode's tree.
#[derive(Debug, Clone, PartialEq)]
pub struct Wanted {
    pub episode: i64,
    pub session: String,
    pub reason: StopReason,
}

/// A session the policy may stop: it is running, by its liveness (an active loop, or one in a
/// long tool call). Stalled, waiting, retrying, suspect or unknown sessions stay alerts.
fn stoppable(v: &Verdict) -> bool {
    matches!(
        v.liveness_class(),
        Some(LivenessClass::Active | LivenessClass::LongTool)
    )
}

/// The rule: the stops this tick's plan asks for (none while `[stop]` is off).
pub fn wanted(
    p: &StopConfig,
    steps: &[Step],
    open: &HashMap<i64, &AlertEpisode>,
    index: &TickIndex,
) -> Vec<Wanted> {
    if !p.on() {
        return Vec::new();
    }
    let mut out = Vec::new();
    for s in steps {
        let Step::Count {
            episode,
            root,
            escalate,
            figures,
            ..
        } = s
        else {
            continue;
        };
        let Some(a) = open.get(episode) else { continue };
        if a.landed.is_some() || a.stop_tried || a.stop.is_some() {
            continue;
        }
        let critical = escalate.is_some() || a.severity == Severity::Critical;
        let calls = figures.calls.saturating_sub(a.trigger_calls);
        let cost = figures.cost - a.trigger_cost;
        let reason = if p.at_escalation && critical {
            StopReason::Escalated
        } else if p.after_calls > 0 && calls >= p.after_calls {
            StopReason::CallsCap
        } else if p.after_cost > 0.0 && cost + 1e-9 >= p.after_cost {
            StopReason::CostCap
        } else {
            continue;
        };
        let tree = index.trees.get(root.as_str()).into_iter().flatten();
        for v in tree.filter(|v| v.flagged && stoppable(v)) {
            out.push(Wanted {
                episode: *episode,
                session: v.session.clone(),
                reason,
            });
        }
    }
    out
}

/// Carries out the wanted stops, one after the other, each bounded by `[stop] wait_secs`;
/// the episodes whose stop was carried out.
pub fn carry_out(store: &mut Store, cfg: &Config, wanted: &[Wanted]) -> Result<Vec<i64>> {
    let mut done = Vec::new();
    for w in wanted {
        let episode = format!("episode:{}", w.episode);
        let req = crate::stop::Request {
            session: &w.session,
            episode: Some(&episode),
            reason: w.reason.as_str(),
            wait: Duration::from_secs(cfg.stop.wait_secs.max(1)),
        };
        match crate::stop::stop(store, cfg, &req) {
            Ok(o) => {
                eprintln!(
                    "oc-watchdog: stop session={} episode={} reason={} status={}: {}",
                    w.session,
                    w.episode,
                    w.reason.as_str(),
                    o.status,
                    o.message
                );
                if o.status == "stopped" && !done.contains(&w.episode) {
                    done.push(w.episode);
                }
            }
            Err(e) => {
                let why = format!("{e:#}");
                eprintln!(
                    "oc-watchdog: stop session={} episode={} reason={} status=refused: {why}",
                    w.session,
                    w.episode,
                    w.reason.as_str()
                );
                refused(store, w, &episode, &why)?;
            }
        }
    }
    Ok(done)
}

/// Records a policy stop that was refused (or failed before its row was written) as `failed`,
/// so the policy asks once per episode; an operator's `wd-store stop` may still try.
fn refused(store: &mut Store, w: &Wanted, episode: &str, why: &str) -> Result<()> {
    let tx = store.write()?;
    tx.execute(
        "INSERT INTO stops (action_id, session, episode, reason, t, status, detail, turn)
         VALUES (?1, ?2, ?3, ?4, ?5, 'failed', ?6, 'none')
         ON CONFLICT (action_id) DO NOTHING",
        params![
            format!("stop:{}:{episode}", w.session),
            w.session,
            episode,
            w.reason.as_str(),
            crate::cli::now_ms(),
            why
        ],
    )?;
    tx.commit()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::decide::stopped::{interrupt_of_stop, quiet_since_stop, stopped_step};
    use super::super::{Reason, StopSeen};
    use super::*;
    use crate::alert::{Figures, TickView};
    use crate::record::Liveness;
    use serde_json::json;

    fn v(session: &str, flagged: bool, class: &str) -> Verdict {
        Verdict {
            session: session.into(),
            root: "r".into(),
            flagged,
            calls: 40,
            calls_since_landed: 40,
            t: Some(1_000),
            liveness: (!class.is_empty()).then(|| Liveness {
                class: serde_json::from_value(json!(class)).unwrap(),
                ..Liveness::default()
            }),
            ..Verdict::default()
        }
    }

    fn episode(sev: Severity) -> AlertEpisode {
        AlertEpisode {
            id: 7,
            key: "loop:r".into(),
            subject: "r".into(),
            severity: sev,
            trigger_calls: 10,
            trigger_cost: 0.10,
            ..AlertEpisode::default()
        }
    }

    fn count(escalate: bool, calls: u64, cost: f64) -> Step {
        Step::Count {
            episode: 7,
            root: "r".into(),
            flagged_ticks: 2,
            escalate: escalate.then_some(Reason::StillLooping),
            figures: Figures {
                calls,
                cost,
                ..Figures::default()
            },
            ask: false,
            opinion: None,
            marks: Vec::new(),
        }
    }

    fn policy(at_escalation: bool, after_calls: u64, after_cost: f64) -> StopConfig {
        StopConfig {
            at_escalation,
            after_calls,
            after_cost,
            ..StopConfig::default()
        }
    }

    /// (policy, episode, step, tree) -> the sessions stopped and why.
    fn run(
        p: StopConfig,
        a: AlertEpisode,
        step: Step,
        vs: Vec<Verdict>,
    ) -> Vec<(String, &'static str)> {
        let tick = TickView {
            verdicts: vs,
            ..TickView::default()
        };
        let index = TickIndex::of(&tick);
        let open: HashMap<i64, &AlertEpisode> = [(7, &a)].into_iter().collect();
        wanted(&p, &[step], &open, &index)
            .into_iter()
            .map(|w| (w.session, w.reason.as_str()))
            .collect()
    }

    /// (what, policy, episode, step, tree, the sessions stopped and why)
    type RuleRow = (
        &'static str,
        StopConfig,
        AlertEpisode,
        Step,
        Vec<Verdict>,
        Vec<(String, &'static str)>,
    );

    #[test]
    fn one_row_per_rule() {
        use Severity::{Critical, Warning};
        let active = || vec![v("r", true, "active")];
        let landed = AlertEpisode {
            landed: Some(5),
            ..episode(Warning)
        };
        let tried = AlertEpisode {
            stop_tried: true,
            ..episode(Warning)
        };
        let stopped = |s: &str, r: &'static str| vec![(s.to_string(), r)];
        let none: Vec<(String, &str)> = Vec::new();
        // (what, policy, episode, step, tree, stopped)
        let rows: Vec<RuleRow> = vec![
            (
                "off by default",
                StopConfig::default(),
                episode(Warning),
                count(true, 40, 1.0),
                active(),
                none.clone(),
            ),
            (
                "at escalation",
                policy(true, 0, 0.0),
                episode(Warning),
                count(true, 40, 1.0),
                active(),
                stopped("r", "escalated"),
            ),
            (
                "critical already, goes on",
                policy(true, 0, 0.0),
                episode(Critical),
                count(false, 40, 1.0),
                active(),
                stopped("r", "escalated"),
            ),
            (
                "a warning that goes on",
                policy(true, 0, 0.0),
                episode(Warning),
                count(false, 40, 1.0),
                active(),
                none.clone(),
            ),
            (
                "calls since the trigger reach the cap",
                policy(false, 30, 0.0),
                episode(Warning),
                count(false, 40, 0.2),
                active(),
                stopped("r", "calls_cap"),
            ),
            (
                "calls since the trigger below the cap",
                policy(false, 31, 0.0),
                episode(Warning),
                count(false, 40, 0.2),
                active(),
                none.clone(),
            ),
            (
                "cost since the trigger reaches the cap",
                policy(false, 0, 2.0),
                episode(Warning),
                count(false, 40, 2.10),
                active(),
                stopped("r", "cost_cap"),
            ),
            (
                "cost since the trigger below the cap",
                policy(false, 0, 2.0),
                episode(Warning),
                count(false, 40, 2.09),
                active(),
                none.clone(),
            ),
            (
                "landed since the trigger",
                policy(true, 1, 0.01),
                landed,
                count(true, 40, 1.0),
                active(),
                none.clone(),
            ),
            (
                "asked before (once per episode)",
                policy(true, 0, 0.0),
                tried,
                count(true, 40, 1.0),
                active(),
                none.clone(),
            ),
            (
                "stalled stays an alert",
                policy(true, 0, 0.0),
                episode(Warning),
                count(true, 40, 1.0),
                vec![v("r", true, "stalled")],
                none.clone(),
            ),
            (
                "waiting stays an alert",
                policy(true, 0, 0.0),
                episode(Warning),
                count(true, 40, 1.0),
                vec![v("r", true, "awaiting_user")],
                none.clone(),
            ),
            (
                "unknown stays an alert",
                policy(true, 0, 0.0),
                episode(Warning),
                count(true, 40, 1.0),
                vec![v("r", true, "")],
                none.clone(),
            ),
            (
                "a long tool call is running",
                policy(true, 0, 0.0),
                episode(Warning),
                count(true, 40, 1.0),
                vec![v("r", true, "long_tool")],
                stopped("r", "escalated"),
            ),
            (
                "only the flagged, active sessions of the tree",
                policy(true, 0, 0.0),
                episode(Warning),
                count(true, 40, 1.0),
                vec![
                    v("r", false, "active"),
                    v("c1", true, "active"),
                    v("c2", true, "stalled"),
                ],
                stopped("c1", "escalated"),
            ),
        ];
        for (what, p, a, step, tree, want) in rows {
            assert_eq!(run(p, a, step, tree), want, "{what}");
        }
    }

    #[test]
    fn only_a_loop_that_went_on_is_stopped() {
        let hold = Step::Hold {
            episode: 7,
            root: "r".into(),
            why: super::super::decide::Hold::Quiet,
            marks: Vec::new(),
        };
        assert!(run(
            policy(true, 1, 0.01),
            episode(Severity::Critical),
            hold,
            vec![v("r", true, "active")]
        )
        .is_empty());
    }

    fn stop(by: &str, at: i64) -> StopSeen {
        StopSeen {
            action_id: "stop:r:episode:7".into(),
            session: "r".into(),
            by: by.into(),
            stopped: at,
            via: Some("plugin".into()),
            pid: Some(42),
            calls_after_request: Some(1),
        }
    }

    #[test]
    fn a_carried_out_stop_resolves_its_episode_saying_who_and_how() {
        let a = AlertEpisode {
            stop: Some(stop("escalated", 2_000)),
            ..episode(Severity::Critical)
        };
        let Some(Step::Resolve { reason, why, .. }) = stopped_step(&a, None) else {
            panic!("no resolve")
        };
        assert_eq!(reason, Reason::Stopped);
        assert_eq!(
            why,
            "session r stopped by the watchdog at its escalation ([stop] at_escalation) through the plugin in opencode process 42, 1 call(s) after the request"
        );
        let a = AlertEpisode {
            stop: Some(StopSeen {
                via: Some("http".into()),
                pid: None,
                calls_after_request: Some(0),
                ..stop("operator", 2_000)
            }),
            ..episode(Severity::Warning)
        };
        let Some(Step::Resolve { why, .. }) = stopped_step(&a, None) else {
            panic!("no resolve")
        };
        assert_eq!(
            why,
            "session r stopped by the operator (wd-store stop) over HTTP, 0 call(s) after the request"
        );
        // a click on the popup's stop action is the operator's, and says so (it read
        // "(wd-store stop)")
        let a = AlertEpisode {
            stop: Some(stop("popup", 2_000)),
            ..episode(Severity::Warning)
        };
        let Some(Step::Resolve { why, .. }) = stopped_step(&a, None) else {
            panic!("no resolve")
        };
        assert_eq!(
            why,
            "session r stopped by the operator (the popup's stop action) through the plugin in opencode process 42, 1 call(s) after the request"
        );
        assert_eq!(stopped_step(&episode(Severity::Warning), None), None);
    }

    #[test]
    fn calls_up_to_the_stop_are_the_stopped_loops() {
        let last = AlertEpisode {
            stop: Some(stop("escalated", 2_000)),
            ..episode(Severity::Critical)
        };
        let at = |t: i64| Verdict {
            t: Some(t),
            ..v("r", true, "interrupted")
        };
        assert!(quiet_since_stop(&last, &[&at(1_999)]));
        assert!(quiet_since_stop(&last, &[&at(2_000)]));
        assert!(!quiet_since_stop(&last, &[&at(2_001)]));
        assert!(!quiet_since_stop(&episode(Severity::Critical), &[&at(1)]));
        let stopped: HashMap<String, i64> = [("r".to_string(), 2_000)].into_iter().collect();
        assert!(interrupt_of_stop(&stopped, &at(1_999)));
        assert!(!interrupt_of_stop(&stopped, &at(2_500)));
        assert!(!interrupt_of_stop(&HashMap::new(), &at(1_999)));
    }

    /// The lifecycle with stops: (open, last, stopped sessions, tick) -> the steps, named.
    fn lifecycle(
        open: Vec<AlertEpisode>,
        last: HashMap<String, AlertEpisode>,
        stopped: HashMap<String, i64>,
        vs: Vec<Verdict>,
    ) -> Vec<String> {
        let tick = TickView {
            verdicts: vs,
            sources: vec!["db".into()],
            t: 5_000,
            ..TickView::default()
        };
        let plan = super::super::decide::decide(&super::super::decide::DecisionInput {
            open: &open,
            last: &last,
            tick: &tick,
            answers: &HashMap::new(),
            escalate: super::super::decide::Escalate::Ticks(3),
            stopped: &stopped,
            done: false,
        });
        plan.steps
            .iter()
            .map(|s| match s {
                Step::Open { kind, .. } => format!("open {}", kind.as_str()),
                Step::Count { .. } => "count".into(),
                Step::Hold { .. } => "hold".into(),
                Step::Resolve { reason, .. } => format!("resolve {}", reason.as_str()),
                Step::StillBlind { .. } => "still blind".into(),
            })
            .collect()
    }

    fn looping(calls: u64, class: &str, t: i64) -> Verdict {
        let mut v = Verdict {
            calls,
            calls_since_landed: calls,
            t: Some(t),
            source: Some("db".into()),
            ..v("r", true, class)
        };
        if class == "interrupted" {
            // as liveness tells an abort: interrupted by the user, an info alert
            let l = v.liveness.as_mut().unwrap();
            l.alert = Some(Severity::Info);
            l.evidence = crate::liveness::BY_THE_USER.into();
        }
        v
    }

    fn with_marks(mut a: AlertEpisode, calls: u64) -> AlertEpisode {
        a.kind = Some(super::super::AlertKind::Loop);
        a.marks.insert(
            "r".into(),
            crate::alert::SessionMark {
                calls,
                calls_since_landed: calls,
                flagged: true,
                ..Default::default()
            },
        );
        a
    }

    #[test]
    fn the_lifecycle_resolves_a_stopped_loop_at_once_and_says_nothing_more_of_it() {
        let stopped = AlertEpisode {
            stop: Some(stop("operator", 2_000)),
            ..with_marks(episode(Severity::Warning), 40)
        };
        // the stop made one more call (before it was carried out) and left an interrupt: the
        // episode resolves `stopped`, not counted, and no "interrupted" alert opens
        let seen: HashMap<String, i64> = [("r".to_string(), 2_000)].into_iter().collect();
        assert_eq!(
            lifecycle(
                vec![stopped.clone()],
                HashMap::new(),
                seen.clone(),
                vec![looping(41, "interrupted", 1_900)]
            ),
            ["resolve stopped"]
        );
        // the next tick: the tree is still flagged, nothing called since the stop: no new episode
        let mut last = stopped.clone();
        last.marks.get_mut("r").unwrap().calls = 40;
        let lasts: HashMap<String, AlertEpisode> = [(last.key.clone(), last)].into_iter().collect();
        assert!(lifecycle(
            vec![],
            lasts.clone(),
            seen.clone(),
            vec![looping(41, "interrupted", 1_900)]
        )
        .is_empty());
        // someone resumed it and it loops again: a new episode
        assert_eq!(
            lifecycle(vec![], lasts, seen, vec![looping(45, "active", 3_000)]),
            ["open loop"]
        );
        // without the stop's record, it is a person's interrupt: the loop's resolve says so, and
        // no alert of its own opens
        assert_eq!(
            lifecycle(
                vec![stopped],
                HashMap::new(),
                HashMap::new(),
                vec![looping(41, "interrupted", 1_900)]
            ),
            ["resolve stopped"]
        );
        // without a stop, the same call counts
        assert_eq!(
            lifecycle(
                vec![with_marks(episode(Severity::Warning), 40)],
                HashMap::new(),
                HashMap::new(),
                vec![looping(41, "active", 1_900)]
            ),
            ["count"]
        );
    }
}
