//! What `oc-calls --export PATH` reads besides opencode's exports: the transcripts other agents
//! leave on disk, a Claude Code session (`~/.claude/projects/<dir>/<session>.jsonl`, its
//! subagents in `<session>/subagents/agent-*.jsonl`) or a Codex rollout
//! (`~/.codex/sessions/Y/M/D/rollout-*.jsonl`), or a folder holding such files at any depth.
//!
//! Each agent's wing ([`super::claude_code`], [`super::codex`]) turns its transcripts straight
//! into the project's own records ([`Transcript`]: a session, its calls, its activity), along
//! the tool vocabulary of [`super::vocab`], with the helpers here; no message text, tool output
//! or file content leaves it. Which wing reads a file is told by its first record
//! ([`super::sent`]), not by its name.

use crate::record::{Activity, Call, Session};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// One session read from a transcript, as `oc-calls` writes it.
#[derive(Debug, Clone, PartialEq)]
pub struct Transcript {
    pub session: Session,
    /// In call order.
    pub calls: Vec<Call>,
    pub activity: Activity,
}

/// What reading one transcript (and what goes with it) gave: its sessions, and what could not
/// be read, each a `blind` reason (a line that is not JSON, a record of no known shape).
#[derive(Debug, Default)]
pub struct Read {
    pub sessions: Vec<Transcript>,
    pub problems: Vec<String>,
}

/// Whether `file` is a Claude Code subagent's transcript whose session's transcript is beside
/// it (`<dir>/<session>/subagents/agent-*.jsonl` and `<dir>/<session>.jsonl`): it is read with
/// that one, which names its parent.
pub fn read_with_its_session(file: &Path) -> bool {
    let Some(subagents) = file.parent().filter(|d| d.ends_with("subagents")) else {
        return false;
    };
    let Some(session) = subagents.parent() else {
        return false;
    };
    session.with_extension("jsonl").is_file()
}

/// Every `.jsonl` file under `dir`, at any depth, in path order. Symbolic links to folders are
/// not followed (a link back up would never end).
pub fn jsonl_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d)? {
            let e = e?;
            let ft = e.file_type()?;
            let p = e.path();
            if ft.is_dir() {
                todo.push(p);
            } else if p.extension().is_some_and(|x| x == "jsonl") {
                out.push(p);
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Sets what a session read from the agent's own files says of its run by whether its process
/// runs (`running`): `busy` while it does; `idle` once it does not, and then nothing is in
/// flight any more and a call left without a result (the process was killed during it) never
/// gets one. A subagent of a running session is busy only while its own turn is in flight.
pub fn settle(t: &mut Transcript, running: bool) {
    let busy = running && (t.session.parent.is_none() || t.activity.in_flight);
    t.session.status = Some(if busy { "busy" } else { "idle" }.into());
    if !running {
        t.activity.in_flight = false;
        t.activity.running.clear();
        for c in &mut t.calls {
            if c.status == "running" || c.status == "pending" {
                c.status = "error".into();
            }
        }
    }
}

/// The modification time of a file in ms (`None`: not there, or no time).
pub fn mtime_ms(path: &Path) -> Option<i64> {
    let t = std::fs::metadata(path).ok()?.modified().ok()?;
    let d = t.duration_since(std::time::UNIX_EPOCH).ok()?;
    i64::try_from(d.as_millis()).ok()
}

/// The start time of process `pid` (field 22 of `/proc/<pid>/stat`, clock ticks since boot),
/// which tells a process from a later one given the same pid (`None`: no such process).
pub fn proc_start(pid: u32) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // the command name (field 2) is in parentheses and may hold spaces: count after it
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19).map(String::from)
}

/// Milliseconds since the epoch of an RFC 3339 time (`2026-12-04T18:23:23.131Z`).
pub fn ms(v: Option<&Value>) -> Option<i64> {
    let t: jiff::Timestamp = v?.as_str()?.parse().ok()?;
    Some(t.as_millisecond())
}

/// The JSON records of a JSON Lines text with their 1-based line numbers, parsed one at a time
/// as they are taken (a long transcript is never held parsed whole). A line that is not JSON is
/// an `Err` naming its line, except a last line cut short without its newline: a transcript
/// being written.
pub fn records<'a>(
    name: &'a str,
    text: &'a str,
) -> impl Iterator<Item = Result<(usize, Value), String>> + 'a {
    // the unfinished last line: after the last newline, when the text does not end with one
    let cut = text.rfind('\n').map_or(0, |i| i + 1);
    let unfinished = (cut < text.len()).then_some(cut);
    let mut at = 0;
    text.split_inclusive('\n')
        .enumerate()
        .filter_map(move |(i, raw)| {
            let start = at;
            at += raw.len();
            let line = raw.trim_end_matches(['\n', '\r']);
            if line.trim().is_empty() {
                return None;
            }
            match serde_json::from_str::<Value>(line) {
                Ok(v) if v.is_object() => Some(Ok((i + 1, v))),
                Ok(_) => Some(Err(format!("{name}:{}: not a JSON object", i + 1))),
                Err(_) if unfinished == Some(start) => None,
                Err(e) => Some(Err(format!("{name}:{}: not JSON: {e}", i + 1))),
            }
        })
}

/// The text of a tool output that may be a string or a list of content blocks (`text` blocks
/// joined by newlines; images and other blocks leave nothing).
pub fn text_of(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Array(blocks) => Some(
            blocks
                .iter()
                .filter_map(|b| match b {
                    Value::String(s) => Some(s.as_str()),
                    b => b.get("text").and_then(Value::as_str),
                })
                .collect::<Vec<_>>()
                .join("\n"),
        ),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_that_is_not_json_is_named_unless_it_is_the_unfinished_last_one() {
        let (got, problems): (Vec<_>, Vec<_>) =
            records("t.jsonl", "{\"a\":1}\nnope\n[1]\n{\"b\":2}\n{\"c\":").partition(Result::is_ok);
        let got: Vec<usize> = got.into_iter().map(|r| r.unwrap().0).collect();
        let problems: Vec<String> = problems.into_iter().map(Result::unwrap_err).collect();
        assert_eq!(got, [1, 4]);
        assert_eq!(
            problems,
            [
                "t.jsonl:2: not JSON: expected ident at line 1 column 2",
                "t.jsonl:3: not a JSON object"
            ]
        );
    }

    #[test]
    fn times_read_as_milliseconds() {
        let v = Value::from("2026-12-04T18:23:23.131Z");
        assert_eq!(ms(Some(&v)), Some(1_796_408_603_131));
        assert_eq!(ms(Some(&Value::from("yesterday"))), None);
    }
}
