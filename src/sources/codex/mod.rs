//! Codex CLI's wing: its rollouts (0.171: `~/.codex/sessions/Y/M/D/rollout-<time>-<thread>.jsonl`,
//! one `{timestamp, type, payload}` a line, a subagent's thread in a rollout of its own naming
//! its parent) turned into the project's records.
//!
//! A call is a `response_item` `function_call` (`exec_command`, `shell`, `spawn_agent`, ...) or
//! `custom_tool_call` (`apply_patch`); its output the `*_output` item with the same `call_id`;
//! what it did the `item_completed` event (`CommandExecution` with its `exit_code`, `FileChange`
//! with its diffs). Tools are mapped onto the vocabulary ([`tool_of`]). Outputs are hashed
//! after the lines Codex makes different on every run (`Chunk ID:`, `Wall time:`) are taken
//! out, or identical outputs would never match.

pub mod home;

use super::transcript::{ms, parse_text, text_of, Parse, Read, Tail, Transcript};
use crate::record::{Activity, Call, Program, Session};
use crate::scrub::{hash_str, scrub_args};
use crate::vocab::{Arg, Tool};
use serde_json::{Map, Value};
use std::collections::HashMap;

/// Codex versions whose rollouts this reader was proven against.
pub const KNOWN_VERSIONS: &str = "0.171.x (tested on 0.171.0)";

/// What a call's output says, kept past the record it came in (the text itself is not kept):
/// the hash of its steady part, the exit its header gives, how it opens, and when it came.
#[derive(Clone)]
struct Output {
    out: String,
    exited: Option<i64>,
    /// `Exit code: 0` or `Success.`: an apply_patch that applied.
    applied: bool,
    /// `aborted ...`: a call interrupted or never dispatched.
    aborted: bool,
    end: Option<i64>,
}

impl Output {
    fn of(text: &str, end: Option<i64>) -> Output {
        Output {
            out: hash_str(&steady(text)),
            exited: exited_with(text),
            applied: text.starts_with("Exit code: 0") || text.starts_with("Success."),
            aborted: text.starts_with("aborted"),
            end,
        }
    }
}

/// What a completed item (`CommandExecution`, `FileChange`, ...) says of its call, kept past
/// the record it came in: its type, exit code, whether it completed and changed a file, and
/// its start and end (ms).
#[derive(Clone)]
struct Item {
    kind: Option<String>,
    exit_code: Option<i64>,
    completed: bool,
    changed: bool,
    started: Option<i64>,
    ended: Option<i64>,
}

impl Item {
    fn of(item: &Map<String, Value>, started: Option<i64>, ended: Option<i64>) -> Item {
        Item {
            kind: item.get("type").and_then(Value::as_str).map(String::from),
            exit_code: item.get("exit_code").and_then(Value::as_i64),
            completed: item.get("status").and_then(Value::as_str) == Some("completed"),
            changed: changed(item),
            started,
            ended,
        }
    }
}

/// What the turn's last event says.
#[derive(PartialEq, Clone, Default)]
enum Turn {
    #[default]
    None,
    Running,
    Complete,
    Aborted,
}

/// Reads one rollout (`name`: how `source` strings name it).
pub fn read(name: &str, text: &str) -> Read {
    parse_text::<Parser>(name, text).read(name, 0)
}

/// Reads the rollout at `path` (`name`: how `source` strings name it).
pub fn read_file(path: &std::path::Path, name: &str) -> Result<Read, String> {
    let mut t = Tail::<Parser>::default();
    t.update(path, name)
        .map_err(|e| format!("{name}: cannot read: {e}"))?;
    Ok(t.lines().now(name).read(name, 0))
}

/// The reading of one rollout, record by record. A call is finished as its output and item
/// come (in either order), so a read asks nothing of the calls that did not change.
#[derive(Clone, Default)]
pub struct Parser {
    meta: Option<Map<String, Value>>,
    any: bool,
    model: Option<String>,
    provider: Option<String>,
    cwd: Option<String>,
    first: Option<i64>,
    last_t: Option<i64>,
    calls: Vec<Call>,
    /// Each call's start as its own record gives it (its item may say another).
    called_at: Vec<i64>,
    /// The seq of the line that last changed each call.
    changed: Vec<u64>,
    /// The calls by id (more than one when an id was given twice).
    by_id: HashMap<String, Vec<usize>>,
    /// What each call's output said, by call id.
    outputs: HashMap<String, Output>,
    /// What each call's completed item said, by call id.
    items: HashMap<String, Item>,
    /// The calls with no output yet: what the end of the rollout says of them may change with
    /// every read.
    open: std::collections::BTreeSet<usize>,
    turn: Turn,
    /// When the latest turn began and when it completed.
    began: Option<i64>,
    completed: Option<i64>,
    /// The seq of the line that last changed what every call carries (the session's id, its
    /// model).
    all_changed: u64,
    problems: Vec<String>,
    /// The seq of the last line read.
    mark: u64,
}

impl Parse for Parser {
    fn line(&mut self, name: &str, n: usize, seq: u64, rec: Result<Value, String>) {
        self.mark = seq;
        match rec {
            Ok(r) => self.record(name, n, seq, &r),
            Err(problem) => self.problems.push(problem),
        }
    }
}

impl Parser {
    /// The session's model as its calls carry it (`provider/model`).
    fn full_model(&self) -> Option<String> {
        self.model.as_ref().map(|m| match &self.provider {
            Some(p) => format!("{p}/{m}"),
            None => m.clone(),
        })
    }

    fn thread(&self) -> Option<&str> {
        self.meta.as_ref()?.get("id").and_then(Value::as_str)
    }

    fn record(&mut self, name: &str, n: usize, seq: u64, r: &Value) {
        self.any = true;
        let t = ms(r.get("timestamp"));
        if t.is_some() {
            self.first = self.first.or(t);
            self.last_t = t;
        }
        let p = r.get("payload").and_then(Value::as_object);
        let (Some(ty), Some(p)) = (r.get("type").and_then(Value::as_str), p) else {
            self.problems.push(format!(
                "{name}:{n}: a record with no \"type\" or \"payload\""
            ));
            return;
        };
        let (model, thread) = (self.full_model(), self.thread().map(String::from));
        let ptype = p.get("type").and_then(Value::as_str).unwrap_or("");
        match (ty, ptype) {
            ("session_meta", _) => {
                if self.meta.is_none() {
                    self.meta = Some(p.clone());
                }
                self.cwd = self
                    .cwd
                    .take()
                    .or(p.get("cwd").and_then(Value::as_str).map(String::from));
                self.provider = p
                    .get("model_provider")
                    .and_then(Value::as_str)
                    .map(String::from);
            }
            ("turn_context", _) => {
                if let Some(m) = p.get("model").and_then(Value::as_str) {
                    self.model = Some(m.to_string());
                }
                if let Some(c) = p.get("cwd").and_then(Value::as_str) {
                    self.cwd = Some(c.to_string());
                }
            }
            ("response_item", "function_call" | "custom_tool_call") => {
                let (Some(id), Some(tool)) = (
                    p.get("call_id").and_then(Value::as_str),
                    p.get("name").and_then(Value::as_str),
                ) else {
                    self.problems
                        .push(format!("{name}:{n}: a {ptype} with no call_id or name"));
                    return;
                };
                let input = match p.get("arguments") {
                    // function calls carry their arguments as a JSON string
                    Some(Value::String(a)) => serde_json::from_str(a).unwrap_or(Value::Null),
                    Some(v) => v.clone(),
                    None => p.get("input").cloned().unwrap_or(Value::Null),
                };
                let (tool, args) = tool_of(tool, &input, self.cwd.as_deref());
                let i = self.calls.len();
                self.by_id.entry(id.to_string()).or_default().push(i);
                self.calls.push(Call {
                    session: String::new(),
                    id: id.to_string(),
                    t: t.unwrap_or(0),
                    tool,
                    args,
                    status: "running".into(),
                    model: None,
                    ..Call::default()
                });
                self.called_at.push(t.unwrap_or(0));
                self.changed.push(seq);
                self.open.insert(i);
                self.finish(id, seq);
            }
            ("response_item", "function_call_output" | "custom_tool_call_output") => {
                if let Some(id) = p.get("call_id").and_then(Value::as_str) {
                    let o = p.get("output").unwrap_or(&Value::Null);
                    // an output may be a string or `{content, success}`
                    let text = text_of(o)
                        .or_else(|| o.get("content").and_then(text_of))
                        .unwrap_or_default();
                    self.outputs.insert(id.to_string(), Output::of(&text, t));
                    self.finish(id, seq);
                }
            }
            ("event_msg", "item_completed") => {
                if let Some(item) = p.get("item").and_then(Value::as_object) {
                    if let Some(id) = item.get("id").and_then(Value::as_str) {
                        let at = |k: &str| p.get(k).and_then(Value::as_i64);
                        self.items.insert(
                            id.to_string(),
                            Item::of(item, at("started_at_ms"), at("completed_at_ms")),
                        );
                        self.finish(id, seq);
                    }
                }
            }
            ("event_msg", "task_started") => {
                self.turn = Turn::Running;
                self.began = t.or(self.began);
            }
            ("event_msg", "task_complete") => {
                self.turn = Turn::Complete;
                self.completed = t;
            }
            ("event_msg", "turn_aborted") => self.turn = Turn::Aborted,
            _ => {}
        }
        if (self.full_model(), self.thread()) != (model, thread.as_deref()) {
            self.all_changed = seq;
        }
    }

    /// Finishes the calls of id `id` from their output and item as they stand (a call without
    /// an output stays open).
    fn finish(&mut self, id: &str, seq: u64) {
        let Some(output) = self.outputs.get(id) else {
            return;
        };
        for &i in self.by_id.get(id).into_iter().flatten() {
            let c = &mut self.calls[i];
            // from the call as its record gave it: an item that came later may move its start
            c.t = self.called_at[i];
            (c.end, c.out, c.exit, c.landed) = (None, None, None, false);
            finish(c, output, self.items.get(id));
            self.open.remove(&i);
            self.changed[i] = seq;
        }
    }

    /// The session read so far (`name`: how `source` strings name it), with the calls that
    /// changed after `since` and those with no output yet.
    pub fn read(&self, name: &str, since: u64) -> Read {
        let mut out = Read {
            problems: self.problems.clone(),
            ..Read::default()
        };
        let Some(meta) = self.meta.as_ref() else {
            if self.any {
                out.problems.push(format!("{name}: no session_meta record"));
            }
            return out;
        };
        let Some(id) = meta.get("id").and_then(Value::as_str) else {
            out.problems
                .push(format!("{name}: session_meta has no \"id\""));
            return out;
        };
        let spawn = meta
            .get("source")
            .and_then(|s| s.get("subagent"))
            .and_then(|s| s.get("thread_spawn"));
        let parent = spawn
            .and_then(|s| s.get("parent_thread_id"))
            .or_else(|| meta.get("parent_thread_id"))
            .and_then(Value::as_str)
            .map(String::from);
        let nickname = meta
            .get("agent_nickname")
            .or_else(|| spawn.and_then(|s| s.get("agent_nickname")))
            .and_then(Value::as_str)
            .map(String::from);
        let in_flight = self.turn == Turn::Running;
        let model = self.full_model();
        let every = self.all_changed > since;
        let mut running = Vec::new();
        let mut calls = Vec::new();
        for (i, c) in self.calls.iter().enumerate() {
            let open = self.open.contains(&i);
            if !every && !open && self.changed[i] <= since {
                continue;
            }
            let mut c = c.clone();
            c.session = id.to_string();
            c.model = model.clone();
            if open {
                if in_flight {
                    running.push(super::transcript::running(&c));
                } else {
                    // the turn ended with this call unanswered: it never will be
                    c.status = "error".into();
                }
            }
            calls.push(c);
        }
        let session = Session {
            id: id.to_string(),
            parent,
            agent: nickname,
            directory: self.cwd.clone(),
            created: self.first,
            updated: self.last_t,
            source: Some(format!("export:{name}")),
            model,
            program: Some(Program::Codex),
            ..Session::default()
        };
        let activity = Activity {
            session: id.to_string(),
            last_progress: self.last_t,
            in_flight,
            running,
            error: (self.turn == Turn::Aborted).then(|| crate::liveness::USER_ABORT.to_string()),
            turn: self.began.map(|start| {
                let mut t = crate::record::Turn {
                    start,
                    // `task_complete`: the turn ended as Codex ends one
                    end: self
                        .completed
                        .filter(|c| self.turn == Turn::Complete && *c >= start),
                    ..crate::record::Turn::default()
                };
                // an open call never landed: all of them, as they were read, count
                super::transcript::land_turn(&mut t, &self.calls);
                t
            }),
        };
        out.sessions.push(Transcript {
            session,
            calls,
            activity,
            mark: self.mark,
        });
        out
    }
}

/// Completes a call from what its output and, when Codex wrote one, its completed item said.
fn finish(c: &mut Call, output: &Output, item: Option<&Item>) {
    c.out = Some(output.out.clone());
    c.end = output.end;
    let kind = Tool::of(&c.tool);
    if let Some(Item {
        started: Some(s),
        ended: Some(e),
        ..
    }) = item
    {
        c.t = *s;
        c.end = Some(*e);
    }
    let item_type = item.and_then(|i| i.kind.as_deref());
    match (kind, item_type) {
        (Tool::Bash, _) => {
            c.exit = item.and_then(|i| i.exit_code).or(output.exited);
            // a command that ran completed whatever its exit; one refused by a hook or
            // aborted never ran
            c.status = if c.exit.is_some() {
                "completed"
            } else {
                "error"
            }
            .into();
            c.landed = c.exit == Some(0)
                && c.args
                    .get(Arg::Command.key())
                    .and_then(Value::as_str)
                    .is_some_and(super::transcript::is_git_commit);
        }
        (Tool::Edit | Tool::Write, Some("FileChange")) | (Tool::Edit | Tool::Write, None) => {
            let ok = match item {
                Some(i) => i.completed,
                None => output.applied,
            };
            c.status = if ok { "completed" } else { "error" }.into();
            c.landed = ok && item.map_or(true, |i| i.changed);
        }
        _ => {
            c.status = if output.aborted { "error" } else { "completed" }.into();
        }
    }
}

/// `Process exited with code N` from an exec output's header.
fn exited_with(text: &str) -> Option<i64> {
    header(text)
        .find_map(|l| l.strip_prefix("Process exited with code "))
        .and_then(|n| n.trim().parse().ok())
}

/// The header lines of an exec output (before `Output:`).
fn header(text: &str) -> impl Iterator<Item = &str> {
    text.lines().take_while(|l| *l != "Output:")
}

/// An output without the header lines that differ on every run of the same command (the
/// random `Chunk ID:` and the `Wall time:`), so equal outputs hash equal.
pub fn steady(text: &str) -> String {
    if !text.lines().any(|l| l == "Output:") {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len());
    let mut in_header = true;
    for l in text.split_inclusive('\n') {
        if in_header {
            let bare = l.trim_end_matches('\n');
            if bare == "Output:" {
                in_header = false;
            } else if bare.starts_with("Chunk ID:") || bare.starts_with("Wall time:") {
                continue;
            }
        }
        out.push_str(l);
    }
    out
}

/// Whether a completed FileChange changed a file: an added or deleted file, or a diff with lines.
fn changed(item: &Map<String, Value>) -> bool {
    let Some(changes) = item.get("changes").and_then(Value::as_object) else {
        return false;
    };
    changes.values().any(|ch| {
        matches!(ch["type"].as_str(), Some("add" | "delete"))
            || ch["unified_diff"].as_str().is_some_and(|d| {
                d.lines().any(|l| {
                    (l.starts_with('+') && !l.starts_with("+++"))
                        || (l.starts_with('-') && !l.starts_with("---"))
                })
            })
    })
}

/// The files a patch names (`*** Update File:`, `*** Add File:`, `*** Delete File:`), each
/// with whether it is added, in order.
fn patch_files(patch: &str) -> Vec<(&str, bool)> {
    patch
        .lines()
        .filter_map(|l| {
            if let Some(f) = l.strip_prefix("*** Add File: ") {
                Some((f.trim(), true))
            } else {
                l.strip_prefix("*** Update File: ")
                    .or_else(|| l.strip_prefix("*** Delete File: "))
                    .map(|f| (f.trim(), false))
            }
        })
        .collect()
}

/// A path as the call means it: relative ones from the session's directory.
fn absolute(path: &str, cwd: Option<&str>) -> String {
    match cwd {
        Some(d) if !path.starts_with('/') => format!("{}/{path}", d.trim_end_matches('/')),
        _ => path.to_string(),
    }
}

/// An argv as one command: a shell's `-c`/`-lc` script as it is, else the words joined.
fn command_of(argv: &[Value]) -> Option<String> {
    let words: Vec<&str> = argv.iter().filter_map(Value::as_str).collect();
    match words.as_slice() {
        [sh, flag, script]
            if sh.ends_with("sh") && flag.starts_with('-') && flag.ends_with('c') =>
        {
            Some(script.to_string())
        }
        [] => None,
        w => Some(w.join(" ")),
    }
}

/// A Codex tool call as the vocabulary has it: its tool's name and its arguments under the
/// vocabulary's keys, scrubbed. exec_command and shell are bash (only what is run and where:
/// how long to wait for output is no part of the call); apply_patch is an edit of the first
/// file it names (a write when it only adds one), the patch hashed; spawn_agent is a task;
/// update_plan the todo list. Any other tool keeps its name, its arguments hashed.
pub fn tool_of(name: &str, input: &Value, cwd: Option<&str>) -> (String, Map<String, Value>) {
    let empty = Map::new();
    let o = input.as_object().unwrap_or(&empty);
    let mut args = Map::new();
    let mut put = |k: &str, v: Option<&Value>| {
        if let Some(v) = v.filter(|v| !v.is_null()) {
            args.insert(k.to_string(), v.clone());
        }
    };
    let tool = match name {
        "exec_command" => {
            put(Arg::Command.key(), o.get("cmd"));
            put(Arg::Workdir.key(), o.get("workdir"));
            Tool::Bash.name()
        }
        "shell" | "container.exec" | "local_shell" => {
            let cmd = match o.get("command") {
                Some(Value::Array(argv)) => command_of(argv).map(Value::from),
                other => other.cloned(),
            };
            put(Arg::Command.key(), cmd.as_ref());
            put(Arg::Workdir.key(), o.get("workdir"));
            put(Arg::Timeout.key(), o.get("timeout_ms"));
            Tool::Bash.name()
        }
        "apply_patch" => {
            let patch = input
                .as_str()
                .or_else(|| o.get("input").and_then(Value::as_str))
                .unwrap_or("");
            let files = patch_files(patch);
            let tool = match files.as_slice() {
                [(_, true)] => Tool::Write,
                _ => Tool::Edit,
            };
            if let Some((f, _)) = files.first() {
                put(Arg::FilePath.key(), Some(&Value::from(absolute(f, cwd))));
            }
            put(Arg::PatchText.key(), Some(&Value::from(patch)));
            tool.name()
        }
        "spawn_agent" => {
            put(Arg::Prompt.key(), o.get("message"));
            put(Arg::SubagentType.key(), o.get("agent_type"));
            Tool::Task.name()
        }
        "update_plan" => {
            put(Arg::Todos.key(), o.get("plan"));
            Tool::TodoWrite.name()
        }
        _ => {
            args = o.clone();
            None
        }
    };
    let tool = tool.map_or_else(|| name.to_string(), String::from);
    (tool, scrub_args(&args))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const TID: &str = "01a2424e-bb0a-7271-9868-8995912d9079";

    fn rec(t: &str, ty: &str, payload: Value) -> String {
        format!(
            "{}\n",
            json!({"timestamp": t, "type": ty, "payload": payload})
        )
    }

    fn meta(extra: Value) -> String {
        let mut p = json!({"id": TID, "session_id": TID, "cwd": "/p", "originator": "codex_exec",
                           "cli_version": "0.171.0", "source": "exec", "model_provider": "sim"});
        p.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        rec("2026-12-04T18:26:25.797Z", "session_meta", p)
    }

    fn exec(t: &str, id: &str, cmd: &str) -> String {
        rec(
            t,
            "response_item",
            json!({"type": "function_call", "name": "exec_command",
            "arguments": json!({"cmd": cmd, "yield_time_ms": 10000}).to_string(), "call_id": id}),
        )
    }

    fn ran(t: &str, id: &str, cmd: &str, exit: i64, chunk: &str, out: &str, at: i64) -> String {
        let item = rec(
            t,
            "event_msg",
            json!({"type": "item_completed", "item": {"type": "CommandExecution",
            "id": id, "command": ["/bin/bash", "-lc", cmd], "status": if exit == 0 {"completed"} else {"failed"},
            "exit_code": exit}, "started_at_ms": at, "completed_at_ms": at + 100}),
        );
        let output = rec(
            t,
            "response_item",
            json!({"type": "function_call_output", "call_id": id,
            "output": format!("Chunk ID: {chunk}\nWall time: 0.00{chunk} seconds\nProcess exited with code {exit}\nOriginal token count: 9\nOutput:\n{out}")}),
        );
        item + &output
    }

    fn start() -> String {
        meta(json!({}))
            + &rec(
                "2026-12-04T18:26:25.798Z",
                "event_msg",
                json!({"type": "task_started", "turn_id": "tu1"}),
            )
            + &rec(
                "2026-12-04T18:26:25.825Z",
                "turn_context",
                json!({"turn_id": "tu1", "cwd": "/p", "model": "gpt-5.5"}),
            )
    }

    const TB: &str = "Traceback (most recent call last):\nZeroDivisionError: division by zero\n";

    #[test]
    fn calls_read_as_the_vocabulary_has_them_and_equal_outputs_hash_equal() {
        let patch = "*** Begin Patch\n*** Update File: src/calc.py\n@@\n-    return 1\n+    return 0\n*** End Patch\n";
        let text = start()
            + &exec(
                "2026-12-04T18:26:26.348Z",
                "call_1",
                "python3 tests/test_calc.py",
            )
            + &ran(
                "2026-12-04T18:26:26.462Z",
                "call_1",
                "python3 tests/test_calc.py",
                1,
                "3e6c6a",
                TB,
                1_796_408_786_400,
            )
            + &exec(
                "2026-12-04T18:26:26.546Z",
                "call_2",
                "python3 tests/test_calc.py",
            )
            + &ran(
                "2026-12-04T18:26:26.651Z",
                "call_2",
                "python3 tests/test_calc.py",
                1,
                "a621cd",
                TB,
                1_796_408_786_600,
            )
            + &rec(
                "2026-12-04T18:26:27.254Z",
                "response_item",
                json!({"type": "custom_tool_call", "name": "apply_patch",
                   "input": patch, "call_id": "call_3"}),
            )
            + &rec(
                "2026-12-04T18:26:27.270Z",
                "event_msg",
                json!({"type": "item_completed", "item": {"type": "FileChange",
                   "id": "call_3", "changes": {"/p/src/calc.py": {"type": "update", "unified_diff": "@@ -8 +8 @@\n-    return 1\n+    return 0\n"}},
                   "status": "completed"}, "started_at_ms": 1_796_408_787_269_i64, "completed_at_ms": 1_796_408_787_270_i64}),
            )
            + &rec(
                "2026-12-04T18:26:27.273Z",
                "response_item",
                json!({"type": "custom_tool_call_output", "call_id": "call_3",
                   "output": "Exit code: 0\nWall time: 0 seconds\nOutput:\nSuccess. Updated the following files:\nM src/calc.py\n"}),
            )
            + &rec(
                "2026-12-04T18:26:27.346Z",
                "response_item",
                json!({"type": "custom_tool_call", "name": "apply_patch",
                   "input": "*** Begin Patch\n*** Update File: src/calc.py\n@@\n-nothere\n+x\n*** End Patch\n", "call_id": "call_4"}),
            )
            + &rec(
                "2026-12-04T18:26:27.364Z",
                "response_item",
                json!({"type": "custom_tool_call_output", "call_id": "call_4",
                   "output": "apply_patch verification failed: Failed to find expected lines in /p/src/calc.py:\nnothere"}),
            )
            + &exec(
                "2026-12-04T18:26:27.610Z",
                "call_5",
                "git add -A && git commit -qm 'fix'",
            )
            + &ran(
                "2026-12-04T18:26:27.687Z",
                "call_5",
                "git add -A && git commit -qm 'fix'",
                0,
                "d61533",
                "",
                1_796_408_787_650,
            )
            + &rec(
                "2026-12-04T18:26:27.900Z",
                "event_msg",
                json!({"type": "task_complete", "turn_id": "tu1"}),
            );
        let r = read("r.jsonl", &text);
        assert!(r.problems.is_empty(), "{:?}", r.problems);
        let [t] = &r.sessions[..] else { panic!() };
        let s = &t.session;
        assert_eq!(
            (s.id.as_str(), s.parent.as_deref(), s.agent.as_deref()),
            (TID, None, None)
        );
        assert_eq!(
            (s.directory.as_deref(), s.model.as_deref()),
            (Some("/p"), Some("sim/gpt-5.5"))
        );
        assert_eq!(s.program, Some(Program::Codex));
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
        let patched = json!({"filePath": "/p/src/calc.py", "patchText": hash_str(patch)});
        assert_eq!(
            got,
            [
                (
                    "bash",
                    json!({"command": "python3 tests/test_calc.py"}),
                    "completed",
                    false,
                    Some(1)
                ),
                (
                    "bash",
                    json!({"command": "python3 tests/test_calc.py"}),
                    "completed",
                    false,
                    Some(1)
                ),
                ("edit", patched, "completed", true, None),
                (
                    "edit",
                    json!({"filePath": "/p/src/calc.py",
                                "patchText": hash_str("*** Begin Patch\n*** Update File: src/calc.py\n@@\n-nothere\n+x\n*** End Patch\n")}),
                    "error",
                    false,
                    None
                ),
                (
                    "bash",
                    json!({"command": "git add -A && git commit -qm 'fix'"}),
                    "completed",
                    true,
                    Some(0)
                ),
            ]
        );
        // the same output under two random chunk ids and wall times: one hash
        assert_eq!(t.calls[0].out, t.calls[1].out);
        assert!(t.calls[0].out.is_some());
        assert_eq!(
            (t.calls[0].t, t.calls[0].end),
            (1_796_408_786_400, Some(1_796_408_786_500))
        );
        assert!(!t.activity.in_flight && t.activity.error.is_none());
        // issue 41, done: the turn from `task_started` to `task_complete`, with what it landed
        let turn = t.activity.turn.clone().unwrap();
        assert_eq!(
            (turn.start, turn.end, turn.landed),
            (1_796_408_785_798, Some(1_796_408_787_900), 2)
        );
        let all = serde_json::to_string(&t.calls).unwrap();
        assert!(
            !all.contains("ZeroDivision") && !all.contains("return 0"),
            "{all}"
        );
    }

    #[test]
    fn a_subagent_names_its_parent_and_a_killed_turn_is_in_flight() {
        let sub = json!({"id": "child", "parent_thread_id": TID, "source": {"subagent": {"thread_spawn":
                   {"parent_thread_id": TID, "depth": 1, "agent_nickname": "Hegel"}}}, "agent_nickname": "Hegel"});
        let mut text = meta(json!({})).replace(TID, "child");
        text = text.replace(
            "\"source\":\"exec\"",
            &format!("\"source\":{}", sub["source"]),
        );
        text += &rec(
            "2026-12-04T18:26:35.952Z",
            "event_msg",
            json!({"type": "task_started"}),
        );
        text += &exec(
            "2026-12-04T18:26:36.125Z",
            "call_s0",
            "grep -n mean src/calc.py",
        );
        let r = read("c.jsonl", &text);
        let t = &r.sessions[0];
        assert_eq!(
            (t.session.id.as_str(), t.session.parent.as_deref()),
            ("child", Some(TID))
        );
        assert_eq!(t.session.agent.as_deref(), Some("Hegel"));
        assert!(t.activity.in_flight);
        assert_eq!(t.activity.running.len(), 1);
        assert_eq!(t.calls[0].status, "running");
    }

    #[test]
    fn an_interrupted_turn_ended_by_the_user_and_its_aborted_call_is_an_error() {
        let text = start()
            + &exec(
                "2026-12-04T18:27:24.106Z",
                "call_64",
                "python3 tests/test_calc.py",
            )
            + &rec(
                "2026-12-04T18:27:24.111Z",
                "response_item",
                json!({"type": "function_call_output",
                   "call_id": "call_64", "output": "aborted before dispatch"}),
            )
            + &rec(
                "2026-12-04T18:27:24.119Z",
                "event_msg",
                json!({"type": "turn_aborted", "reason": "interrupted"}),
            );
        let r = read("i.jsonl", &text);
        let t = &r.sessions[0];
        assert_eq!(
            (t.calls[0].status.as_str(), t.calls[0].exit),
            ("error", None)
        );
        assert!(!t.activity.in_flight);
        assert_eq!(t.activity.error.as_deref(), Some("MessageAbortedError"));
    }

    #[test]
    fn only_the_header_lines_that_change_every_run_are_taken_out() {
        let a = "Chunk ID: ae0897\nWall time: 0.0000 seconds\nProcess exited with code 0\nOutput:\nWall time: 3\n";
        assert_eq!(
            steady(a),
            "Process exited with code 0\nOutput:\nWall time: 3\n"
        );
        assert_eq!(steady("Wall time: 1"), "Wall time: 1");
        assert_eq!(exited_with(a), Some(0));
    }

    #[test]
    fn other_tools_map_onto_the_vocabulary() {
        let (t, a) = tool_of(
            "shell",
            &json!({"command": ["bash", "-lc", "ls src"], "timeout_ms": 5000}),
            None,
        );
        assert_eq!(
            (t.as_str(), Value::Object(a)),
            ("bash", json!({"command": "ls src", "timeout": 5000}))
        );
        let (t, a) = tool_of(
            "apply_patch",
            &json!("*** Begin Patch\n*** Add File: NOTES.md\n+x\n*** End Patch"),
            Some("/p"),
        );
        assert_eq!(
            (t.as_str(), a["filePath"].as_str()),
            ("write", Some("/p/NOTES.md"))
        );
        let (t, a) = tool_of("spawn_agent", &json!({"message": "find mean"}), None);
        assert_eq!(
            (t.as_str(), Value::Object(a)),
            ("task", json!({"prompt": hash_str("find mean")}))
        );
        let (t, a) = tool_of("view_image", &json!({"path": "/p/a.png"}), None);
        assert_eq!(
            (t.as_str(), Value::Object(a)),
            ("view_image", json!({"path": "/p/a.png"}))
        );
    }
    /// Issue 39: a rollout followed as Codex writes it, in pieces cut at arbitrary bytes (in a
    /// line, in a character), read after every piece with the calls that changed since the
    /// last read: what follow mode has written then (each call's latest line, the activity, the
    /// session) is what a whole read of the file as it is gives, and each byte is parsed once.
    #[test]
    fn a_rollout_read_as_it_grows_is_what_a_whole_read_gives_at_every_cut() {
        use crate::record::to_line;
        use crate::sources::transcript::grow::{append, cuts, fixture};
        let main = fixture("codex/rollout-main.jsonl");
        let meta = &main[..=main.iter().position(|&b| b == b'\n').unwrap()];
        let killed = |tail: &str| [meta, &fixture(tail)].concat();
        let cases = [
            ("rollout-main", main.clone()),
            ("subagent-parent", fixture("codex/rollout-subagent-parent.jsonl")),
            ("subagent-child", fixture("codex/rollout-subagent-child.jsonl")),
            ("sigkill", killed("codex/tail-sigkill.jsonl")),
            ("sigint", killed("codex/tail-sigint.jsonl")),
            // the model switched (`/model` in the TUI): every call carries the new one
            ("model", [&main[..], br#"{"timestamp":"2026-12-04T18:26:30.000Z","type":"turn_context","payload":{"turn_id":"tu2","cwd":"/p","model":"gpt-5.6"}}"#, b"\n"].concat()),
        ];
        for (seed, (case, bytes)) in cases.into_iter().enumerate() {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("r.jsonl");
            let mut tail = Tail::<Parser>::default();
            let mut at = 0;
            let mut mark = 0;
            let mut written: HashMap<String, String> = HashMap::new();
            let mut activity = String::new();
            let mut parsed = 0;
            for cut in cuts(&bytes, 150, seed as u64 + 3) {
                append(&path, &bytes[at..cut]);
                at = cut;
                tail.update(&path, "r.jsonl").unwrap();
                parsed += tail.parsed;
                let r = tail.lines().now("r.jsonl").read("r.jsonl", mark);
                let mut whole = Tail::<Parser>::default();
                whole.update(&path, "r.jsonl").unwrap();
                let w = whole.lines().now("r.jsonl").read("r.jsonl", 0);
                assert_eq!(r.problems, w.problems, "{case} at {cut}");
                assert_eq!(r.sessions.len(), w.sessions.len(), "{case} at {cut}");
                let (Some(t), Some(wt)) = (r.sessions.first(), w.sessions.first()) else {
                    continue;
                };
                mark = t.mark;
                for c in &t.calls {
                    written.insert(c.id.clone(), to_line("call", c).unwrap());
                }
                activity = to_line("activity", &t.activity).unwrap();
                assert_eq!(t.session, wt.session, "{case} at {cut}");
                assert_eq!(
                    activity,
                    to_line("activity", &wt.activity).unwrap(),
                    "{case} at {cut}"
                );
                let want: HashMap<String, String> = wt
                    .calls
                    .iter()
                    .map(|c| (c.id.clone(), to_line("call", c).unwrap()))
                    .collect();
                assert_eq!(written, want, "{case} at {cut}");
            }
            assert_eq!(parsed as usize, bytes.len(), "{case}");
            assert!(!written.is_empty() && !activity.is_empty(), "{case}");
        }
    }
}
