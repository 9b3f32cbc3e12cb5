//! Stopping a Claude Code session's turn (`wd-store stop`, the `[stop]` policy), through the
//! PreToolUse hook ([`crate::claude_hook`]) that `deploy/install --with-stop-plugin` puts in
//! Claude Code's user settings.
//!
//! The same contract as opencode's ([`super::stop`]): once per action id, recorded in `stops`
//! (via `hook`) before anything is sent, one stop of a session at a time, bounded by the
//! request's wait, and claimed only when the transcript shows the turn over (the hook's refusal,
//! then no call started, no model request in flight, a moment later). The request is written
//! for the main session (a subagent's calls carry its parent's `session_id`), so stopping a
//! subagent stops its whole session's turn (Claude Code 2.1.332 runs subagents in the
//! background: the refused subagent ends, and its session, told so, answers without a call): the
//! loop episode is of the tree, and the stop is recorded as the main session's, which is the one
//! resumed. The request is removed once the stop is decided, so the session's
//! next turn (the user's resume) runs.
//!
//! What the agent's user sees (Claude Code 2.1.332): a `claude -p` ends its turn and exits 0,
//! printing an empty line in its text mode (stream-json prints the hook's `systemMessage` and a
//! result with `terminal_reason: "hook_stopped"`); the interactive session shows the refusal
//! and the hook's message, and waits at its prompt.

use super::{
    action_id, already, claim, open_episode, previous, record, toast_words, wait_for, wait_other,
    write_atomic, Previous, Request, StopOutcome, ACK_MAX_BYTES, SETTLE, STALE_MS,
};
use crate::record::Call;
use crate::sources::claude_code::home::ClaudeHome;
use crate::sources::Records;
use crate::store::Store;
use anyhow::{anyhow, bail, Result};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How to stop a Claude Code session by hand.
pub const BY_HAND: &str =
    "Ctrl-C in the terminal of its `claude -p`, Esc in its interactive session";

/// Whether `id` may name a Claude Code session: a UUID (a main session), or `agent-<id>` (a
/// subagent, as the reader names them).
pub fn is_claude_id(id: &str) -> bool {
    crate::claude_hook::is_uuid(id)
        || id.strip_prefix("agent-").is_some_and(|a| {
            !a.is_empty() && a.len() <= 64 && a.bytes().all(|b| b.is_ascii_alphanumeric())
        })
}

pub use crate::claude_hook::resume_commands;

/// What the user of Claude Code 2.1.332 sees of a stop through the hook (tried for real).
const USER_SEES: &str = "a `claude -p` ends with exit 0 and prints an empty line (with \
    --output-format stream-json, the hook's message and terminal_reason \"hook_stopped\"); the \
    interactive session shows the hook's message and waits at its prompt";

/// How to resume, in words.
pub fn resume_hint(session: &str) -> String {
    let [tui, p] = resume_commands(session);
    format!("`{tui}` (interactive) or `{p}`, in its project")
}

/// What was found about a Claude Code session before deciding.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HookFacts {
    /// Its transcript is in Claude Code's directory.
    pub found: bool,
    /// Its process runs a turn (`sessions/<pid>.json`, alive, not waiting for its user).
    pub running: bool,
    /// The hook is in Claude Code's user settings.
    pub hook_installed: bool,
    pub previous: Option<Previous>,
}

/// What to do about it.
#[derive(Debug, Clone, PartialEq)]
pub enum HookPlan {
    Already(Previous),
    Refuse(String),
    Hook,
}

/// The rule: once per action id; then only a running turn, through the installed hook.
pub fn decide(session: &str, f: &HookFacts) -> HookPlan {
    if let Some(p) = &f.previous {
        if p.status != "failed" {
            return HookPlan::Already(p.clone());
        }
    }
    if !f.found {
        return HookPlan::Refuse(format!(
            "no session {session} among opencode's or Claude Code's ({}): check the id (`oc-sessions --since 1h` lists them)",
            crate::paths::claude_code_dir().join("projects").display()
        ));
    }
    if !f.running {
        return HookPlan::Refuse(format!(
            "Claude Code session {session} is idle already: no process runs a turn of it, nothing to stop"
        ));
    }
    if !f.hook_installed {
        return HookPlan::Refuse(format!(
            "Claude Code session {session} can be stopped only through the watchdog's hook, which is not in {}: {BY_HAND}, or install the hook (deploy/install --with-stop-plugin) for the next ones",
            crate::claude_hook::settings::settings_file().display()
        ));
    }
    HookPlan::Hook
}

/// The session's tree as read now: the main session's id, its directory, its status, and every
/// call of it and its subagents.
struct Tree {
    main: String,
    directory: String,
    running: bool,
    calls: Vec<Call>,
    in_flight: bool,
}

fn tree(dir: &Path, session: &str) -> Result<Option<Tree>> {
    let home = ClaudeHome::new(dir);
    let Some(mut t) = home.read(session).map_err(|e| anyhow!(e))? else {
        return Ok(None);
    };
    // a subagent's parent is its session (or the subagent that started it)
    for _ in 0..8 {
        let Some(p) = t.session.parent.clone() else {
            break;
        };
        match home.read(&p).map_err(|e| anyhow!(e))? {
            Some(up) => t = up,
            None => break,
        }
    }
    let main = t.session.id.clone();
    let listed = home.list(i64::MAX, std::slice::from_ref(&main));
    let mut calls = Vec::new();
    let mut in_flight = false;
    for s in listed.sessions.iter() {
        if let Some(x) = home.read(&s.id).map_err(|e| anyhow!(e))? {
            in_flight |= x.activity.in_flight || !x.activity.running.is_empty();
            calls.extend(x.calls);
        }
    }
    Ok(Some(Tree {
        directory: t.session.directory.clone().unwrap_or_default(),
        running: t.session.status.as_deref() == Some("busy"),
        main,
        calls,
        in_flight,
    }))
}

/// Calls started at or after `from`, but the one refused.
fn calls_since(calls: &[Call], from: i64, refused: Option<&str>) -> i64 {
    calls
        .iter()
        .filter(|c| c.t >= from && Some(c.id.as_str()) != refused)
        .count() as i64
}

/// The id of the main transcript's last prompt: the current turn.
fn current_turn(dir: &Path, main: &str) -> Option<String> {
    let file = std::fs::read_dir(dir.join("projects"))
        .ok()?
        .flatten()
        .map(|d| d.path().join(format!("{main}.jsonl")))
        .find(|f| f.is_file())?;
    let text = std::fs::read_to_string(file).ok()?;
    text.lines().rev().find_map(|l| {
        let r: Value = serde_json::from_str(l).ok()?;
        (r["type"] == "user" && r["message"]["content"].is_string())
            .then(|| r["uuid"].as_str().map(String::from))?
    })
}

/// How the process `pid` runs Claude Code, from its `sessions/<pid>.json`: `-p` (`sdk-cli`) or
/// interactive (`cli`).
fn entrypoint(dir: &Path, pid: u32) -> Option<String> {
    let f = dir.join("sessions").join(format!("{pid}.json"));
    let text = crate::paths::read_own_small(&f, 64 << 10).ok()??;
    let v: Value = serde_json::from_str(&text).ok()?;
    v["entrypoint"].as_str().map(String::from)
}

/// What the agent's user sees once the hook stopped the turn.
fn user_sees(entrypoint: Option<&str>) -> &'static str {
    match entrypoint {
        Some("sdk-cli") => {
            "its `claude -p` ends, exit 0, printing an empty line in text mode (stream-json shows the hook's message)"
        }
        Some("cli") => {
            "its interactive session shows the refused call and the hook's message, and waits at its prompt"
        }
        _ => "its turn ends with the hook's message",
    }
}

/// [`super::stop`] for a Claude Code session.
pub fn stop(store: &mut Store, req: &Request) -> Result<StopOutcome> {
    let asked = crate::cli::now_ms();
    let session = req.session;
    let dir = crate::paths::claude_code_dir();
    let found = tree(&dir, session)?;
    let main = found
        .as_ref()
        .map_or(session.to_string(), |t| t.main.clone());
    let project = found
        .as_ref()
        .map(|t| t.directory.clone())
        .unwrap_or_default();
    let turn = current_turn(&dir, &main).unwrap_or_else(|| "none".into());
    let episode = match req.episode {
        Some(e) => e.to_string(),
        None => match open_episode(store, session)? {
            Some(id) => format!("episode:{id}"),
            None => format!("turn:{turn}"),
        },
    };
    // recorded as a stop of the main session: a subagent's is its session's turn ended, and
    // the resume words, the episode's resolve and `wd-store alerts` name the session to resume
    let action = action_id(&main, &episode);
    let stale = crate::cli::now_ms() - STALE_MS;
    let mut facts = HookFacts {
        found: found.is_some(),
        running: found.as_ref().is_some_and(|t| t.running),
        hook_installed: crate::claude_hook::settings::installed(),
        previous: previous(store, &action, &main, &turn)?
            .filter(|p| p.status != "requested" || p.t > stale),
    };
    if facts.found && !facts.running {
        // the sessions file says busy for a `-p` run's whole life: a second look only guards
        // against a read between the file's rewrites
        facts.running = wait_for(Duration::from_millis(500), || {
            tree(&dir, session).ok()??.running.then_some(())
        })
        .is_some();
    }
    let mut o = StopOutcome {
        via: Some("hook".into()),
        user_sees: Some(USER_SEES.into()),
        ..StopOutcome::requested(&main, action, episode, asked, resume_hint(&main))
    };
    match decide(session, &facts) {
        HookPlan::Already(p) if p.status == "requested" => {
            return wait_other(store, o, &p, req.wait, BY_HAND)
        }
        HookPlan::Already(p) => return Ok(already(o, &p)),
        HookPlan::Refuse(why) => bail!("stop: {why}"),
        HookPlan::Hook => {}
    }
    if let Some(p) = claim(store, &o, &turn, req.reason)? {
        return wait_other(store, o, &p, req.wait, BY_HAND);
    }
    let carried = through_hook(&super::requests_dir(), &dir, &main, &o, req);
    let calls = tree(&dir, session)
        .ok()
        .flatten()
        .map(|t| t.calls)
        .unwrap_or_default();
    match carried {
        Ok(ack) => {
            o.status = "stopped".into();
            o.stopped = Some(crate::cli::now_ms());
            o.pid = Some(ack.pid);
            o.refused_call = ack.call.clone();
            o.calls_after_request = Some(calls_since(&calls, asked, ack.call.as_deref()));
            o.message = format!(
                "stopped Claude Code session {main}{} through the hook in process {}{}, {} call(s) after the request; {}; resume with {} ({})",
                if main == session {
                    String::new()
                } else {
                    format!(" (for its subagent {session})")
                },
                ack.pid,
                ack.call
                    .as_deref()
                    .map(|c| format!(" (it refused call {c})"))
                    .unwrap_or_default(),
                o.calls_after_request.unwrap_or(0),
                user_sees(ack.entry.as_deref()),
                o.resume,
                crate::cli::shell_word(&project)
            );
            record(store, &o, &turn, req.reason, None)?;
            Ok(o)
        }
        Err(e) => {
            o.status = "failed".into();
            o.calls_after_request = Some(calls_since(&calls, asked, None));
            let detail = format!("{e:#}");
            record(store, &o, &turn, req.reason, Some(&detail))?;
            bail!("stop: session {session}: {detail}; {BY_HAND} (the request is recorded as failed, a new `wd-store stop` may try again)")
        }
    }
}

/// What the hook acknowledged.
struct Ack {
    pid: u32,
    call: Option<String>,
    /// How its process runs Claude Code, read while it ran.
    entry: Option<String>,
}

/// The hook's way: the request for the main session, the hook's acknowledgement, then the
/// transcript showing the turn over. The request and acknowledgement are removed either way.
fn through_hook(
    stop_dir: &Path,
    claude_dir: &Path,
    main: &str,
    o: &StopOutcome,
    req: &Request,
) -> Result<Ack> {
    let file: PathBuf = stop_dir.join(format!("{main}.json"));
    let ack_file = stop_dir.join(format!("{main}.ack.json"));
    let _ = std::fs::remove_file(&ack_file);
    let expires = crate::cli::now_ms() + req.wait.as_millis() as i64;
    let id = format!("{}@{}", o.action_id, o.requested);
    write_atomic(
        &file,
        &json!({"id": id, "session": main, "episode": o.episode, "expires": expires,
                "why": toast_words(req.reason)}),
    )?;
    let t0 = Instant::now();
    let got = wait_for(req.wait, || {
        let text = crate::paths::read_own_small(&ack_file, ACK_MAX_BYTES).ok()??;
        let v: Value = serde_json::from_str(&text).ok()?;
        (v["id"] == id.as_str()).then_some(v)
    });
    let done = match got {
        None => Err(anyhow!(
            "no acknowledgement from the Claude Code hook within {}s: the session made no tool call meanwhile (one long tool call or model reply), or its process started before the hook was installed",
            req.wait.as_secs()
        )),
        Some(ack) => {
            let pid = ack["pid"].as_u64().unwrap_or(0) as u32;
            let a = Ack {
                pid,
                call: ack["refused_call"].as_str().map(String::from),
                entry: ack["entrypoint"]
                    .as_str()
                    .map(String::from)
                    .or_else(|| entrypoint(claude_dir, pid)),
            };
            ended(claude_dir, main, req.wait.saturating_sub(t0.elapsed())).map(|_| a)
        }
    };
    let _ = std::fs::remove_file(&file);
    let _ = std::fs::remove_file(&ack_file);
    done
}

/// Waits (at least 2 s) until the session's transcript shows its turn over, and still over,
/// with no call started, a moment later.
fn ended(dir: &Path, main: &str, wait: Duration) -> Result<()> {
    let over = |since: i64| {
        let t = tree(dir, main).ok()??;
        (!t.in_flight && calls_since(&t.calls, since, None) == 0).then_some(())
    };
    let settled = wait_for(wait.max(Duration::from_secs(2)), || {
        let seen = crate::cli::now_ms();
        over(seen)?;
        std::thread::sleep(SETTLE);
        over(seen)
    });
    settled.ok_or_else(|| {
        anyhow!("the hook refused a call, but the transcript shows the turn going on")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn running() -> HookFacts {
        HookFacts {
            found: true,
            running: true,
            hook_installed: true,
            previous: None,
        }
    }

    #[test]
    fn a_running_turn_with_the_hook_installed_goes_through_the_hook_else_a_refusal_says_what_to_do()
    {
        let s = "0b7c6f1e-1111-4000-8000-00000000abcd";
        assert_eq!(decide(s, &running()), HookPlan::Hook);
        let refusal = |f: HookFacts| match decide(s, &f) {
            HookPlan::Refuse(why) => why,
            other => panic!("{other:?}"),
        };
        let why = refusal(HookFacts {
            hook_installed: false,
            ..running()
        });
        assert!(why.contains("which is not in"), "{why}");
        assert!(why.contains("Ctrl-C in the terminal of its `claude -p`, Esc in its interactive session, or install the hook (deploy/install --with-stop-plugin)"), "{why}");
        assert_eq!(
            refusal(HookFacts {
                running: false,
                ..running()
            }),
            format!("Claude Code session {s} is idle already: no process runs a turn of it, nothing to stop")
        );
        assert!(refusal(HookFacts::default()).starts_with(&format!("no session {s} among")));
        let prev = Previous {
            status: "stopped".into(),
            t: 1,
            via: Some("hook".into()),
            stopped: Some(2),
            action_id: format!("stop:{s}:turn:u"),
        };
        assert_eq!(
            decide(
                s,
                &HookFacts {
                    previous: Some(prev.clone()),
                    ..HookFacts::default()
                }
            ),
            HookPlan::Already(prev)
        );
    }

    #[test]
    fn claude_ids_are_uuids_or_subagents() {
        assert!(is_claude_id("0b7c6f1e-1111-4000-8000-00000000abcd"));
        assert!(is_claude_id("agent-abf94f9c9dcc61e16"));
        assert!(!is_claude_id("agent-../x"));
        assert!(!is_claude_id("ses_abc"));
    }
}
