//! Claude Code's wing: its transcripts (2.1.x: `~/.claude/projects/<dir>/<session>.jsonl`, one
//! record a line, and each subagent's in `<session>/subagents/agent-<id>.jsonl` beside its
//! `.meta.json`) turned into the project's records.
//!
//! A call is an `assistant` record's `tool_use` block; its result is a later `user` record's
//! `tool_result` with the same id (`is_error`, and at the record's top the structured
//! `toolUseResult`, which subagent files lack). Tools are mapped onto the vocabulary
//! ([`tool_of`]); a Bash's exit code is read from its result text (`Exit code N`); an Edit,
//! MultiEdit or Write lands when it succeeded and its structured patch (if any) changed lines;
//! a Bash lands when it commits. Only the sha1 of a result leaves this module.

use super::transcript::{ms, records, text_of, Read, Transcript};
use super::vocab::{Arg, Tool, BASH_TIMEOUT_MS};
use crate::record::{Activity, Call, Program, Running, Session};
use crate::scrub::{hash_str, scrub_args};
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::path::Path;

/// Claude Code versions whose transcripts this reader was proven against.
pub const KNOWN_VERSIONS: &str = "2.1.x (tested on 2.1.332)";

/// Does a record carry tool calls or their results the way messages do (`message.content`
/// blocks of type `tool_use` or `tool_result`)?
fn carries_calls(r: &Value) -> bool {
    r.get("message")
        .and_then(|m| m.get("content"))
        .and_then(Value::as_array)
        .is_some_and(|blocks| {
            blocks
                .iter()
                .any(|b| matches!(b["type"].as_str(), Some("tool_use" | "tool_result")))
        })
}

/// A subagent's transcript with what its `.meta.json` says.
pub struct Subagent<'a> {
    /// How `source` strings name its file.
    pub name: String,
    pub text: &'a str,
    /// `agentType` (Explore, general-purpose, ...).
    pub agent_type: Option<String>,
    /// The parent's Agent (Task) call that started it.
    pub tool_use_id: Option<String>,
}

/// Reads the main transcript at `path` and the subagents in `<session>/subagents/` beside it.
pub fn read_with_subagents(path: &Path, name: &str, text: &str) -> Read {
    let dir = path.with_extension("").join("subagents");
    let mut texts = Vec::new();
    let mut problems = Vec::new();
    if let Ok(files) = super::transcript::jsonl_files(&dir) {
        for f in files {
            let fname = f.display().to_string();
            match std::fs::read_to_string(&f) {
                Ok(t) => {
                    let meta: Value = std::fs::read_to_string(f.with_extension("meta.json"))
                        .ok()
                        .and_then(|m| serde_json::from_str(&m).ok())
                        .unwrap_or_default();
                    texts.push((fname, t, meta));
                }
                Err(e) => problems.push(format!("{fname}: cannot read: {e}")),
            }
        }
    }
    let subs: Vec<Subagent> = texts
        .iter()
        .map(|(n, t, meta)| Subagent {
            name: n.clone(),
            text: t,
            agent_type: meta["agentType"].as_str().map(String::from),
            tool_use_id: meta["toolUseId"].as_str().map(String::from),
        })
        .collect();
    let mut r = read(name, text, &subs);
    r.problems.splice(0..0, problems);
    r
}

/// Reads one main transcript (`name`: how `source` strings name it) and its subagents' (each
/// the child of the session whose call started it, else of the main session).
pub fn read(name: &str, text: &str, subagents: &[Subagent]) -> Read {
    let mut out = Read::default();
    let main = one(name, text, None, &mut out.problems);
    let main_id = main.as_ref().map(|t| t.session.id.clone());
    out.sessions.extend(main);
    for s in subagents {
        let Some(mut t) = one(&s.name, s.text, Some(s), &mut out.problems) else {
            continue;
        };
        let started_by = s.tool_use_id.as_deref().and_then(|id| {
            out.sessions
                .iter()
                .find(|o| o.calls.iter().any(|c| c.id == id))
                .map(|o| o.session.id.clone())
        });
        let own = t.session.parent.take();
        t.session.parent = started_by.or_else(|| main_id.clone()).or(own);
        out.sessions.push(t);
    }
    out
}

/// Which session a record belongs to, as the transcript's records say it.
fn session_id(sessionid: &str, agent: Option<&str>) -> String {
    match agent {
        Some(a) => format!("agent-{a}"),
        None => sessionid.to_string(),
    }
}

/// The marker Claude Code writes as the user's turn when a person interrupts a reply.
const INTERRUPTED: &str = "[Request interrupted by user";

/// What the last conversation record says of the turn.
#[derive(PartialEq)]
enum Last {
    Nothing,
    /// A reply that stopped for a reason other than calling tools (`end_turn`, ...).
    ReplyDone,
    /// A reply calling tools, a tool result or a prompt: the agent is to go on.
    Going,
    /// A person interrupted it.
    Interrupted,
    /// A hook ended the turn (`continue: false`).
    HookStopped,
}

fn one(
    name: &str,
    text: &str,
    sub: Option<&Subagent>,
    problems: &mut Vec<String>,
) -> Option<Transcript> {
    let mut any = false;
    let mut sid: Option<String> = None;
    let mut agent_id: Option<String> = None;
    let (mut cwd, mut model) = (None::<String>, None::<String>);
    let (mut first, mut last_t) = (None::<i64>, None::<i64>);
    let mut calls: Vec<Call> = Vec::new();
    let mut pending: HashMap<String, usize> = HashMap::new();
    let mut last = Last::Nothing;
    // the turn: when its prompt came, when its reply ended it
    let (mut prompted, mut replied) = (None::<i64>, None::<i64>);
    // the subagent type its replies are attributed to (its `.meta.json` says it too)
    let mut attribution: Option<String> = None;
    for rec in records(name, text) {
        let (n, r) = match rec {
            Ok(nr) => nr,
            Err(problem) => {
                problems.push(problem);
                continue;
            }
        };
        let r = &r;
        any = true;
        let Some(ty) = r.get("type").and_then(Value::as_str) else {
            problems.push(format!("{name}:{n}: a record with no \"type\""));
            continue;
        };
        if sid.is_none() {
            sid = r.get("sessionId").and_then(Value::as_str).map(String::from);
        }
        if agent_id.is_none() {
            agent_id = r.get("agentId").and_then(Value::as_str).map(String::from);
        }
        if let Some(c) = r.get("cwd").and_then(Value::as_str) {
            cwd = Some(c.to_string());
        }
        let t = ms(r.get("timestamp"));
        if t.is_some() {
            first = first.or(t);
            last_t = t;
        }
        let session = || session_id(sid.as_deref().unwrap_or(""), agent_id.as_deref());
        match ty {
            "assistant" => {
                let msg = &r["message"];
                if agent_id.is_some() && attribution.is_none() {
                    attribution = r
                        .get("attributionAgent")
                        .and_then(Value::as_str)
                        .map(String::from);
                }
                if let Some(m) = msg.get("model").and_then(Value::as_str) {
                    // `<synthetic>` marks replies Claude Code wrote itself (an API error)
                    if !m.starts_with('<') {
                        model = Some(m.to_string());
                    }
                }
                let Some(blocks) = msg.get("content").and_then(Value::as_array) else {
                    problems.push(format!(
                        "{name}:{n}: an assistant record with no content list"
                    ));
                    continue;
                };
                let mut calls_tools = false;
                for b in blocks.iter().filter(|b| b["type"] == "tool_use") {
                    calls_tools = true;
                    let (Some(id), Some(tool)) = (b["id"].as_str(), b["name"].as_str()) else {
                        problems.push(format!("{name}:{n}: a tool_use with no id or name"));
                        continue;
                    };
                    let empty = Map::new();
                    let input = b["input"].as_object().unwrap_or(&empty);
                    let (tool, args) = tool_of(tool, input);
                    pending.insert(id.to_string(), calls.len());
                    calls.push(Call {
                        session: session(),
                        id: id.to_string(),
                        t: t.unwrap_or(0),
                        tool,
                        args,
                        status: "running".into(),
                        model: model.clone(),
                        ..Call::default()
                    });
                }
                let stop = msg.get("stop_reason").and_then(Value::as_str);
                last = if calls_tools || stop == Some("tool_use") || stop.is_none() {
                    Last::Going
                } else {
                    replied = t;
                    Last::ReplyDone
                };
            }
            "user" => {
                let content = &r["message"]["content"];
                let interrupted = match content {
                    Value::String(s) => s.starts_with(INTERRUPTED),
                    Value::Array(bs) => bs.iter().any(|b| {
                        b["type"] == "text"
                            && b["text"]
                                .as_str()
                                .is_some_and(|s| s.starts_with(INTERRUPTED))
                    }),
                    _ => false,
                };
                last = if interrupted {
                    Last::Interrupted
                } else {
                    Last::Going
                };
                // a person's prompt, not the results of the reply's tool calls
                let prompt = match content {
                    Value::String(_) => true,
                    Value::Array(bs) => bs.iter().all(|b| b["type"] != "tool_result"),
                    _ => false,
                };
                if prompt && !interrupted {
                    prompted = t.or(prompted);
                }
                let results: Vec<&Value> = content
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|b| b["type"] == "tool_result")
                    .collect();
                // the structured result goes with the record's one tool result
                let structured = (results.len() == 1)
                    .then(|| r.get("toolUseResult"))
                    .flatten();
                for b in results {
                    let Some(i) = b["tool_use_id"].as_str().and_then(|id| pending.remove(id))
                    else {
                        continue;
                    };
                    finish(&mut calls[i], b, structured, t);
                }
            }
            "attachment" if r["attachment"]["type"] == "hook_stopped_continuation" => {
                last = Last::HookStopped;
            }
            // bookkeeping (2.1.332), and a record of a kind this reader does not know that
            // carries no tool call: nothing to read in either
            _ if !carries_calls(r) => {}
            _ => problems.push(format!(
                "{name}:{n}: a {ty:?} record carries tool calls, a kind of record this reader \
                 does not know (Claude Code {KNOWN_VERSIONS} is): its calls are not read"
            )),
        }
    }
    let Some(sid) = sid else {
        if any {
            problems.push(format!("{name}: no record names its session"));
        }
        return None;
    };
    let id = session_id(&sid, agent_id.as_deref());
    let in_flight = last == Last::Going;
    let mut running = Vec::new();
    for &i in pending.values() {
        let c = &mut calls[i];
        if in_flight {
            running.push(Running {
                tool: c.tool.clone(),
                t: c.t,
                timeout: (Tool::of(&c.tool) == Tool::Bash).then(|| {
                    c.args
                        .get(Arg::Timeout.key())
                        .and_then(Value::as_i64)
                        .unwrap_or(BASH_TIMEOUT_MS)
                }),
                ..Running::default()
            });
        } else {
            // the turn ended (interrupted, stopped) with this call unanswered: it never will be
            c.status = "error".into();
        }
    }
    running.sort_by_key(|r| r.t);
    let session = Session {
        id: id.clone(),
        // a subagent read alone is the child of the session it names
        parent: agent_id.as_ref().map(|_| sid.clone()),
        agent: sub.and_then(|s| s.agent_type.clone()).or(attribution),
        directory: cwd,
        created: first,
        updated: last_t,
        source: Some(format!("export:{name}")),
        model,
        program: Some(Program::ClaudeCode),
        ..Session::default()
    };
    let activity = Activity {
        session: id,
        last_progress: last_t,
        in_flight,
        running,
        error: (last == Last::Interrupted).then(|| crate::liveness::USER_ABORT.to_string()),
        turn: prompted.map(|start| {
            let mut turn = crate::record::Turn {
                start,
                // the turn's last record is the reply that ended it (`end_turn`, ...)
                end: replied.filter(|r| last == Last::ReplyDone && *r >= start),
                ..crate::record::Turn::default()
            };
            crate::sources::convert::land_turn(&mut turn, &calls);
            turn
        }),
    };
    Some(Transcript {
        session,
        calls,
        activity,
    })
}

/// Completes a call from its `tool_result` block (and the record's structured result).
fn finish(c: &mut Call, result: &Value, structured: Option<&Value>, t: Option<i64>) {
    let text = text_of(&result["content"]).unwrap_or_default();
    let is_error = result["is_error"].as_bool().unwrap_or(false);
    c.end = t;
    c.out = Some(hash_str(&text));
    let kind = Tool::of(&c.tool);
    let exit = (kind == Tool::Bash)
        .then(|| exit_of(&text, is_error))
        .flatten();
    // a command that ran and exited non-zero completed, as opencode's bash does
    c.status = if is_error && exit.is_none() {
        "error"
    } else {
        "completed"
    }
    .into();
    c.exit = exit;
    let ok = c.status == "completed";
    c.landed = ok
        && match kind {
            Tool::Edit | Tool::MultiEdit | Tool::Write => changed(structured),
            Tool::Bash => {
                exit == Some(0)
                    && c.args
                        .get(Arg::Command.key())
                        .and_then(Value::as_str)
                        .is_some_and(super::convert::is_git_commit)
            }
            _ => false,
        };
    if kind == Tool::Read {
        c.file_lines = structured
            .and_then(|s| s.get("file"))
            .and_then(|f| f.get("totalLines"))
            .and_then(Value::as_i64);
    }
}

/// A Bash's exit: `Exit code N` opens a failed one's result; a successful one exited 0.
fn exit_of(text: &str, is_error: bool) -> Option<i64> {
    if !is_error {
        return Some(0);
    }
    let rest = text.strip_prefix("Exit code ")?;
    rest.split(|c: char| !c.is_ascii_digit() && c != '-')
        .next()?
        .parse()
        .ok()
}

/// Whether a successful Edit, MultiEdit or Write changed its file, by its structured result: a
/// new file, or a patch with lines. Without one (subagent transcripts keep none), success is
/// the evidence.
fn changed(structured: Option<&Value>) -> bool {
    let Some(s) = structured.filter(|s| s.is_object()) else {
        return true;
    };
    if s["type"] == "create" {
        return true;
    }
    match s.get("structuredPatch").and_then(Value::as_array) {
        Some(hunks) => hunks.iter().any(|h| {
            h["lines"].as_array().is_some_and(|ls| {
                ls.iter()
                    .filter_map(Value::as_str)
                    .any(|l| l.starts_with('+') || l.starts_with('-'))
            })
        }),
        None => true,
    }
}

/// A Claude Code tool call as the vocabulary has it: its tool's name and its input with the
/// keys renamed to the vocabulary's, scrubbed. A tool the vocabulary does not know keeps its
/// name in lower case and its keys as they are (their values hashed).
pub fn tool_of(name: &str, input: &Map<String, Value>) -> (String, Map<String, Value>) {
    let tool = match name {
        "Read" => Tool::Read.name(),
        "Edit" | "MultiEdit" => Tool::Edit.name(),
        "Write" => Tool::Write.name(),
        "Bash" => Tool::Bash.name(),
        "Grep" => Tool::Grep.name(),
        "Glob" => Tool::Glob.name(),
        // `Task` before 2.1, `Agent` since
        "Task" | "Agent" => Tool::Task.name(),
        "TodoWrite" => Some("todowrite"),
        _ => None,
    };
    let renamed: Map<String, Value> = input
        .iter()
        .map(|(k, v)| {
            let k = match (name, k.as_str()) {
                (_, "file_path" | "notebook_path") => Arg::FilePath.key(),
                (_, "old_string") => Arg::OldString.key(),
                (_, "new_string") => Arg::NewString.key(),
                (_, "replace_all") => "replaceAll",
                ("Grep", "glob") => Arg::Include.key(),
                (_, k) => k,
            };
            (k.to_string(), v.clone())
        })
        .collect();
    let tool = tool.map_or_else(|| name.to_ascii_lowercase(), String::from);
    (tool, scrub_args(&renamed))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const SID: &str = "69dd091f-9c50-4e7e-842e-220de441ed90";

    /// A transcript in Claude Code 2.1's shapes: one record a line.
    fn transcript(recs: &[Value]) -> String {
        recs.iter().map(|r| format!("{r}\n")).collect()
    }

    fn use_(t: &str, id: &str, name: &str, input: Value) -> Value {
        json!({"type": "assistant", "sessionId": SID, "cwd": "/p", "timestamp": t,
               "message": {"id": format!("msg_{id}"), "model": "claude-opus-5-5", "stop_reason": "tool_use",
                           "content": [{"type": "tool_use", "id": id, "name": name, "input": input}]}})
    }

    fn result(t: &str, id: &str, content: &str, is_error: Option<bool>, tur: Value) -> Value {
        let mut b = json!({"type": "tool_result", "tool_use_id": id, "content": content});
        if let Some(e) = is_error {
            b["is_error"] = json!(e);
        }
        json!({"type": "user", "sessionId": SID, "cwd": "/p", "timestamp": t,
               "message": {"role": "user", "content": [b]}, "toolUseResult": tur})
    }

    fn prompt(t: &str, text: &str) -> Value {
        json!({"type": "user", "sessionId": SID, "cwd": "/p", "timestamp": t,
               "message": {"role": "user", "content": text}})
    }

    fn done(t: &str) -> Value {
        json!({"type": "assistant", "sessionId": SID, "cwd": "/p", "timestamp": t,
               "message": {"id": "msg_end", "model": "claude-opus-5-5", "stop_reason": "end_turn",
                           "content": [{"type": "text", "text": "Done."}]}})
    }

    const FAIL: &str = "Exit code 1\nTraceback (most recent call last):\nZeroDivisionError";

    #[test]
    fn a_record_of_an_unknown_kind_with_tool_calls_is_a_problem_bookkeeping_is_not() {
        // a later Claude Code writing its calls in a record kind this reader does not know is
        // blindness; a new bookkeeping record (no message) is not
        let mut later = use_(
            "2026-12-04T18:23:23.000Z",
            "toolu_9",
            "Bash",
            json!({"command": "ls"}),
        );
        later["type"] = json!("assistant-v2");
        let text = transcript(&[
            prompt("2026-12-04T18:23:22.000Z", "go"),
            json!({"type": "session-meter", "sessionId": SID, "timestamp": "2026-12-04T18:23:22.500Z",
                   "tokens": 12}),
            later,
            done("2026-12-04T18:23:24.000Z"),
        ]);
        let r = read("t.jsonl", &text, &[]);
        assert_eq!(
            r.problems,
            [format!(
                "t.jsonl:3: a \"assistant-v2\" record carries tool calls, a kind of record this \
                 reader does not know (Claude Code {KNOWN_VERSIONS} is): its calls are not read"
            )]
        );
    }

    #[test]
    fn calls_read_as_the_vocabulary_has_them() {
        let text = transcript(&[
            json!({"type": "queue-operation", "operation": "enqueue", "sessionId": SID,
                   "timestamp": "2026-12-04T18:23:22.184Z"}),
            prompt("2026-12-04T18:23:22.300Z", "fix the tests"),
            use_(
                "2026-12-04T18:23:23.131Z",
                "toolu_1",
                "Read",
                json!({"file_path": "/p/src/calc.py", "offset": 5, "limit": 5}),
            ),
            result(
                "2026-12-04T18:23:24.068Z",
                "toolu_1",
                "5\t    return a + b",
                None,
                json!({"type": "text", "file": {"filePath": "/p/src/calc.py", "totalLines": 18}}),
            ),
            use_(
                "2026-12-04T18:23:25.796Z",
                "toolu_2",
                "Bash",
                json!({"command": "python3 tests/test_calc.py", "description": "Run the tests"}),
            ),
            result(
                "2026-12-04T18:23:26.838Z",
                "toolu_2",
                FAIL,
                Some(true),
                json!(format!("Error: {FAIL}")),
            ),
            use_(
                "2026-12-04T18:23:30.719Z",
                "toolu_3",
                "Edit",
                json!({"file_path": "/p/src/calc.py", "old_string": "a", "new_string": "b", "replace_all": false}),
            ),
            result(
                "2026-12-04T18:23:31.527Z",
                "toolu_3",
                "The file /p/src/calc.py has been updated successfully.",
                None,
                json!({"filePath": "/p/src/calc.py", "structuredPatch": [{"lines": [" x", "-a", "+b"]}]}),
            ),
            use_(
                "2026-12-04T18:23:31.589Z",
                "toolu_4",
                "Edit",
                json!({"file_path": "/p/src/calc.py", "old_string": "zz", "new_string": "x"}),
            ),
            result(
                "2026-12-04T18:23:31.600Z",
                "toolu_4",
                "<tool_use_error>String to replace not found in file.</tool_use_error>",
                Some(true),
                json!("Error: String to replace not found in file."),
            ),
            use_(
                "2026-12-04T18:23:32.686Z",
                "toolu_5",
                "Bash",
                json!({"command": "git add -A && git commit -qm 'fix'", "description": "Commit"}),
            ),
            result(
                "2026-12-04T18:23:33.395Z",
                "toolu_5",
                "(Bash completed with no output)",
                Some(false),
                json!({"stdout": "", "stderr": ""}),
            ),
            use_(
                "2026-12-04T18:23:33.469Z",
                "toolu_6",
                "Write",
                json!({"file_path": "/p/NOTES.md", "content": "# notes\n"}),
            ),
            result(
                "2026-12-04T18:23:34.323Z",
                "toolu_6",
                "File created successfully at: /p/NOTES.md",
                None,
                json!({"type": "create", "filePath": "/p/NOTES.md", "structuredPatch": []}),
            ),
            use_(
                "2026-12-04T18:23:34.400Z",
                "toolu_7",
                "Grep",
                json!({"pattern": "def mean", "path": "/p/src", "glob": "*.py"}),
            ),
            result(
                "2026-12-04T18:23:34.500Z",
                "toolu_7",
                "src/calc.py",
                None,
                json!({}),
            ),
            done("2026-12-04T18:23:36.000Z"),
        ]);
        let r = read("t.jsonl", &text, &[]);
        assert!(r.problems.is_empty(), "{:?}", r.problems);
        let [t] = &r.sessions[..] else {
            panic!("{:?}", r.sessions)
        };
        let s = &t.session;
        assert_eq!(
            (
                s.id.as_str(),
                s.parent.as_deref(),
                s.directory.as_deref(),
                s.model.as_deref()
            ),
            (SID, None, Some("/p"), Some("claude-opus-5-5"))
        );
        assert_eq!(
            (s.created, s.updated),
            (Some(1_796_408_602_184), Some(1_796_408_616_000))
        );
        assert_eq!(s.program, Some(Program::ClaudeCode));
        assert_eq!(s.source.as_deref(), Some("export:t.jsonl"));
        let got: Vec<(&str, Value, &str, bool, Option<i64>)> = t
            .calls
            .iter()
            .map(|c| {
                (
                    c.tool.as_str(),
                    Value::Object(c.args.clone()),
                    c.status.as_str(),
                    c.landed,
                    c.exit,
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                (
                    "read",
                    json!({"filePath": "/p/src/calc.py", "offset": 5, "limit": 5}),
                    "completed",
                    false,
                    None
                ),
                (
                    "bash",
                    json!({"command": "python3 tests/test_calc.py", "description": hash_str("Run the tests")}),
                    "completed",
                    false,
                    Some(1)
                ),
                (
                    "edit",
                    json!({"filePath": "/p/src/calc.py", "oldString": hash_str("a"), "newString": hash_str("b"),
                                "replaceAll": false}),
                    "completed",
                    true,
                    None
                ),
                (
                    "edit",
                    json!({"filePath": "/p/src/calc.py", "oldString": hash_str("zz"), "newString": hash_str("x")}),
                    "error",
                    false,
                    None
                ),
                (
                    "bash",
                    json!({"command": "git add -A && git commit -qm 'fix'", "description": hash_str("Commit")}),
                    "completed",
                    true,
                    Some(0)
                ),
                (
                    "write",
                    json!({"filePath": "/p/NOTES.md", "content": hash_str("# notes\n")}),
                    "completed",
                    true,
                    None
                ),
                (
                    "grep",
                    json!({"pattern": "def mean", "path": "/p/src", "include": "*.py"}),
                    "completed",
                    false,
                    None
                ),
            ]
        );
        let c = &t.calls[1];
        assert_eq!(
            (c.id.as_str(), c.t, c.end),
            ("toolu_2", 1_796_408_605_796, Some(1_796_408_606_838))
        );
        assert_eq!(c.out.as_deref(), Some(hash_str(FAIL).as_str()));
        assert_eq!(t.calls[0].file_lines, Some(18));
        assert_eq!(t.calls[0].model.as_deref(), Some("claude-opus-5-5"));
        assert!(
            !t.activity.in_flight && t.activity.running.is_empty() && t.activity.error.is_none()
        );
        // no message text, output or content anywhere in the records
        let all = serde_json::to_string(&t.calls).unwrap();
        for secret in [
            "ZeroDivisionError",
            "# notes",
            "updated successfully",
            "Run the tests",
        ] {
            assert!(!all.contains(secret), "{secret} in {all}");
        }
    }

    /// Issue 41, done: a turn runs from a person's prompt (not a tool result) to the reply that
    /// calls no tool; what it landed counts its calls that landed; a new prompt begins another.
    #[test]
    fn a_turn_runs_from_the_prompt_to_the_reply_that_ends_it() {
        let mut recs = vec![
            prompt("2026-12-04T18:23:22.300Z", "fix"),
            use_(
                "2026-12-04T18:23:25.796Z",
                "toolu_1",
                "Write",
                json!({"file_path": "/p/notes.md", "content": "x"}),
            ),
            result(
                "2026-12-04T18:23:26.000Z",
                "toolu_1",
                "File created successfully at: /p/notes.md",
                None,
                json!({"type": "create", "filePath": "/p/notes.md"}),
            ),
            done("2026-12-04T18:23:28.000Z"),
        ];
        let turn = |recs: &[Value]| {
            read("t.jsonl", &transcript(recs), &[]).sessions[0]
                .activity
                .turn
                .clone()
                .unwrap()
        };
        let t = turn(&recs);
        assert_eq!(
            (t.start, t.end, t.landed, t.targets),
            (
                1_796_408_602_300,
                Some(1_796_408_608_000),
                1,
                vec!["write /p/notes.md".to_string()]
            )
        );
        recs.push(prompt("2026-12-04T18:24:00.000Z", "more"));
        let t = turn(&recs);
        assert_eq!((t.start, t.end, t.landed), (1_796_408_640_000, None, 0));
    }

    #[test]
    fn a_killed_session_is_in_flight_and_an_interrupted_one_ended_by_the_user() {
        let start = [
            prompt("2026-12-04T18:23:22.300Z", "fix"),
            use_(
                "2026-12-04T18:23:25.796Z",
                "toolu_2",
                "Bash",
                json!({"command": "python3 t.py"}),
            ),
        ];
        let killed = read("k.jsonl", &transcript(&start), &[]);
        let a = &killed.sessions[0].activity;
        assert!(a.in_flight);
        assert_eq!(
            a.running,
            [Running {
                tool: "bash".into(),
                t: 1_796_408_605_796,
                timeout: Some(120_000),
                asks: None,
            }]
        );
        assert_eq!(killed.sessions[0].calls[0].status, "running");
        let mut recs = start.to_vec();
        recs.push(json!({"type": "user", "sessionId": SID, "timestamp": "2026-12-04T18:23:27.000Z",
                         "message": {"role": "user", "content": [{"type": "text", "text": "[Request interrupted by user]"}]}}));
        let int = read("i.jsonl", &transcript(&recs), &[]);
        let a = &int.sessions[0].activity;
        assert!(!a.in_flight && a.running.is_empty());
        assert_eq!(a.error.as_deref(), Some("MessageAbortedError"));
        assert_eq!(int.sessions[0].calls[0].status, "error");
    }

    #[test]
    fn a_subagent_is_the_child_of_the_call_that_started_it() {
        let main = transcript(&[
            prompt("2026-12-04T18:23:22.300Z", "fix"),
            use_(
                "2026-12-04T18:23:34.384Z",
                "toolu_13",
                "Agent",
                json!({"description": "Search", "prompt": "find every use of mean", "subagent_type": "Explore"}),
            ),
            result(
                "2026-12-04T18:23:35.320Z",
                "toolu_13",
                "Async agent launched successfully.",
                None,
                json!({"isAsync": true, "status": "async_launched", "agentId": "abf94f9c9dcc61e16"}),
            ),
            done("2026-12-04T18:23:36.000Z"),
        ]);
        let sub_rec = |r: Value| {
            let mut r = r;
            r["isSidechain"] = json!(true);
            r["agentId"] = json!("abf94f9c9dcc61e16");
            r
        };
        let sub = transcript(&[
            sub_rec(prompt("2026-12-04T18:23:34.810Z", "find every use of mean")),
            sub_rec(use_(
                "2026-12-04T18:23:35.426Z",
                "toolu_s0",
                "Bash",
                json!({"command": "grep -n mean src/calc.py"}),
            )),
            sub_rec(result(
                "2026-12-04T18:23:36.547Z",
                "toolu_s0",
                "8:def mean(xs):",
                Some(false),
                Value::Null,
            )),
            sub_rec(use_(
                "2026-12-04T18:23:36.600Z",
                "toolu_s1",
                "Edit",
                json!({"file_path": "/p/a.py", "old_string": "a", "new_string": "b"}),
            )),
            sub_rec(result(
                "2026-12-04T18:23:36.700Z",
                "toolu_s1",
                "The file /p/a.py has been updated successfully.",
                None,
                Value::Null,
            )),
            sub_rec(done("2026-12-04T18:23:38.543Z")),
        ]);
        let r = read(
            "m.jsonl",
            &main,
            &[Subagent {
                name: "m/subagents/agent-abf94f9c9dcc61e16.jsonl".into(),
                text: &sub,
                agent_type: Some("Explore".into()),
                tool_use_id: Some("toolu_13".into()),
            }],
        );
        assert!(r.problems.is_empty(), "{:?}", r.problems);
        assert_eq!(r.sessions.len(), 2);
        assert_eq!(r.sessions[0].calls[0].tool, "task");
        assert_eq!(r.sessions[0].calls[0].args["subagent_type"], "Explore");
        let s = &r.sessions[1];
        assert_eq!(s.session.id, "agent-abf94f9c9dcc61e16");
        assert_eq!(s.session.parent.as_deref(), Some(SID));
        assert_eq!(s.session.agent.as_deref(), Some("Explore"));
        assert_eq!(
            s.calls
                .iter()
                .map(|c| c.session.as_str())
                .collect::<Vec<_>>(),
            ["agent-abf94f9c9dcc61e16"; 2]
        );
        assert_eq!(s.calls[0].exit, Some(0));
        // no structured result in subagent files: a successful edit is the evidence
        assert!(s.calls[1].landed);
    }

    #[test]
    fn a_hook_refusal_is_an_error_without_exit_and_the_turn_ended() {
        let text = transcript(&[
            prompt("2026-12-04T18:23:22.300Z", "fix"),
            use_(
                "2026-12-04T18:23:25.796Z",
                "toolu_2",
                "Bash",
                json!({"command": "python3 t.py"}),
            ),
            result(
                "2026-12-04T18:23:25.900Z",
                "toolu_2",
                "PreToolUse:Bash hook error: Stopped by the watchdog",
                Some(true),
                json!("Error: PreToolUse:Bash hook error: Stopped by the watchdog"),
            ),
            json!({"type": "attachment", "sessionId": SID, "timestamp": "2026-12-04T18:23:25.950Z",
                   "attachment": {"type": "hook_stopped_continuation", "message": "stopped", "hookName": "PreToolUse:Bash"}}),
        ]);
        let r = read("h.jsonl", &text, &[]);
        let c = &r.sessions[0].calls[0];
        assert_eq!((c.status.as_str(), c.exit), ("error", None));
        assert!(!r.sessions[0].activity.in_flight);
    }

    #[test]
    fn exit_codes_are_read_from_the_result_text() {
        assert_eq!(exit_of("Exit code 1\nTraceback", true), Some(1));
        assert_eq!(exit_of("Exit code 137", true), Some(137));
        assert_eq!(exit_of("all tests passed", false), Some(0));
        assert_eq!(exit_of("PreToolUse:Bash hook error: x", true), None);
    }
}
