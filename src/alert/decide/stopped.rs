//! The stop as an event of its episode (issue 28): an open loop episode whose stop was carried
//! out (by the `[stop]` policy or by an operator's `wd-store stop`, both in the `stops` table)
//! resolves at once with reason `stopped`, saying who stopped it, after how much, and how to
//! resume ([`stopped_step`]). A loop that goes on after it (someone resumed it) opens a new
//! episode as any loop that starts again; calls made before the stop was carried out do not
//! ([`quiet_since_stop`]), and neither does the interrupt the stop leaves in the session
//! ([`interrupt_of_stop`]).

use super::{figures, Marks, Step};
use crate::alert::{AlertEpisode, Reason, StopSeen, Verdict};
use std::collections::HashMap;

/// The resolve of an open loop episode whose stop was carried out; `marks` are this tick's of
/// its tree (none when the tree is not in the tick: the previous tick's figures then).
pub fn stopped_step(a: &AlertEpisode, marks: Option<Marks>) -> Option<Step> {
    let stop = a.stop.as_ref()?;
    let f = match &marks {
        Some(m) => figures(
            m.iter().map(|(_, m)| m).filter(|m| m.flagged),
            a.opened,
            a.flagged_ticks,
        ),
        None => figures(
            a.marks.values().filter(|m| m.flagged),
            a.opened,
            a.flagged_ticks,
        ),
    };
    Some(Step::Resolve {
        episode: a.id,
        key: a.key.clone(),
        reason: Reason::Stopped,
        why: stopped_why(stop),
        figures: Some(f),
        marks: marks.unwrap_or_default(),
    })
}

/// The resolve's line: who stopped which session, why, and how (as far as known: a stop read
/// under way has neither its process nor its count yet).
pub fn stopped_why(s: &StopSeen) -> String {
    let how = match (s.via.as_deref(), s.pid) {
        (Some("plugin"), Some(pid)) => format!(" through the plugin in opencode process {pid}"),
        (Some("http"), _) => " over HTTP".to_string(),
        (Some("sigint"), Some(pid)) => format!(" by SIGINT to its codex exec (process {pid})"),
        (Some("app-server"), _) => " through Codex's app-server daemon".to_string(),
        (Some("hook"), Some(pid)) => format!(" through its hook in Claude Code process {pid}"),
        _ => String::new(),
    };
    let after = s
        .calls_after_request
        .map(|n| format!(", {n} call(s) after the request"))
        .unwrap_or_default();
    format!(
        "session {} stopped by {}{}{how}{after}",
        s.session,
        s.who(),
        reason_words(&s.by),
    )
}

/// Has nothing of the tree called since the last episode's stop (its calls between the tick
/// that decided it and the stop are the stopped loop's, not a new one)?
pub fn quiet_since_stop(last: &AlertEpisode, flagged: &[&Verdict]) -> bool {
    let Some(s) = &last.stop else { return false };
    flagged.iter().all(|v| v.t.map_or(true, |t| t <= s.stopped))
}

/// Is this interrupted session's interrupt the one a stop left (no call since it)?
pub fn interrupt_of_stop(stopped: &HashMap<String, i64>, v: &Verdict) -> bool {
    stopped
        .get(&v.session)
        .is_some_and(|at| v.t.map_or(true, |t| t <= *at))
}

/// Words for a recorded stop reason.
pub fn reason_words(by: &str) -> &'static str {
    match by {
        "escalated" => " at its escalation ([stop] at_escalation)",
        "calls_cap" => " past its calls cap ([stop] after_calls)",
        "cost_cap" => " past its cost cap ([stop] after_cost)",
        _ => "",
    }
}
