//! The PagerDuty channel: Events API v2 (`trigger` for triggers and escalations, `resolve`),
//! with the routing key from the environment.

use super::http::{env_secret, post};
use super::{env_name, ChannelUnit, ChannelConfig, ChannelTable, Sent};
use crate::event::{Event, Transition};
use crate::check::Problems;
use serde::Serialize;
use serde_json::{json, Value};
use std::time::Duration;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Pagerduty {
    /// The environment variable holding the routing key.
    pub routing_key_env: Option<String>,
    /// The Events API endpoint.
    pub events_url: Option<String>,
}

impl ChannelUnit for Pagerduty {
    fn take(t: &mut ChannelTable) -> Pagerduty {
        Pagerduty {
            routing_key_env: t.routing_key_env.take(),
            events_url: t.events_url.take(),
        }
    }
    fn check(&self, name: &str, key: &dyn Fn(&str) -> String, p: &mut Problems) {
        if self.routing_key_env.is_none() {
            p.add(
                &key("type"),
                format!("channel {name:?}: pagerduty needs routing_key_env"),
            );
        }
        if let Some(u) = &self.events_url {
            p.url(&key("events_url"), u);
        }
        env_name(p, &key("routing_key_env"), &self.routing_key_env);
    }
    fn deliver(&self, ch: &ChannelConfig, ev: &Event, _: i64, _: Duration) -> Result<Sent, String> {
        let key = env_secret(&self.routing_key_env, "pagerduty routing key")?
            .ok_or("pagerduty without routing_key_env")?;
        let url = self
            .events_url
            .as_deref()
            .unwrap_or("https://events.pagerduty.com/v2/enqueue");
        post(ch.timeout_secs, url, &body(ev, &key), None).map(Sent::from)
    }
}

/// The PagerDuty Events API v2 body for an event.
pub fn body(ev: &Event, routing_key: &str) -> Value {
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
    // a stop (issue 28) resolves the incident; its payload says who stopped it and how to
    // resume, kept in the alert's log (PagerDuty needs no payload to resolve)
    if action == "trigger" || ev.details.contains_key("stop") {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{AlertKind, Reason};
    use crate::severity::Severity;

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
            alert: AlertKind::Loop,
            root: "r".into(),
            reason: Some(Reason::Stopped),
            figures: None,
            episode: Some(1),
            agent: None,
            model: None,
            link: None,
        };
        assert_eq!(
            body(&ev, "RK"),
            json!({"routing_key": "RK", "event_action": "resolve", "dedup_key": "k"})
        );
        // the resolve of a stop carries what the stop said
        let mut stop = ev.clone();
        stop.summary = "session r stopped by the watchdog after 40 calls and $0.25; resume with `opencode -s r` (its TUI) or `opencode run -s r \"continue\"`".into();
        stop.details.insert("stop".into(), json!({"by": "escalated", "resume": "opencode run -s r \"continue\""}));
        let b = body(&stop, "RK");
        assert_eq!(b["event_action"], "resolve");
        assert_eq!(b["payload"]["summary"], format!("t: {}", stop.summary));
        assert_eq!(b["payload"]["custom_details"]["stop"]["resume"], "opencode run -s r \"continue\"");
    }
}
