//! The notification click helper: a click on a desktop alert opens the page at the loop's
//! anchor. A notification server sends the click (`ActionInvoked`) to the bus connection that
//! showed the notification, and the tick exits right after sending; so for an alert with a link
//! the desktop channel shows it from a small child process, `wd-store notify-on-action`
//! (hidden), which prints the notification id for the channel's record and then stays to wait
//! for the click (at most an hour, or until the notification is closed), running
//! `[report] open_with` (default `xdg-open`) with the URL. Where the server shows actions it
//! offers two: open the page (the default, a click) and, for a loop that goes on, stop the
//! session (`wd-store stop SESSION`, recorded like the operator's own command). One helper at
//! a time per watchdog database: a new one takes over from the one before (whose popup it
//! replaces, or which is older news), so a bus that never answers cannot pile them up. Under systemd the child is started
//! through `systemd-run --user --scope`, so the tick's oneshot unit does not stop it on exit.

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{mpsc, OnceLock};
use std::time::{Duration, Instant};

/// Label of the default action on notification servers that show one.
pub const LABEL: &str = "Open the watchdog page";
/// Label of the action that stops the session.
pub const STOP_LABEL: &str = "Stop the session";

/// The `--db` and `--config` of the alerter that starts the helper, so a stop from the popup
/// acts on the same record (set once by `wd-alert`).
pub static HELPER_ARGS: OnceLock<Vec<std::ffi::OsString>> = OnceLock::new();

/// What the child shows (sent as one JSON line on its stdin).
#[derive(Debug, Serialize, Deserialize)]
pub struct Note {
    pub summary: String,
    pub body: String,
    /// `low`, `normal` or `critical`.
    pub urgency: String,
    pub url: String,
    /// The earlier popup of the episode this one replaces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replaces: Option<u32>,
    /// The session the "stop" action stops.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<String>,
    /// The Notify call's `expire_timeout` in ms (0 until dismissed); none, the server's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expire_ms: Option<u32>,
}

/// Shows `note` from a child that waits for the click. `None` when no child can be started
/// (the caller shows it itself, without the action); else the notification id, or why not.
pub fn show(note: &Note, timeout: Duration) -> Option<std::result::Result<u32, String>> {
    let bin = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(|d| d.join("wd-store")))
        .filter(|p| p.exists())?;
    let scoped = std::env::var_os("INVOCATION_ID").is_some()
        && Command::new("systemd-run")
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
    let mut c = if scoped {
        let mut c = Command::new("systemd-run");
        c.args(["--user", "--scope", "--quiet", "--collect", "--"])
            .arg(&bin);
        c
    } else {
        Command::new(&bin)
    };
    let mut child = c
        .args(HELPER_ARGS.get().into_iter().flatten())
        .arg("notify-on-action")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let line = serde_json::to_string(note).ok()?;
    let mut sin = child.stdin.take()?;
    let out = child.stdout.take()?;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = writeln!(sin, "{line}");
        drop(sin);
        let mut first = String::new();
        let _ = std::io::BufReader::new(out).read_line(&mut first);
        let _ = tx.send(first);
        // reap it whenever it ends, if we are still here
        let _ = child.wait();
    });
    Some(match super::recv_within(&rx, timeout) {
        Ok(l) => answer(&l),
        Err(_) => Err(format!("no answer within {:.1}s", timeout.as_secs_f64())),
    })
}

/// The helper's first line: `notification ID`, or its error. The caller names the channel
/// ("desktop notification: ..."), so the helper's own prefix is taken off the error.
fn answer(line: &str) -> Result<u32, String> {
    let l = line.trim();
    match l.strip_prefix("notification ") {
        Some(id) => id.parse().map_err(|_| l.to_string()),
        None if l.is_empty() => Err("the notifier ended without a word".into()),
        None => Err(l.strip_prefix(ERROR_PREFIX).unwrap_or(l).to_string()),
    }
}

/// How the helper starts the line that says it could not show the notification.
const ERROR_PREFIX: &str = "desktop notification: ";

/// The helper's lock beside the database it serves: `watchdog.db.click`, holding the pid of
/// the helper that waits.
pub fn lock_path(db: &Path) -> PathBuf {
    let mut p = db.as_os_str().to_owned();
    p.push(".click");
    PathBuf::from(p)
}

/// Is `pid` a click helper (so a pid file left by a crash never ends another process)?
fn is_helper(pid: u32) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .is_ok_and(|c| c.split(|b| *b == 0).any(|w| w == b"notify-on-action"))
}

/// Takes over the helper's pid file at `path`: ends the helper it names (after checking the
/// pid is a helper's) and writes this one's pid. `false` when that helper would not end within
/// two seconds: this one then shows its popup without waiting for clicks. (A pid file, not a
/// file lock: the crate's minimum Rust has none; the desktop deliveries of one alerter are one
/// after another, and alerters claim each delivery first.)
pub fn take_over(path: &Path) -> Result<bool> {
    let held = std::fs::read_to_string(path).unwrap_or_default();
    if let Ok(pid) = held.trim().parse::<u32>() {
        if pid != std::process::id() && is_helper(pid) {
            let _ = Command::new("kill")
                .arg(pid.to_string())
                .stderr(Stdio::null())
                .status();
            let until = Instant::now() + Duration::from_secs(2);
            while is_helper(pid) {
                if Instant::now() > until {
                    return Ok(false);
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
    std::fs::write(path, std::process::id().to_string())
        .with_context(|| path.display().to_string())?;
    Ok(true)
}

/// Gives up the helper's pid file at `path` if it still names this process (a helper that
/// took over since owns it now).
fn release(path: &Path) -> std::io::Result<()> {
    let held = std::fs::read_to_string(path)?;
    if held.trim() == std::process::id().to_string() {
        std::fs::remove_file(path)?;
    }
    Ok(())
}

/// What the helper does when an action is chosen.
pub struct OnAction<'a> {
    /// `[report] open_with`, run with the URL.
    pub open_with: &'a str,
    /// Stops a session (`wd-store stop`).
    pub stop: &'a mut dyn FnMut(&str) -> Result<()>,
}

/// `wd-store notify-on-action`: reads a [`Note`], takes over the lock at `lock`, shows the note
/// (with its actions where the server supports actions), prints `notification ID`, then waits
/// up to `wait` for an action: the default opens the URL with `open_with`, `stop` stops the
/// note's session.
pub fn notify_and_wait(
    input: &mut dyn BufRead,
    out: &mut dyn Write,
    lock: &Path,
    on: OnAction,
    wait: Duration,
) -> Result<()> {
    use notify_rust::Notification;
    let mut line = String::new();
    input.read_line(&mut line)?;
    let note: Note = serde_json::from_str(&line).context("stdin")?;
    let held = take_over(lock)?;
    let actions =
        held && notify_rust::get_capabilities().is_ok_and(|c| c.iter().any(|x| x == "actions"));
    let mut n = Notification::new();
    n.appname("oc-watchdog")
        .summary(&note.summary)
        .body(&note.body)
        .urgency(super::urgency(&note.urgency));
    if let Some(ms) = note.expire_ms {
        n.timeout(super::timeout(ms));
    }
    if let Some(id) = note.replaces {
        n.id(id);
    }
    if actions {
        n.action("default", LABEL);
        if note.stop.is_some() {
            n.action("stop", STOP_LABEL);
        }
    }
    let h = match n.show() {
        Ok(h) => h,
        Err(e) => {
            writeln!(out, "{ERROR_PREFIX}{e}")?;
            out.flush()?;
            return Ok(());
        }
    };
    writeln!(out, "notification {}", h.id())?;
    out.flush()?;
    if !actions {
        return Ok(());
    }
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        h.wait_for_action(|a| {
            let _ = tx.send(a.to_string());
        });
    });
    match rx.recv_timeout(wait).as_deref() {
        Ok("default") => {
            let mut words = on.open_with.split_whitespace();
            let Some(prog) = words.next() else {
                bail!("[report] open_with is empty");
            };
            Command::new(prog)
                .args(words)
                .arg(&note.url)
                .stdin(Stdio::null())
                .status()
                .with_context(|| format!("{prog} {}", note.url))?;
        }
        Ok("stop") => {
            if let Some(s) = &note.stop {
                // the stop waits seconds for the plugin's word, and the session it stops makes
                // news meanwhile (the loop's resolve), whose helper takes over from the one
                // named in the lock: let go of it first, or that helper ends this one mid-stop
                // and the stop is left "requested" for ever
                let _ = release(lock);
                (on.stop)(s)?;
            }
        }
        _ => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::answer;

    #[test]
    fn the_helpers_error_is_said_once_under_the_channels_name() {
        // what the helper wrote when no notification server was on the bus
        let line = "desktop notification: org.freedesktop.DBus.Error.ServiceUnknown: The name org.freedesktop.Notifications was not provided by any .service files\n";
        assert_eq!(
            answer(line),
            Err("org.freedesktop.DBus.Error.ServiceUnknown: The name org.freedesktop.Notifications was not provided by any .service files".to_string())
        );
        assert_eq!(answer("notification 7\n"), Ok(7));
        assert_eq!(
            answer(""),
            Err("the notifier ended without a word".to_string())
        );
    }
}
