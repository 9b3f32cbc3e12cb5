//! The notification click helper: a click on a desktop alert opens the page at the loop's
//! anchor. A notification server sends the click (`ActionInvoked`) to the bus connection that
//! showed the notification, and the tick exits right after sending; so for an alert with a link
//! the desktop channel shows it from a small child process, `wd-store notify-on-action`
//! (hidden), which prints the notification id for the channel's record and then stays to wait
//! for the click (at most an hour, or until the notification is closed), running
//! `[report] open_with` (default `xdg-open`) with the URL. Under systemd the child is started
//! through `systemd-run --user --scope`, so the tick's oneshot unit does not stop it on exit.

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::io::{BufRead, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// Label of the default action on notification servers that show one.
pub const LABEL: &str = "Open the watchdog page";

/// What the child shows (sent as one JSON line on its stdin).
#[derive(Debug, Serialize, Deserialize)]
pub struct Note {
    pub summary: String,
    pub body: String,
    /// `low`, `normal` or `critical`.
    pub urgency: String,
    pub url: String,
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
    Some(match rx.recv_timeout(timeout) {
        Ok(l) => match l.trim().strip_prefix("notification ") {
            Some(id) => id.parse().map_err(|_| l.trim().to_string()),
            None if l.trim().is_empty() => Err("the notifier ended without a word".into()),
            None => Err(l.trim().to_string()),
        },
        Err(_) => Err(format!("no answer within {:.1}s", timeout.as_secs_f64())),
    })
}

/// `wd-store notify-on-action`: reads a [`Note`], shows it (with the default action where the
/// server supports actions), prints `notification ID`, then waits up to `wait` for the click
/// and runs `open_with URL`.
pub fn notify_and_wait(
    input: &mut dyn BufRead,
    out: &mut dyn Write,
    open_with: &str,
    wait: Duration,
) -> Result<()> {
    use notify_rust::Notification;
    let mut line = String::new();
    input.read_line(&mut line)?;
    let note: Note = serde_json::from_str(&line).context("stdin")?;
    let actions = notify_rust::get_capabilities().is_ok_and(|c| c.iter().any(|x| x == "actions"));
    let mut n = Notification::new();
    n.appname("oc-watchdog")
        .summary(&note.summary)
        .body(&note.body)
        .urgency(super::urgency(&note.urgency));
    if actions {
        n.action("default", LABEL);
    }
    let h = match n.show() {
        Ok(h) => h,
        Err(e) => {
            writeln!(out, "desktop notification: {e}")?;
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
            let _ = tx.send(a == "default");
        });
    });
    if let Ok(true) = rx.recv_timeout(wait) {
        let mut words = open_with.split_whitespace();
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
    Ok(())
}
