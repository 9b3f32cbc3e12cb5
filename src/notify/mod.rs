//! Desktop notifications (notify-rust over the session's D-Bus): shown within a bound, and,
//! for a notification with a link, shown by the click helper ([`click`]) that stays to open it.
//! The desktop channel words the alert; this module only shows it.

pub mod click;
pub mod plain;

use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// How far past its bound a wait must have run to be taken for a stop of this process.
const OVERRUN: Duration = Duration::from_secs(1);
/// The further wait then given to a reply.
const REWAIT: Duration = Duration::from_secs(1);

/// What to show. `urgency` is `low`, `normal` or `critical`.
pub struct Notice<'a> {
    pub summary: &'a str,
    pub body: &'a str,
    pub urgency: &'a str,
    /// Opened by a click on the notification.
    pub url: Option<&'a str>,
    /// The id of the earlier popup of the same episode, which this one takes the place of
    /// (the spec's `replaces_id`): an episode has one popup on screen, never a pile.
    pub replaces: Option<u32>,
    /// A session the popup offers to stop (a "Stop the session" action running
    /// `wd-store stop SESSION`, where the server shows actions).
    pub stop: Option<&'a str>,
    /// How long the popup stays: the Notify call's `expire_timeout` in ms, 0 until dismissed.
    pub expire_ms: u32,
}

/// The Notify call's `expire_timeout` (0 never expires, as the spec has it).
fn timeout(ms: u32) -> notify_rust::Timeout {
    match ms {
        0 => notify_rust::Timeout::Never,
        ms => notify_rust::Timeout::Milliseconds(ms),
    }
}

fn urgency(u: &str) -> notify_rust::Urgency {
    match u {
        "critical" => notify_rust::Urgency::Critical,
        "low" => notify_rust::Urgency::Low,
        _ => notify_rust::Urgency::Normal,
    }
}

/// Does the notification server read bodies as markup (its `body-markup` capability)? Asked
/// within `wait`; `None` when the bus did not answer. A server that cannot say is taken to
/// (escaping is the safe side).
fn body_markup(wait: Duration) -> Option<bool> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(notify_rust::get_capabilities());
    });
    match recv_within(&rx, wait) {
        Ok(Ok(caps)) => Some(caps.iter().any(|c| c == "body-markup")),
        Ok(Err(_)) => Some(true),
        Err(_) => None,
    }
}

/// Does a notification server answer on the session bus? Asks `GetServerInformation` (cheap,
/// nothing shown) within `wait`: `None` when it answered or said no (a delivery then finds out
/// why), else why it is not worth a delivery's time (a server that owns the name but is
/// stopped or hung accepts every call and answers none).
pub fn unanswered(wait: Duration) -> Option<String> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(notify_rust::get_server_information().map(|_| ()));
    });
    match recv_within(&rx, wait) {
        Ok(_) => None,
        Err(_) => Some(format!(
            "the notification server did not answer GetServerInformation within {:.1}s",
            wait.as_secs_f64()
        )),
    }
}

/// The server did not say how it reads bodies in time, so no Notify was sent.
pub fn not_asked(wait: Duration) -> String {
    format!(
        "desktop notification: not shown: the server did not tell its capabilities within {:.1}s",
        wait.as_secs_f64()
    )
}

pub fn no_answer(wait: Duration) -> String {
    format!(
        "desktop notification: no answer within {:.1}s",
        wait.as_secs_f64()
    )
}

/// Shows `n` within `wait`: "notification ID", or what went wrong. Nothing raw reaches the
/// popup ([`plain`]).
pub fn show(n: &Notice, wait: Duration) -> Result<String, String> {
    let until = Instant::now() + wait;
    // the summary is plain text (the notification spec; dunst escapes it itself when it puts it
    // into its format's markup): escaped here too, a `<b>` read `&lt;b&gt;` and `&&` `&amp;&amp;`
    let summary = plain::visible(n.summary, plain::SUMMARY_CAP, false);
    let mut body = plain::visible_lines(n.body, plain::LINE_CAP);
    // unanswered, the question leaves nothing shown: the delivery is owed again (it was lost
    // as "no answer", taken for a popup that may have shown, in a burst of 20 loops at once)
    if body_markup(wait).ok_or_else(|| not_asked(wait))? {
        body = plain::escape_markup(&body);
    }
    let full = wait;
    // a stop of this process inside the question spent the bound, not the server: the call
    // gets its own REWAIT then
    let wait = match until.checked_add(OVERRUN) {
        Some(late) if Instant::now() > late => REWAIT,
        _ => until.saturating_duration_since(Instant::now()),
    };
    let n = &Notice {
        summary: &summary,
        body: &body,
        urgency: n.urgency,
        url: n.url,
        replaces: n.replaces,
        stop: n.stop,
        expire_ms: n.expire_ms,
    };
    // with a link: shown by a child that stays to open the page when the alert is clicked
    if let Some(url) = n.url {
        let note = click::Note {
            summary: n.summary.to_string(),
            body: n.body.to_string(),
            urgency: n.urgency.to_string(),
            url: url.to_string(),
            replaces: n.replaces,
            stop: n.stop.map(str::to_string),
            expire_ms: Some(n.expire_ms),
        };
        if let Some(r) = click::show(&note, wait) {
            return r
                .map(|id| format!("notification {id}"))
                .map_err(|e| format!("desktop notification: {e}"));
        }
    }
    let mut note = notify_rust::Notification::new();
    note.appname("oc-watchdog")
        .summary(n.summary)
        .body(n.body)
        .urgency(urgency(n.urgency))
        .timeout(timeout(n.expire_ms));
    if let Some(id) = n.replaces {
        note.id(id);
    }
    // a session bus that accepts but never answers must not hold the tick
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(note.show().map(|h| h.id()).map_err(|e| e.to_string()));
    });
    match recv_within(&rx, wait) {
        Ok(Ok(id)) => Ok(format!("notification {id}")),
        Ok(Err(e)) => Err(format!("desktop notification: {e}")),
        Err(_) => Err(no_answer(full)),
    }
}

/// A reply on `rx` within `wait`. The bound is kept by the monotonic clock, which runs on
/// while the process is stopped (SIGSTOP, a frozen cgroup, a paused VM) though the bus, the
/// notification server and the reply's thread went on or were stopped with it: a stop inside
/// the wait timed it out on waking, and a popup that came was recorded "no answer". A wait
/// that ran over its bound by more than [`OVERRUN`] gets [`REWAIT`] more before it counts as
/// unanswered; a server that never answers still costs `wait` alone.
pub(crate) fn recv_within<T>(rx: &Receiver<T>, wait: Duration) -> Result<T, RecvTimeoutError> {
    let t0 = Instant::now();
    match rx.recv_timeout(wait) {
        Err(RecvTimeoutError::Timeout) if t0.elapsed() > wait + OVERRUN => rx.recv_timeout(REWAIT),
        r => r,
    }
}
