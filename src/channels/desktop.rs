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

/// The lines of text dunst's default box shows (`/etc/xdg/dunst/dunstrc`: width and height
/// 300 px, `Monospace 8`, padding 8, frame 3): 42 characters a line, 21 lines with the
/// summary's (seen on Xvfb: a 22nd is not drawn). A popup keeps to [`BOX_LINES`] of them, one
/// spare for dunst's age note.
pub const BOX_COLUMNS: usize = 42;
pub const BOX_LINES: usize = 20;

/// The notification body: which session, agent and target, what the loop burned and why it
/// ended, what to do, the page's link and how to look closer. The lines after the first show
/// whole; the first (the event's summary, its most telling words first) is cut at its end, so
/// that with the summary above it all fits [`BOX_LINES`]: dunst's default box cut the critical
/// popup's last lines, the link and "Look closer", instead.
pub fn body(ev: &Event) -> String {
    let mut after = Vec::new();
    if let Some(todo) = what_to_do(ev) {
        after.push(todo);
    }
    if let Some(l) = &ev.link {
        after.push(l.clone());
    }
    // a done notice is no loop: it is among the alerts (closed as it was told)
    after.push(if ev.alert == AlertKind::Done {
        "Look closer: wd-store alerts".into()
    } else {
        "Look closer: wd-store loops".into()
    });
    // dunst opens the summary's line with its indicators: "(AU) " for actions and a link
    let title = crate::notify::plain::visible(&ev.title, crate::notify::plain::SUMMARY_CAP, false);
    let used = wrapped_lines(&format!("(AU) {title}"))
        + after.iter().map(|l| wrapped_lines(l)).sum::<usize>();
    let room = BOX_LINES.saturating_sub(used).max(2);
    let summary = crate::notify::plain::visible(&ev.summary, crate::notify::plain::LINE_CAP, false);
    let mut b = cut_to_lines(&summary, room);
    for l in after {
        b.push('\n');
        b += &l;
    }
    b
}

/// The lines `text` takes in the box: wrapped at spaces, a word longer than a line split.
/// Pango also breaks after `-` and `/`, so the box never takes more.
fn wrapped_lines(text: &str) -> usize {
    wrap(text).len()
}

fn wrap(text: &str) -> Vec<String> {
    let mut lines: Vec<String> = vec![String::new()];
    for word in text.split(' ') {
        let mut word: Vec<char> = word.chars().collect();
        loop {
            let last = lines.last_mut().expect("a line");
            let len = last.chars().count();
            let gap = usize::from(len > 0);
            if len + gap + word.len() <= BOX_COLUMNS {
                if gap == 1 {
                    last.push(' ');
                }
                last.extend(word.iter());
                break;
            }
            if word.len() > BOX_COLUMNS && len + gap < BOX_COLUMNS {
                // a word longer than a line fills this one and goes on on the next
                let take = BOX_COLUMNS - len - gap;
                if gap == 1 {
                    last.push(' ');
                }
                last.extend(word.drain(..take));
            }
            lines.push(String::new());
        }
    }
    lines
}

/// `text` cut at its end, by words, with `…`, to at most `lines` lines of the box.
fn cut_to_lines(text: &str, lines: usize) -> String {
    if wrapped_lines(text) <= lines {
        return text.to_string();
    }
    let words: Vec<&str> = text.split(' ').collect();
    let mut n = words.len();
    while n > 1 && wrapped_lines(&format!("{}…", words[..n].join(" "))) > lines {
        n -= 1;
    }
    let kept = words[..n].join(" ");
    let kept = kept.trim_end_matches([',', ';', ':', ' ']);
    let mut cut = format!("{kept}…");
    while wrapped_lines(&cut) > lines && cut.chars().count() > 1 {
        // one word longer than the room: cut it by characters
        let mut c: Vec<char> = cut.chars().collect();
        c.truncate(c.len().saturating_sub(2));
        cut = c.into_iter().collect::<String>() + "…";
    }
    cut
}

/// For a loop that goes on: how to stop it and keep its model away, in one line.
pub fn what_to_do(ev: &Event) -> Option<String> {
    what_to_do_with(ev, claude_hook(ev))
}

/// Whether the event is of a Claude Code session and the watchdog's hook is installed, so that
/// `wd-store stop` reaches it.
fn claude_hook(ev: &Event) -> bool {
    crate::record::Program::of_details(&ev.details) == Some(crate::record::Program::ClaudeCode)
        && crate::claude_hook::settings::installed()
}

/// [`what_to_do`], told whether the Claude Code hook is installed.
fn what_to_do_with(ev: &Event, hook: bool) -> Option<String> {
    if ev.alert != AlertKind::Loop || ev.state == Transition::Resolve {
        return None;
    }
    let session = ev.details.get("session").and_then(|s| s.as_str())?;
    let program = crate::record::Program::of_details(&ev.details);
    if let (true, Some(keys)) = (hook, program.and_then(|p| p.hand_keys())) {
        // no model block: it reaches opencode only
        return Some(format!(
            "Stop it: {keys}, or {} (its hook refuses the next tool call and ends the turn)",
            shell_line("wd-store", &["stop", session])
        ));
    }
    if let Some(keys) = program.and_then(|p| p.stop_by_hand()) {
        // no model block: it edits opencode's config
        return Some(match program.and_then(|p| p.watchdog_stop()) {
            Some(_) => format!(
                "Stop it: {keys}, or {} (the thread stays resumable)",
                shell_line("wd-store", &["stop", session])
            ),
            None => format!("Stop it: {keys}"),
        });
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
    // the "Stop the session" button runs wd-store stop: for the agents it reaches (Claude
    // Code's once its hook is installed)
    let reached = crate::record::Program::of_details(&ev.details).map_or(true, |p| {
        p == crate::record::Program::Opencode || p.watchdog_stop().is_some()
    }) || claude_hook(ev);
    let stop = what_to_do(ev)
        .filter(|_| reached)
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

/// How long a done notice stays on screen, in ms: news that needs nobody now, with more to read
/// than an all-clear (what the turn landed), so twice its time.
pub const DONE_EXPIRE_MS: u32 = 20_000;

/// How long the popup stays (the Notify call's `expire_timeout`, 0 until dismissed): what
/// needs a person (every trigger and escalation, and the resolve of a stop the watchdog or the
/// operator carried out, whose session waits to be resumed: it carries `details.stop`) stays
/// until dismissed; an all-clear goes after [`RESOLVE_EXPIRE_MS`], a done notice after
/// [`DONE_EXPIRE_MS`]. Left to the server, dunst's defaults took a trigger or a stop off the
/// screen after about 10 s.
pub fn expire_ms(ev: &Event) -> u32 {
    match ev.state {
        _ if ev.alert == AlertKind::Done => DONE_EXPIRE_MS,
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

    /// A follow-mode escalation of a subagent's loop, whose session's way to stop is unknown,
    /// with a long title and model: as seen on Xvfb, dunst's default box drew 21 lines and cut
    /// the link's end and "Look closer".
    #[test]
    fn a_critical_popup_keeps_its_link_and_look_closer_within_dunsts_default_box() {
        let mut ev = crate::alert::text::blind_event(
            &crate::config::Config::default(),
            &[("s".into(), "r".into())],
            1_000_000,
        );
        ev.alert = AlertKind::Loop;
        ev.state = Transition::Escalate;
        ev.severity = Severity::Critical;
        ev.title = "opencode loop: general repeats bash python3 tools/check.py".into();
        ev.summary = "still looping 5 min 12 s and 123 calls after the alert, past the 5-min bar: \
            session ses_dcdfd9a1cffeQ0xWn3M2oZ8kLp \"Fix the flaky payment retry test in the \
            billing service\" in ~/work/billing-service (in the tree of \
            ses_dcdfdbf2dffeIoO72qsqpHYtbT), agent general, model \
            openrouter/anthropic/claude-sonnet-4.5: repeats bash python3 tools/check.py; 136 \
            calls, $1.22, 12 min since its last landed change (flagged by top, run, same_failure)"
            .into();
        ev.details
            .insert("session".into(), "ses_dcdfd9a1cffeQ0xWn3M2oZ8kLp".into());
        ev.model = Some("openrouter/anthropic/claude-sonnet-4.5".into());
        ev.link = Some(
            "file:///home/alice/.local/state/oc-watchdog/report.html#ses_dcdfdbf2dffeIoO72qsqpHYtbT"
                .into(),
        );
        let b = body(&ev);
        let lines: Vec<&str> = b.lines().collect();
        assert_eq!(lines.len(), 4, "{b}");
        assert_eq!(
            lines[0],
            "still looping 5 min 12 s and 123 calls after the alert, past the 5-min bar: \
             session ses_dcdfd9a1cffeQ0xWn3M2oZ8kLp \"Fix the flaky payment retry test in the \
             billing service\" in ~/work/billing-service (in the tree of \
             ses_dcdfdbf2dffeIoO72qsqpHYtbT), agent…"
        );
        assert_eq!(
            lines[1],
            "Stop it: Esc twice in its TUI, Ctrl-C in the terminal of its `opencode run`, or \
             wd-store stop ses_dcdfd9a1cffeQ0xWn3M2oZ8kLp; keep the model away: wd-store \
             block-model openrouter/anthropic/claude-sonnet-4.5 (not while it is opencode's \
             default model)"
        );
        assert_eq!(lines[2], ev.link.as_deref().unwrap());
        assert_eq!(lines[3], "Look closer: wd-store loops");
        // in the box: the summary's 2 lines and the body's, as a wrap at spaces counts them
        // (the body was 22 lines with them)
        let used = wrapped_lines(&format!("(AU) {}", ev.title))
            + lines.iter().map(|l| wrapped_lines(l)).sum::<usize>();
        assert_eq!(used, 20, "{b}");
        // a short one is not cut
        ev.summary = "session ses_x, agent build: repeats read a.md".into();
        assert!(body(&ev).starts_with("session ses_x, agent build: repeats read a.md\nStop it"));
    }

    #[test]
    fn the_box_wraps_at_spaces_and_splits_a_word_longer_than_a_line() {
        assert_eq!(wrap("a b"), ["a b"]);
        let long = "x".repeat(50);
        assert_eq!(wrap(&format!("ab {long}")), [format!("ab {}", "x".repeat(39)), "x".repeat(11)]);
        assert_eq!(wrapped_lines(&"word ".repeat(20)), 3);
        assert_eq!(cut_to_lines("one two three", 1), "one two three");
        assert_eq!(cut_to_lines(&"word ".repeat(20), 1), format!("{}…", ["word"; 8].join(" ")));
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
        // a done notice: news that needs nobody now
        ev.details.remove("stop");
        ev.alert = AlertKind::Done;
        ev.state = Transition::Trigger;
        ev.severity = Severity::Info;
        assert_eq!(expire_ms(&ev), 20_000);
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
            what_to_do_with(&ev, false).unwrap(),
            "Stop it: Ctrl-C in the terminal of its `claude -p`, Esc in its interactive session (wd-store stop reaches it once the watchdog's hook is installed: deploy/install --with-stop-plugin)"
        );
        assert_eq!(
            what_to_do_with(&ev, true).unwrap(),
            format!("Stop it: Ctrl-C in the terminal of its `claude -p`, Esc in its interactive session, or wd-store stop {id} (its hook refuses the next tool call and ends the turn)")
        );
        assert!(!body(&ev).contains("wd-store stop 3659"), "{}", body(&ev));
        assert!(!body(&ev).contains("block-model"));
        // a Codex thread: wd-store stop reaches it (SIGINT to codex exec, the daemon's
        // turn/interrupt for the TUI), beside the keys; no model block
        ev.details.insert("program".into(), serde_json::json!("codex"));
        assert_eq!(
            what_to_do(&ev).unwrap(),
            format!("Stop it: Ctrl-C in the terminal of its `codex exec`, Esc in its TUI, or wd-store stop {id} (the thread stays resumable)")
        );
        assert!(!body(&ev).contains("block-model"));
        // opencode's, named or not, as before
        ev.details
            .insert("program".into(), serde_json::json!("opencode"));
        let todo = what_to_do(&ev).unwrap();
        assert!(todo.contains(&format!("wd-store stop {id}")), "{todo}");
        ev.details.remove("program");
        assert_eq!(what_to_do(&ev).unwrap(), todo);
    }
}
