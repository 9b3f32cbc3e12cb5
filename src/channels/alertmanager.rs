//! The Alertmanager channel: alerts POSTed to every URL of an HA set (`/api/v2/alerts`),
//! labelled by host, root session, agent and model. Alertmanager groups, dedups and silences
//! by itself, and resolves an alert that is not re-sent: so every transition goes, and the open
//! alerts are re-posted on every tick.

use super::http::post;
use super::{ChannelUnit, ChannelConfig, ChannelTable, Sent};
use crate::event::{Event, AlertKind, Transition};
use crate::check::Problems;
use crate::cli::iso_ms as iso;
use crate::record::Program;
use crate::severity::Severity;
use serde::Serialize;
use serde_json::{json, Value};
use std::time::Duration;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Alertmanager {
    /// Every URL is posted to.
    pub urls: Vec<String>,
}

impl ChannelUnit for Alertmanager {
    fn take(t: &mut ChannelTable) -> Alertmanager {
        Alertmanager {
            urls: std::mem::take(&mut t.urls),
        }
    }
    fn check(&self, name: &str, key: &dyn Fn(&str) -> String, p: &mut Problems) {
        if self.urls.is_empty() {
            p.add(
                &key("type"),
                format!("channel {name:?}: alertmanager needs urls"),
            );
        }
        for (j, u) in self.urls.iter().enumerate() {
            p.url(&key(&format!("urls[{j}]")), u);
        }
    }
    fn deliver(&self, ch: &ChannelConfig, ev: &Event, now: i64, _: Duration) -> Result<Sent, String> {
        self.post(ch, &[(ev.clone(), None)], now)
    }
    fn routes_itself(&self) -> bool {
        true
    }
    fn reposts(&self) -> bool {
        true
    }
    fn repost(&self, ch: &ChannelConfig, open: &[Event], now: i64) -> Result<Sent, String> {
        let firing: Vec<(Event, Option<i64>)> = open.iter().map(|e| (e.clone(), None)).collect();
        self.post(ch, &firing, now)
    }
}

/// Alertmanager's `alertname` for an alert kind, whichever agent program it is about (the
/// `program` label says which). An alert announced before schema 13 (its key still
/// `opencode-…`, [`crate::event::LEGACY_KEY_PREFIX`]) keeps the name it fires under, so
/// Alertmanager, which knows an alert by its labels, ends that one instead of notifying anew.
pub fn alertname(kind: AlertKind, legacy: bool) -> &'static str {
    match (kind, legacy) {
        (AlertKind::Blind, _) => "WatchdogBlind",
        (AlertKind::Loop, false) => "AgentLoop",
        (AlertKind::Stalled, false) => "AgentStalled",
        (AlertKind::Retrying, false) => "AgentRetrying",
        (AlertKind::Waiting, false) => "AgentAwaitingUser",
        (AlertKind::Interrupted, false) => "AgentInterrupted",
        (AlertKind::Unfinished, false) => "AgentNeedsFinalization",
        // a done notice's key was never `opencode-…`: it has no legacy name
        (AlertKind::Done, _) => "AgentDone",
        // a test alert's key (oc-watchdog-test) was never rewritten: it has no legacy name
        (AlertKind::Test, _) => "WatchdogTest",
        (AlertKind::Loop, true) => "OpencodeLoop",
        (AlertKind::Stalled, true) => "OpencodeStalled",
        (AlertKind::Retrying, true) => "OpencodeRetrying",
        (AlertKind::Waiting, true) => "OpencodeAwaitingUser",
        (AlertKind::Interrupted, true) => "OpencodeInterrupted",
        (AlertKind::Unfinished, true) => "OpencodeNeedsFinalization",
    }
}

/// One Alertmanager alert. `ends` set means "resolved at"; `severity` overrides the event's
/// (to end the warning-level alert when an escalation opens the critical one).
pub fn am_alert(ev: &Event, ends: Option<i64>, severity: Option<Severity>, host: &str) -> Value {
    let sev = severity.unwrap_or(ev.severity);
    // the resolve event is severity info; it must end the alert that was firing
    let legacy = ev.dedup_key.starts_with(crate::event::LEGACY_KEY_PREFIX);
    let mut labels = json!({
        "alertname": alertname(ev.alert, legacy),
        "severity": sev.as_str(),
        "host": host,
        "root_session": ev.root,
        "agent": ev.agent.clone().unwrap_or_default(),
        "model": ev.model.clone().unwrap_or_default(),
    });
    // a label added to an alert firing since before schema 13 would make it another alert
    if !legacy && !matches!(ev.alert, AlertKind::Blind | AlertKind::Test) {
        let program = Program::of_details(&ev.details).unwrap_or(Program::Opencode);
        labels["program"] = json!(program);
    }
    let mut a = json!({
        "labels": labels,
        "annotations": {
            "summary": ev.title,
            "description": format!("{}\n{}", ev.summary, serde_json::to_string(&ev.details).unwrap_or_default()),
            "dedup_key": ev.dedup_key,
        },
        "startsAt": iso(ev.details.get("opened").and_then(Value::as_i64).unwrap_or(ev.t)),
    });
    if let Some(r) = ev.reason {
        a["annotations"]["reason"] = json!(r.as_str());
    }
    if let Some(f) = &ev.figures {
        a["annotations"]["burned"] = json!(crate::event::burned(f));
    }
    if let Some(l) = &ev.link {
        a["generatorURL"] = json!(l);
    }
    if let Some(e) = ends {
        a["endsAt"] = json!(iso(e));
    }
    a
}

impl Alertmanager {
    /// Posts alerts to every URL; succeeds when one accepted them. `alerts` pairs an event
    /// with the time it ended (None while firing).
    fn post(
        &self,
        ch: &ChannelConfig,
        alerts: &[(Event, Option<i64>)],
        now: i64,
    ) -> Result<Sent, String> {
        let host = crate::paths::hostname();
        let mut body = Vec::new();
        for (ev, ends) in alerts {
            match (ev.state, ends) {
                (Transition::Resolve, _) => {
                    // end whichever severity was firing
                    for sev in [Severity::Warning, Severity::Critical] {
                        body.push(am_alert(ev, Some(now), Some(sev), &host));
                    }
                }
                (Transition::Escalate, _) => {
                    body.push(am_alert(ev, Some(now), Some(Severity::Warning), &host));
                    body.push(am_alert(ev, None, None, &host));
                }
                (_, e) => {
                    // a critical alert was a warning once: keep that one ended (idempotent)
                    if ev.severity == Severity::Critical && e.is_none() {
                        body.push(am_alert(ev, Some(now), Some(Severity::Warning), &host));
                    }
                    body.push(am_alert(ev, *e, None, &host))
                }
            }
        }
        let body = Value::Array(body);
        let mut ok = Vec::new();
        let mut failed = Vec::new();
        for u in &self.urls {
            let url = format!("{}/api/v2/alerts", u.trim_end_matches('/'));
            match post(ch.timeout_secs, &url, &body, None) {
                Ok(_) => ok.push(u.clone()),
                Err(e) => failed.push(e),
            }
        }
        if ok.is_empty() {
            Err(failed.join("; "))
        } else {
            Ok(Sent {
                detail: format!("posted to {}", ok.join(", ")),
                peer_failures: failed,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::AlertKind;

    fn ev(key: &str, program: Option<&str>) -> Event {
        let mut details = serde_json::Map::new();
        if let Some(p) = program {
            details.insert("program".into(), json!(p));
        }
        Event {
            dedup_key: key.into(),
            severity: Severity::Warning,
            state: Transition::Trigger,
            title: "t".into(),
            summary: "s".into(),
            details,
            source: "oc-watchdog".into(),
            t: 0,
            alert: AlertKind::Loop,
            root: "r".into(),
            reason: None,
            figures: None,
            episode: Some(1),
            agent: Some("build".into()),
            model: None,
            link: None,
        }
    }

    /// Issue 39: an agent-neutral name and the program as a label; an alert firing since before
    /// schema 13 keeps the labels it fires under, or Alertmanager would see a second alert.
    #[test]
    fn a_loop_is_an_agent_loop_labelled_with_its_program_and_a_legacy_alert_keeps_its_labels() {
        let labels = |e: &Event| am_alert(e, None, None, "h")["labels"].clone();
        assert_eq!(
            labels(&ev("loop:r", Some("codex"))),
            json!({"alertname": "AgentLoop", "severity": "warning", "host": "h", "root_session": "r",
                   "agent": "build", "model": "", "program": "codex"})
        );
        assert_eq!(labels(&ev("loop:r", None))["program"], "opencode");
        assert_eq!(
            labels(&ev("opencode-loop:r", None)),
            json!({"alertname": "OpencodeLoop", "severity": "warning", "host": "h", "root_session": "r",
                   "agent": "build", "model": ""})
        );
    }
}
