//! The desktop channel: a freedesktop notification (notify-rust over D-Bus) on the operator's
//! session bus; with a link, a click on it opens the page. The channel gets its `timeout_secs`
//! once per run over all its notifications.

use super::{Channel, ChannelConfig, ChannelTable, Sent};
use crate::alert::Event;
use crate::check::Problems;
use crate::severity::Severity;
use serde::Serialize;
use std::time::Duration;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Desktop {}

impl Channel for Desktop {
    fn take(_: &mut ChannelTable) -> Desktop {
        Desktop {}
    }
    fn check(&self, _: &str, _: &dyn Fn(&str) -> String, _: &mut Problems) {}
    fn deliver(&self, _: &ChannelConfig, ev: &Event, _: i64, left: Duration) -> Result<Sent, String> {
        show(ev, left).map(Sent::from)
    }
    fn run_budget(&self) -> bool {
        true
    }
}

/// The notification body: which session, agent and target, what the loop burned and why it
/// ended, and how to look closer.
pub fn body(ev: &Event) -> String {
    let mut b = ev.summary.clone();
    if let Some(l) = &ev.link {
        b += &format!("\n{l}");
    }
    b += "\nLook closer: wd-store loops";
    b
}

fn show(ev: &Event, wait: Duration) -> Result<String, String> {
    use notify_rust::{Notification, Urgency};
    let urgency = match ev.severity {
        Severity::Critical => Urgency::Critical,
        Severity::Warning => Urgency::Normal,
        Severity::Info => Urgency::Low,
    };
    let mut n = Notification::new();
    n.appname("oc-watchdog")
        .summary(&ev.title)
        .body(&body(ev))
        .urgency(urgency);
    // with a link: shown by a child that stays to open the page when the alert is clicked
    if let Some(url) = &ev.link {
        let note = crate::report::open::Note {
            summary: ev.title.clone(),
            body: body(ev),
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
