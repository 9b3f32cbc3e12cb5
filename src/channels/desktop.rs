//! The desktop channel: a freedesktop notification (notify-rust over D-Bus) on the operator's
//! session bus (shown by [`crate::notify`]); with a link, a click on it opens the page. The channel gets its `timeout_secs`
//! once per run over all its notifications, and asks the bus first whether a server answers at
//! all (`GetServerInformation`, at most a second): when none does, what is owed waits for the
//! next run instead of spending the run on one popup. The later popups of an episode (the
//! escalation, the resolve) replace its earlier one (`replaces_id`, the id the server gave,
//! kept as the delivery's detail "notification ID"), so an episode has one popup on screen and
//! the resolve takes the place of the critical "still looping" one.

use super::{ChannelUnit, ChannelConfig, ChannelTable, Sent};
use crate::event::{AlertKind, Event, Transition};
use crate::check::Problems;
use crate::cli::shell_line;
use crate::severity::Severity;
use serde::Serialize;
use std::time::Duration;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Desktop {}

impl ChannelUnit for Desktop {
    fn take(_: &mut ChannelTable) -> Desktop {
        Desktop {}
    }
    fn check(&self, _: &str, _: &dyn Fn(&str) -> String, _: &mut Problems) {}
    fn deliver(&self, _: &ChannelConfig, ev: &Event, _: i64, left: Duration) -> Result<Sent, String> {
        show(ev, left, None).map(Sent::from)
    }
    fn deliver_after(
        &self,
        _: &ChannelConfig,
        ev: &Event,
        _: i64,
        left: Duration,
        earlier: Option<&str>,
    ) -> Result<Sent, String> {
        show(ev, left, earlier.and_then(notification_id)).map(Sent::from)
    }
    fn unanswered(&self, wait: Duration) -> Option<String> {
        crate::notify::unanswered(wait.min(PROBE))
    }
    fn run_budget(&self) -> bool {
        true
    }
    /// The Notify call was refused or never made (no bus, a daemon's error, a NUL in the text
    /// before it was shown visibly): nothing was shown. A call the bus took and nobody answered,
    /// or a notifier that ended without saying, may still be on screen.
    fn unsent(&self, detail: &str) -> bool {
        !(detail.contains("no answer within") || detail.contains("ended without a word"))
    }
}

/// The longest the bus is asked whether a notification server answers.
const PROBE: Duration = Duration::from_secs(1);

/// The id in what a delivery answered ("notification 7").
pub fn notification_id(detail: &str) -> Option<u32> {
    detail.strip_prefix("notification ")?.trim().parse().ok()
}

/// The notification body: which session, agent and target, what the loop burned and why it
/// ended, and how to look closer.
pub fn body(ev: &Event) -> String {
    let mut b = ev.summary.clone();
    if let Some(todo) = what_to_do(ev) {
        b += &format!("\n{todo}");
    }
    if let Some(l) = &ev.link {
        b += &format!("\n{l}");
    }
    b += "\nLook closer: wd-store loops";
    b
}

/// For a loop that goes on: how to stop it and keep its model away, in one line.
pub fn what_to_do(ev: &Event) -> Option<String> {
    if ev.alert != AlertKind::Loop || ev.state == Transition::Resolve {
        return None;
    }
    let session = ev.details.get("session").and_then(|s| s.as_str())?;
    let program = crate::record::Program::of_details(&ev.details);
    if let Some(keys) = program.and_then(|p| p.stop_by_hand()) {
        // no stop command, no model block: both reach opencode only
        return Some(format!("Stop it: {keys}"));
    }
    let runs_in = ev
        .details
        .get("runs_in")
        .and_then(|r| serde_json::from_value(r.clone()).ok());
    let mut todo = match crate::record::stop_by_hand(runs_in) {
        Some(keys) => format!(
            "Stop it: {keys}, or {}",
            shell_line("wd-store", &["stop", session])
        ),
        None => format!(
            "Stop it: {} (it aborts the session through its server)",
            shell_line("wd-store", &["stop", session])
        ),
    };
    if let Some(m) = &ev.model {
        // block-model refuses opencode's default model (blocked, no new opencode could start)
        todo += &format!(
            "; keep the model away: {} (not while it is opencode's default model)",
            shell_line("wd-store", &["block-model", m])
        );
    }
    Some(todo)
}

fn show(ev: &Event, wait: Duration, replaces: Option<u32>) -> Result<String, String> {
    let body = body(ev);
    // the "Stop the session" button runs wd-store stop: opencode's sessions only
    let opencode = crate::record::Program::of_details(&ev.details)
        .map_or(true, |p| p == crate::record::Program::Opencode);
    let stop = what_to_do(ev)
        .filter(|_| opencode)
        .and(ev.details.get("session"))
        .and_then(|s| s.as_str());
    let notice = crate::notify::Notice {
        summary: &ev.title,
        body: &body,
        urgency: match ev.severity {
            Severity::Critical => "critical",
            Severity::Warning => "normal",
            Severity::Info => "low",
        },
        url: ev.link.as_deref(),
        replaces,
        stop,
        expire_ms: expire_ms(ev),
    };
    crate::notify::show(&notice, wait)
}

/// How long a resolve that needs nobody stays on screen, in ms.
pub const RESOLVE_EXPIRE_MS: u32 = 10_000;

/// How long the popup stays (the Notify call's `expire_timeout`, 0 until dismissed): what
/// needs a person (every trigger and escalation, and the resolve of a stop the watchdog or the
/// operator carried out, whose session waits to be resumed: it carries `details.stop`) stays
/// until dismissed; an all-clear goes after [`RESOLVE_EXPIRE_MS`]. Left to the server, dunst's
/// defaults took a trigger or a stop off the screen after about 10 s.
pub fn expire_ms(ev: &Event) -> u32 {
    match ev.state {
        Transition::Resolve if !ev.details.contains_key("stop") => RESOLVE_EXPIRE_MS,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Reason;
    use crate::notify::{no_answer, not_asked};

    /// A question unanswered before the Notify call left nothing on screen: owed again. A
    /// Notify call unanswered may have shown: not sent twice. (In a burst of 20 loops at once,
    /// a trigger whose capabilities question went unanswered was lost as a popup that may
    /// have shown.)
    #[test]
    fn an_unanswered_question_before_notify_is_owed_again_an_unanswered_notify_is_not() {
        let wait = Duration::from_millis(700);
        assert!(Desktop {}.unsent(&not_asked(wait)));
        assert!(!Desktop {}.unsent(&no_answer(wait)));
    }

    /// What needs a person stays until dismissed (0); an all-clear goes after 10 s.
    #[test]
    fn a_trigger_an_escalation_and_a_stop_stay_an_all_clear_goes() {
        let mut ev = crate::alert::text::blind_event(
            &crate::config::Config::default(),
            &[("s".into(), "r".into())],
            1_000_000,
        );
        for (state, reason, ms) in [
            (Transition::Trigger, None, 0),
            (Transition::Escalate, Some(Reason::StillLooping), 0),
            (Transition::Resolve, Some(Reason::Stopped), 10_000),
            (Transition::Resolve, Some(Reason::Progress), 10_000),
        ] {
            ev.state = state;
            ev.reason = reason;
            assert_eq!(expire_ms(&ev), ms, "{state:?} {reason:?}");
        }
        // the resolve of a carried-out stop
        ev.details
            .insert("stop".into(), serde_json::json!({"by": "escalated"}));
        assert_eq!(expire_ms(&ev), 0);
    }

    /// A Claude Code or Codex loop is told how to stop it where it runs: `wd-store stop` and
    /// `block-model` reach opencode only (a trial's popup offered both for a `claude -p` loop).
    #[test]
    fn an_other_agents_loop_offers_its_own_keys_and_no_opencode_command() {
        let mut ev = crate::alert::text::blind_event(
            &crate::config::Config::default(),
            &[("s".into(), "r".into())],
            1_000_000,
        );
        ev.alert = AlertKind::Loop;
        ev.state = Transition::Trigger;
        ev.model = Some("claude-opus-5-5".into());
        let id = "3659d241-be04-4c30-82c8-07ddbd4b2968";
        ev.details.insert("session".into(), serde_json::json!(id));
        ev.details
            .insert("program".into(), serde_json::json!("claude-code"));
        assert_eq!(
            what_to_do(&ev).unwrap(),
            "Stop it: Ctrl-C in the terminal of its `claude -p`, Esc in its interactive session (wd-store stop reaches opencode's sessions only)"
        );
        assert!(!body(&ev).contains("wd-store stop 3659"), "{}", body(&ev));
        assert!(!body(&ev).contains("block-model"));
        ev.details.insert("program".into(), serde_json::json!("codex"));
        assert!(what_to_do(&ev)
            .unwrap()
            .starts_with("Stop it: Ctrl-C in the terminal of its `codex exec`, Esc in its TUI"));
        // opencode's, named or not, as before
        ev.details
            .insert("program".into(), serde_json::json!("opencode"));
        let todo = what_to_do(&ev).unwrap();
        assert!(todo.contains(&format!("wd-store stop {id}")), "{todo}");
        ev.details.remove("program");
        assert_eq!(what_to_do(&ev).unwrap(), todo);
    }
}
