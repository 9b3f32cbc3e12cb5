//! The PreToolUse hook Claude Code runs before every tool call (`wd-claude-hook`, installed by
//! `deploy/install --with-stop-plugin` into `~/.claude/settings.json`, [`settings`]): the
//! Claude Code side of a stop ([`crate::stop::claude_code`]), as `deploy/oc-watchdog-stop.js` is
//! opencode's. Its own module, below the stop, the popup and the page, which all ask whether
//! it is installed.
//!
//! In: the hook input on stdin (`session_id`, `tool_name`, `tool_use_id`; a subagent's call
//! carries its parent's `session_id` and its own `agent_id`). When a stop request for that
//! session lies in the stop directory (`$XDG_STATE_HOME/oc-watchdog/stop/<session>.json`, the
//! same private directory and request shape as the opencode plugin's: `{id, session, expires,
//! why}`), out: deny together with `continue: false`, which Claude Code 2.1.332 was seen to
//! answer by refusing the call and ending the turn at once (deny alone lets the model go on;
//! `continue: false` alone lets the call run first), and an acknowledgement
//! `<session>.ack.json` naming the call refused. A request stops every call of the session,
//! its subagents' included, until it expires or `wd-store stop` removes it: calls made in
//! parallel are refused alike.
//!
//! It fails open: no request, an unreadable one (not a regular file of this user's in a private
//! directory, too large, not JSON, expired, for another session), bad input: exit 0 and no
//! output, and the call runs. It starts no interpreter and opens neither the config nor the
//! store, so a call pays for a process start and two `stat`s: a binary of its own (1.4 MB
//! stripped) took 1.3 ms of CPU a call with the shell Claude Code runs it through, against 2.1 ms
//! for the same as a subcommand of the 16 MB wd-store, and 1.1 ms for a program that only reads
//! its stdin (`perf stat -r 300`, debug build stripped).

use serde_json::{json, Value};
use std::io::{Read, Write};
use std::path::Path;

pub mod settings;

/// The subcommand of `wd-store` that installs and uninstalls the hook (and, given nothing, runs
/// it as the hook binary does).
pub const SUBCOMMAND: &str = "claude-hook";

/// The hook's own binary, installed beside `wd-store`.
pub const BINARY: &str = "wd-claude-hook";

/// The largest hook input read (Claude Code sends the tool's input, which may be a whole file
/// being written: the rest is not needed, and a cut input fails open).
const INPUT_MAX: u64 = 4 << 20;

/// The largest request read (`wd-store stop` writes a few hundred bytes).
const REQUEST_MAX: u64 = 64 << 10;

/// What Claude Code's user reads, and the model too: who stopped it, and how to go on (an
/// interactive session waits at its prompt: a message goes on; a `claude -p` has ended).
pub fn stop_words(why: &str, session: &str, entrypoint: Option<&str>) -> String {
    let go_on = match entrypoint {
        Some("cli") => "Send a message to go on".to_string(),
        _ => format!(
            "Resume it when ready: `{}` in its project",
            resume_commands(session)[0]
        ),
    };
    format!("{why}: it repeated tool calls without progress. {go_on}")
}

/// The commands that resume a stopped Claude Code session, run in its project: its interactive
/// session, or one more `-p` turn.
pub fn resume_commands(session: &str) -> [String; 2] {
    let s = crate::cli::shell_word(session);
    [
        format!("claude --resume {s}"),
        format!("claude -p --resume {s} \"continue\""),
    ]
}

/// Runs the hook: whatever happens, exit 0; the answer, if any, on stdout.
pub fn main() -> i32 {
    let mut input = Vec::new();
    if std::io::stdin()
        .take(INPUT_MAX)
        .read_to_end(&mut input)
        .is_err()
    {
        return 0;
    }
    // the stop module's `requests_dir`, which this module sits below
    let dir = crate::paths::state_dir().join("stop");
    if let Some(answer) = answer(&input, &dir, crate::cli::now_ms(), parent_pid()) {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{answer}").and_then(|_| out.flush());
    }
    0
}

fn parent_pid() -> u32 {
    std::os::unix::process::parent_id()
}

/// Whether `id` has the form of a Claude Code session id (a UUID: hex digits and dashes): the
/// only names the hook turns into a file name.
pub fn is_uuid(id: &str) -> bool {
    id.len() == 36
        && id.bytes().enumerate().all(|(i, b)| match i {
            8 | 13 | 18 | 23 => b == b'-',
            _ => b.is_ascii_hexdigit(),
        })
}

/// The hook's answer to one input, with the request directory `dir` and the time `now`; `None`:
/// let the call run. Writes the acknowledgement when it refuses. `pid`: Claude Code's process.
pub fn answer(input: &[u8], dir: &Path, now: i64, pid: u32) -> Option<Value> {
    let inp: Value = serde_json::from_slice(input).ok()?;
    if inp.get("hook_event_name").and_then(Value::as_str) != Some("PreToolUse") {
        return None;
    }
    let session = inp.get("session_id")?.as_str()?;
    if !is_uuid(session) || !private(dir) {
        return None;
    }
    let file = dir.join(format!("{session}.json"));
    // cheap miss first: the common case is no request at all
    std::fs::symlink_metadata(&file).ok()?;
    let text = crate::paths::read_own_small(&file, REQUEST_MAX).ok()??;
    let req: Value = serde_json::from_str(&text).ok()?;
    if req["session"] != session || req["expires"].as_i64().map_or(true, |e| e <= now) {
        return None;
    }
    let id = req["id"].as_str()?;
    let why = req["why"]
        .as_str()
        .unwrap_or("The watchdog stopped this session");
    let call = inp.get("tool_use_id").and_then(Value::as_str);
    let (pid, entrypoint) = claude_process(pid);
    let words = stop_words(why, session, entrypoint.as_deref());
    let ack = json!({
        "id": id,
        "session": session,
        "pid": pid,
        "entrypoint": entrypoint,
        "refused_call": call,
        "tool": inp.get("tool_name"),
        "agent_id": inp.get("agent_id"),
        "t": now,
    });
    // the answer stands without its acknowledgement (wd-store then says it saw none)
    let _ = write_ack(dir, session, &ack);
    Some(json!({
        "continue": false,
        "stopReason": words,
        "systemMessage": format!("oc-watchdog: {words}"),
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": words,
        },
    }))
}

/// Claude Code's own process among the hook's ancestors (it runs the hook through a shell), by
/// its `sessions/<pid>.json`, with how it runs (`entrypoint`: `sdk-cli` for `-p`, `cli`
/// interactive); else the hook's parent as it is.
fn claude_process(parent: u32) -> (u32, Option<String>) {
    let sessions = crate::paths::claude_code_dir().join("sessions");
    let mut pid = parent;
    for _ in 0..4 {
        let file = sessions.join(format!("{pid}.json"));
        if let Ok(Some(text)) = crate::paths::read_own_small(&file, REQUEST_MAX) {
            let v: Value = serde_json::from_str(&text).unwrap_or_default();
            return (pid, v["entrypoint"].as_str().map(String::from));
        }
        // field 4 of /proc/<pid>/stat, after the command name in parentheses
        let Some(up) = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|st| {
                let rest = st.get(st.rfind(')')? + 1..)?.to_string();
                rest.split_whitespace().nth(1)?.parse::<u32>().ok()
            })
        else {
            break;
        };
        if up <= 1 {
            break;
        }
        pid = up;
    }
    (parent, None)
}

/// The directory is this user's, a directory (not a link), and no one else may write in it.
fn private(dir: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::symlink_metadata(dir) else {
        return false;
    };
    let me = std::fs::metadata("/proc/self").map(|m| m.uid()).ok();
    meta.is_dir() && me == Some(meta.uid()) && meta.mode() & 0o022 == 0
}

/// The acknowledgement, whole or not at all; an earlier one of the same request is kept (it
/// names the first call refused).
fn write_ack(dir: &Path, session: &str, ack: &Value) -> std::io::Result<()> {
    let file = dir.join(format!("{session}.ack.json"));
    if let Ok(Some(old)) = crate::paths::read_own_small(&file, REQUEST_MAX) {
        if serde_json::from_str::<Value>(&old).is_ok_and(|o| o["id"] == ack["id"]) {
            return Ok(());
        }
    }
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    writeln!(tmp, "{ack}")?;
    tmp.persist(&file).map_err(|e| e.error)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: &str = "0b7c6f1e-1111-4000-8000-00000000abcd";

    fn dir() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        d
    }

    fn input(session: &str) -> Vec<u8> {
        json!({"session_id": session, "hook_event_name": "PreToolUse", "tool_name": "Bash",
               "tool_use_id": "toolu_1", "tool_input": {"command": "ls"}})
        .to_string()
        .into_bytes()
    }

    fn request(d: &Path, session: &str, expires: i64) {
        std::fs::write(
            d.join(format!("{session}.json")),
            json!({"id": "stop:x@1", "session": session, "expires": expires,
                   "why": "The operator stopped this session (wd-store stop)"})
            .to_string(),
        )
        .unwrap();
    }

    #[test]
    fn a_request_for_the_session_refuses_the_call_ends_the_turn_and_is_acknowledged() {
        let d = dir();
        request(d.path(), S, 2_000);
        let a = answer(&input(S), d.path(), 1_000, 42).unwrap();
        assert_eq!(a["continue"], false);
        assert_eq!(a["hookSpecificOutput"]["permissionDecision"], "deny");
        assert_eq!(
            a["stopReason"],
            format!("The operator stopped this session (wd-store stop): it repeated tool calls without progress. Resume it when ready: `claude --resume {S}` in its project")
        );
        let ack: Value = serde_json::from_str(
            &std::fs::read_to_string(d.path().join(format!("{S}.ack.json"))).unwrap(),
        )
        .unwrap();
        assert_eq!(ack["id"], "stop:x@1");
        assert_eq!(ack["refused_call"], "toolu_1");
        assert_eq!(ack["pid"], 42);
        // a second call of the same request is refused too; the first one stays acknowledged
        let mut second: Value = serde_json::from_slice(&input(S)).unwrap();
        second["tool_use_id"] = json!("toolu_2");
        assert!(answer(second.to_string().as_bytes(), d.path(), 1_001, 42).is_some());
        let ack: Value = serde_json::from_str(
            &std::fs::read_to_string(d.path().join(format!("{S}.ack.json"))).unwrap(),
        )
        .unwrap();
        assert_eq!(ack["refused_call"], "toolu_1");
    }

    #[test]
    fn it_fails_open() {
        let d = dir();
        // no request; garbage; another event; no such directory
        assert_eq!(answer(&input(S), d.path(), 1_000, 1), None);
        assert_eq!(answer(b"\x00garbage{", d.path(), 1_000, 1), None);
        assert_eq!(answer(&input(S), &d.path().join("none"), 1_000, 1), None);
        request(d.path(), S, 2_000);
        let post = String::from_utf8(input(S))
            .unwrap()
            .replace("PreToolUse", "PostToolUse");
        assert_eq!(answer(post.as_bytes(), d.path(), 1_000, 1), None);
        // expired
        assert_eq!(answer(&input(S), d.path(), 2_000, 1), None);
        // a session id that is no UUID never becomes a file name
        let odd = "../../etc/passwd";
        assert_eq!(answer(&input(odd), d.path(), 1_000, 1), None);
        // a request naming another session, under this one's name
        let other = "0b7c6f1e-2222-4000-8000-00000000abcd";
        std::fs::rename(
            d.path().join(format!("{S}.json")),
            d.path().join(format!("{other}.json")),
        )
        .unwrap();
        assert_eq!(answer(&input(other), d.path(), 1_000, 1), None);
        // a directory others may write in
        request(d.path(), S, 2_000);
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        assert_eq!(answer(&input(S), d.path(), 1_000, 1), None);
        assert!(!d.path().join(format!("{S}.ack.json")).exists());
    }

    /// An interactive session waits at its prompt after the stop (seen under tmux with Claude Code
    /// 2.1.332): a message goes on there, no resume command is needed.
    #[test]
    fn the_words_say_how_to_go_on_where_the_session_runs() {
        assert_eq!(
            stop_words("W", S, Some("cli")),
            "W: it repeated tool calls without progress. Send a message to go on"
        );
        assert_eq!(
            stop_words("W", S, Some("sdk-cli")),
            format!("W: it repeated tool calls without progress. Resume it when ready: `claude --resume {S}` in its project")
        );
    }

    #[test]
    fn session_ids_are_uuids() {
        assert!(is_uuid(S));
        assert!(!is_uuid("ses_abc"));
        assert!(!is_uuid("0b7c6f1e-1111-4000-8000-00000000abc/"));
    }
}
