//! Delivery of one event through one channel: a freedesktop notification (notify-rust over
//! D-Bus), a JSON webhook, PagerDuty Events API v2, or Prometheus Alertmanager. Thin adapters
//! over the same event. A failure is returned as text, never raised past the caller.

use super::{Event, Kind, Transition};
use crate::cli::iso_ms as iso;
use crate::config::{ChannelConfig, ChannelType, Severity};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// A delivery that went out: what answered, and the peers that failed when only some did
/// (an Alertmanager HA pair with one peer down).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Sent {
    pub detail: String,
    pub peer_failures: Vec<String>,
}

impl From<String> for Sent {
    fn from(detail: String) -> Sent {
        Sent {
            detail,
            peer_failures: Vec::new(),
        }
    }
}

/// How long the desktop channel may spend in one run, over all its notifications: a session
/// bus that accepts but never answers costs one timeout per run, not one per alert.
pub struct Deadline {
    until: Instant,
}

impl Deadline {
    pub fn after(d: Duration) -> Deadline {
        Deadline {
            until: Instant::now() + d,
        }
    }
    pub fn left(&self) -> Duration {
        self.until.saturating_duration_since(Instant::now())
    }
}

/// Delivers `ev`; `Err` carries what went wrong, for the log and the database. `desktop` bounds
/// the desktop channel's time in this run.
pub fn deliver(
    ch: &ChannelConfig,
    ev: &Event,
    now: i64,
    desktop_left: Duration,
) -> Result<Sent, String> {
    match ch.kind {
        ChannelType::Desktop => desktop(ev, desktop_left).map(Sent::from),
        ChannelType::Webhook => webhook(ch, ev).map(Sent::from),
        ChannelType::Pagerduty => pagerduty(ch, ev).map(Sent::from),
        ChannelType::Alertmanager => alertmanager(ch, &[(ev.clone(), None)], now),
    }
}

fn agent(timeout: u64) -> ureq::Agent {
    ureq::AgentBuilder::new()
        .timeout_connect(Duration::from_secs(timeout.clamp(1, 5)))
        .timeout(Duration::from_secs(timeout.max(1)))
        .build()
}

fn post(
    ch: &ChannelConfig,
    url: &str,
    body: &Value,
    bearer: Option<String>,
) -> Result<String, String> {
    let mut req = agent(ch.timeout_secs).post(url);
    if let Some(t) = bearer {
        req = req.set("Authorization", &format!("Bearer {t}"));
    }
    // delivery errors go to the journal and the database: credentials in the channel's URL
    // (`https://user:pw@host`, `?token=`) or echoed by the endpoint are masked first
    match req.send_json(body) {
        Ok(r) => Ok(format!("HTTP {}", r.status())),
        Err(ureq::Error::Status(code, r)) => {
            let text = r.into_string().unwrap_or_default();
            Err(crate::scrub::mask_text(&format!(
                "POST {url}: HTTP {code} {}",
                text.chars().take(200).collect::<String>()
            )))
        }
        Err(e) => Err(crate::scrub::mask_text(&format!("POST {url}: {e}"))),
    }
}

fn env_secret(name: &Option<String>, what: &str) -> Result<Option<String>, String> {
    match name {
        None => Ok(None),
        Some(var) => std::env::var(var)
            .ok()
            .filter(|v| !v.is_empty())
            .map(Some)
            .ok_or_else(|| format!("{what}: environment variable {var} is not set")),
    }
}

/// The notification body: which session, agent and target, what the loop burned and why it
/// ended, and how to look closer.
pub fn desktop_body(ev: &Event) -> String {
    let mut b = ev.summary.clone();
    if let Some(l) = &ev.link {
        b += &format!("\n{l}");
    }
    b += "\nLook closer: wd-store loops";
    b
}

fn desktop(ev: &Event, wait: Duration) -> Result<String, String> {
    use notify_rust::{Notification, Urgency};
    let urgency = match ev.severity {
        Severity::Critical => Urgency::Critical,
        Severity::Warning => Urgency::Normal,
        Severity::Info => Urgency::Low,
    };
    let mut n = Notification::new();
    n.appname("oc-watchdog")
        .summary(&ev.title)
        .body(&desktop_body(ev))
        .urgency(urgency);
    // with a link: shown by a child that stays to open the page when the alert is clicked
    if let Some(url) = &ev.link {
        let note = crate::report::open::Note {
            summary: ev.title.clone(),
            body: desktop_body(ev),
            urgency: match urgency {
                Urgency::Critical => "critical",
                Urgency::Low => "low",
                Urgency::Normal => "normal",
            }
            .into(),
            url: url.clone(),
        };
        if let Some(r) = crate::report::open::show(&note, wait) {
            return r
                .map(|id| format!("notification {id}"))
                .map_err(|e| format!("desktop notification: {e}"));
        }
    }
    // a session bus that accepts but never answers must not hold the tick
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(n.show().map(|h| h.id()).map_err(|e| e.to_string()));
    });
    match rx.recv_timeout(wait) {
        Ok(Ok(id)) => Ok(format!("notification {id}")),
        Ok(Err(e)) => Err(format!("desktop notification: {e}")),
        Err(_) => Err(format!(
            "desktop notification: no answer within {:.1}s",
            wait.as_secs_f64()
        )),
    }
}

fn webhook(ch: &ChannelConfig, ev: &Event) -> Result<String, String> {
    let url = ch.url.as_deref().ok_or("webhook without url")?;
    let token = env_secret(&ch.token_env, "webhook token")?;
    post(
        ch,
        url,
        &serde_json::to_value(ev).map_err(|e| e.to_string())?,
        token,
    )
}

/// The PagerDuty Events API v2 body for an event.
pub fn pagerduty_body(ev: &Event, routing_key: &str) -> Value {
    let action = if ev.state == Transition::Resolve {
        "resolve"
    } else {
        "trigger"
    };
    let mut body = json!({
        "routing_key": routing_key,
        "event_action": action,
        "dedup_key": ev.dedup_key,
    });
    if action == "trigger" {
        body["payload"] = json!({
            "summary": format!("{}: {}", ev.title, ev.summary).chars().take(1024).collect::<String>(),
            "source": ev.source,
            "severity": ev.severity.as_str(),
            "component": ev.agent,
            "group": ev.root,
            "class": ev.alert.as_str(),
            "custom_details": ev.details,
        });
        if let Some(l) = &ev.link {
            body["links"] = json!([{"href": l, "text": "look closer"}]);
        }
    }
    body
}

fn pagerduty(ch: &ChannelConfig, ev: &Event) -> Result<String, String> {
    let key = env_secret(&ch.routing_key_env, "pagerduty routing key")?
        .ok_or("pagerduty without routing_key_env")?;
    let url = ch
        .events_url
        .as_deref()
        .unwrap_or("https://events.pagerduty.com/v2/enqueue");
    post(ch, url, &pagerduty_body(ev, &key), None)
}

/// Alertmanager's `alertname` for an alert kind.
pub fn alertname(kind: Kind) -> &'static str {
    match kind {
        Kind::Blind => "WatchdogBlind",
        Kind::Loop => "OpencodeLoop",
        Kind::Stalled => "OpencodeStalled",
        Kind::Retrying => "OpencodeRetrying",
        Kind::Waiting => "OpencodeAwaitingUser",
        Kind::Interrupted => "OpencodeInterrupted",
        Kind::Unfinished => "OpencodeNeedsFinalization",
        Kind::Test => "OpencodeWatchdog",
    }
}

/// One Alertmanager alert. `ends` set means "resolved at"; `severity` overrides the event's
/// (to end the warning-level alert when an escalation opens the critical one).
pub fn am_alert(ev: &Event, ends: Option<i64>, severity: Option<Severity>, host: &str) -> Value {
    let sev = severity.unwrap_or(ev.severity);
    // the resolve event is severity info; it must end the alert that was firing
    let labels = json!({
        "alertname": alertname(ev.alert),
        "severity": sev.as_str(),
        "host": host,
        "root_session": ev.root,
        "agent": ev.agent.clone().unwrap_or_default(),
        "model": ev.model.clone().unwrap_or_default(),
    });
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
        a["annotations"]["burned"] = json!(super::text::burned(f));
    }
    if let Some(l) = &ev.link {
        a["generatorURL"] = json!(l);
    }
    if let Some(e) = ends {
        a["endsAt"] = json!(iso(e));
    }
    a
}

pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "localhost".into())
}

/// Posts alerts to every Alertmanager URL of the channel; succeeds when one accepted them.
/// `alerts` pairs an event with the time it ended (None while firing).
pub fn alertmanager(
    ch: &ChannelConfig,
    alerts: &[(Event, Option<i64>)],
    now: i64,
) -> Result<Sent, String> {
    let host = hostname();
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
    for u in &ch.urls {
        let url = format!("{}/api/v2/alerts", u.trim_end_matches('/'));
        match post(ch, &url, &body, None) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pagerduty_resolve_carries_no_payload() {
        let ev = Event {
            dedup_key: "k".into(),
            severity: Severity::Info,
            state: Transition::Resolve,
            title: "t".into(),
            summary: "s".into(),
            details: Default::default(),
            source: "oc-watchdog".into(),
            t: 0,
            alert: Kind::Loop,
            root: "r".into(),
            reason: Some(super::super::Reason::Stopped),
            figures: None,
            episode: Some(1),
            agent: None,
            model: None,
            link: None,
        };
        assert_eq!(
            pagerduty_body(&ev, "RK"),
            json!({"routing_key": "RK", "event_action": "resolve", "dedup_key": "k"})
        );
    }
}
