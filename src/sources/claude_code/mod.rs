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

pub mod home;

use super::transcript::{ms, parse_text, text_of, Parse, Read, Tail, Transcript};
use crate::record::{Activity, Call, Program, Session};
use crate::scrub::{hash_str, scrub_args};
use crate::vocab::{Arg, Tool};
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
pub fn read_with_subagents(path: &Path, name: &str) -> Result<Read, String> {
    let mut f = SessionFiles::default();
    f.update(path, name)?;
    Ok(f.read(&|_| Some(0)))
}

/// Reads one main transcript (`name`: how `source` strings name it) and its subagents' (each
/// the child of the session whose call started it, else of the main session).
pub fn read(name: &str, text: &str, subagents: &[Subagent]) -> Read {
    let main: Parser = parse_text(name, text);
    let subs: Vec<(Parser, Meta)> = subagents
        .iter()
        .map(|s| {
            let meta = Meta {
                agent_type: s.agent_type.clone(),
                tool_use_id: s.tool_use_id.clone(),
            };
            (parse_text(&s.name, s.text), meta)
        })
        .collect();
    let subs: Vec<(&str, &Parser, &Meta)> = subagents
        .iter()
        .zip(&subs)
        .map(|(s, (p, m))| (s.name.as_str(), p, m))
        .collect();
    assemble((name, &main), &subs, &|_| Some(0))
}

/// What a subagent's `.meta.json` says that the reading uses.
#[derive(Debug, Default, Clone, PartialEq)]
struct Meta {
    agent_type: Option<String>,
    tool_use_id: Option<String>,
}

impl Meta {
    /// The `.meta.json` beside a subagent's transcript (nothing when there is none, or it is
    /// not JSON).
    fn of(file: &Path) -> Meta {
        let v: Value = std::fs::read_to_string(file.with_extension("meta.json"))
            .ok()
            .and_then(|m| serde_json::from_str(&m).ok())
            .unwrap_or_default();
        Meta {
            agent_type: v["agentType"].as_str().map(String::from),
            tool_use_id: v["toolUseId"].as_str().map(String::from),
        }
    }
}

/// A main transcript and its subagents' files, read as they grow: each change reads only what
/// was appended to each file ([`Tail`]); the subagents' folder and their `.meta.json` are
/// looked at again on every update.
#[derive(Default)]
pub struct SessionFiles {
    name: String,
    main: Tail<Parser>,
    /// By file, in path order, with the name problems give it and its meta.
    subs: std::collections::BTreeMap<std::path::PathBuf, (String, Tail<Parser>, Meta)>,
    /// Subagents' files that could not be read at the last update.
    problems: Vec<String>,
}

impl SessionFiles {
    /// Reads what was appended to the main transcript at `path` (named `name`) and to its
    /// subagents' files since the last update. `Err`: the main transcript cannot be read.
    pub fn update(&mut self, path: &Path, name: &str) -> Result<(), String> {
        self.name = name.to_string();
        self.main
            .update(path, name)
            .map_err(|e| format!("{name}: cannot read: {e}"))?;
        let dir = path.with_extension("").join("subagents");
        let files = super::transcript::jsonl_files(&dir).unwrap_or_default();
        self.subs.retain(|f, _| files.contains(f));
        self.problems.clear();
        for f in files {
            let fname = f.display().to_string();
            let (_, tail, meta) = self
                .subs
                .entry(f.clone())
                .or_insert_with(|| (fname.clone(), Tail::default(), Meta::default()));
            match tail.update(&f, &fname) {
                Ok(()) => *meta = Meta::of(&f),
                Err(e) => {
                    self.problems.push(format!("{fname}: cannot read: {e}"));
                    self.subs.remove(&f);
                }
            }
        }
        Ok(())
    }

    /// Whether one of its files is session `id`'s.
    pub fn holds(&self, id: &str) -> bool {
        let is = |t: &Tail<Parser>| t.lines().parser().id().as_deref() == Some(id);
        is(&self.main) || self.subs.values().any(|(_, t, _)| is(t))
    }

    /// Bytes parsed by the last update, over all its files.
    pub fn parsed(&self) -> u64 {
        self.main.parsed + self.subs.values().map(|(_, t, _)| t.parsed).sum::<u64>()
    }

    /// The sessions read so far, each with the calls that changed after the mark `want` gives
    /// for its id (`None`: that session is not wanted, though it is read for its subagents'
    /// parents).
    pub fn read(&self, want: &dyn Fn(&str) -> Option<u64>) -> Read {
        let main = self.main.lines().now(&self.name);
        let subs: Vec<_> = self
            .subs
            .values()
            .map(|(n, t, m)| (n.as_str(), t.lines().now(n), m))
            .collect();
        let subs: Vec<(&str, &Parser, &Meta)> =
            subs.iter().map(|(n, p, m)| (*n, &**p, *m)).collect();
        let mut r = assemble((&self.name, &main), &subs, want);
        r.problems.splice(0..0, self.problems.iter().cloned());
        r
    }
}

/// The sessions of a main transcript and its subagents, each subagent the child of the session
/// whose call started it (the main one, or a subagent before it), else of the main session.
fn assemble(
    (name, main): (&str, &Parser),
    subs: &[(&str, &Parser, &Meta)],
    want: &dyn Fn(&str) -> Option<u64>,
) -> Read {
    let mut out = Read::default();
    let main_id = main.id();
    let mut read: Vec<&Parser> = Vec::new();
    if let Some(t) = main.transcript(name, None, want, &mut out.problems) {
        out.sessions.extend(t);
        read.push(main);
    }
    for &(name, p, meta) in subs {
        if p.id().is_none() {
            // a subagent's file with no record naming its session: a problem, no session
            p.transcript(name, None, want, &mut out.problems);
            continue;
        }
        let started_by = meta
            .tool_use_id
            .as_deref()
            .and_then(|id| read.iter().find(|o| o.calls_by_id.contains_key(id)))
            .and_then(|o| o.id());
        let t = p.transcript(name, meta.agent_type.clone(), want, &mut out.problems);
        read.push(p);
        let Some(mut t) = t.flatten() else {
            continue;
        };
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
#[derive(PartialEq, Clone, Default)]
enum Last {
    #[default]
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

/// The reading of one transcript (a main session's or a subagent's), record by record.
#[derive(Clone, Default)]
pub struct Parser {
    any: bool,
    sid: Option<String>,
    agent_id: Option<String>,
    cwd: Option<String>,
    model: Option<String>,
    first: Option<i64>,
    last_t: Option<i64>,
    calls: Vec<Call>,
    /// The seq of the line that last changed each call.
    changed: Vec<u64>,
    /// Every call's index by its id (the latest, for an id given twice).
    calls_by_id: HashMap<String, usize>,
    /// The calls awaiting their result, by id.
    pending: HashMap<String, usize>,
    /// The calls no result finished yet (pending ones, and one whose id a later call took):
    /// what the end of the transcript says of them may change with every read.
    open: std::collections::BTreeSet<usize>,
    last: Last,
    /// The turn: when its prompt came, when its reply ended it.
    prompted: Option<i64>,
    replied: Option<i64>,
    /// The subagent type its replies are attributed to (its `.meta.json` says it too).
    attribution: Option<String>,
    problems: Vec<String>,
    /// The seq of the last line read.
    mark: u64,
}

impl Parse for Parser {
    fn line(&mut self, name: &str, n: usize, seq: u64, rec: Result<Value, String>) {
        self.mark = seq;
        let r = match rec {
            Ok(r) => r,
            Err(problem) => {
                self.problems.push(problem);
                return;
            }
        };
        self.record(name, n, seq, &r);
    }
}

impl Parser {
    /// The session this transcript is (`None`: no record named it yet).
    fn id(&self) -> Option<String> {
        let sid = self.sid.as_deref()?;
        Some(session_id(sid, self.agent_id.as_deref()))
    }

    fn record(&mut self, name: &str, n: usize, seq: u64, r: &Value) {
        self.any = true;
        let Some(ty) = r.get("type").and_then(Value::as_str) else {
            self.problems
                .push(format!("{name}:{n}: a record with no \"type\""));
            return;
        };
        if self.sid.is_none() {
            self.sid = r.get("sessionId").and_then(Value::as_str).map(String::from);
        }
        if self.agent_id.is_none() {
            self.agent_id = r.get("agentId").and_then(Value::as_str).map(String::from);
        }
        if let Some(c) = r.get("cwd").and_then(Value::as_str) {
            self.cwd = Some(c.to_string());
        }
        let t = ms(r.get("timestamp"));
        if t.is_some() {
            self.first = self.first.or(t);
            self.last_t = t;
        }
        match ty {
            "assistant" => {
                let msg = &r["message"];
                if self.agent_id.is_some() && self.attribution.is_none() {
                    self.attribution = r
                        .get("attributionAgent")
                        .and_then(Value::as_str)
                        .map(String::from);
                }
                if let Some(m) = msg.get("model").and_then(Value::as_str) {
                    // `<synthetic>` marks replies Claude Code wrote itself (an API error)
                    if !m.starts_with('<') {
                        self.model = Some(m.to_string());
                    }
                }
                let Some(blocks) = msg.get("content").and_then(Value::as_array) else {
                    self.problems.push(format!(
                        "{name}:{n}: an assistant record with no content list"
                    ));
                    return;
                };
                let mut calls_tools = false;
                for b in blocks.iter().filter(|b| b["type"] == "tool_use") {
                    calls_tools = true;
                    let (Some(id), Some(tool)) = (b["id"].as_str(), b["name"].as_str()) else {
                        self.problems
                            .push(format!("{name}:{n}: a tool_use with no id or name"));
                        continue;
                    };
                    let empty = Map::new();
                    let input = b["input"].as_object().unwrap_or(&empty);
                    let (tool, args) = tool_of(tool, input);
                    let i = self.calls.len();
                    self.pending.insert(id.to_string(), i);
                    self.calls_by_id.insert(id.to_string(), i);
                    self.open.insert(i);
                    self.changed.push(seq);
                    self.calls.push(Call {
                        session: session_id(
                            self.sid.as_deref().unwrap_or(""),
                            self.agent_id.as_deref(),
                        ),
                        id: id.to_string(),
                        t: t.unwrap_or(0),
                        tool,
                        args,
                        status: "running".into(),
                        model: self.model.clone(),
                        ..Call::default()
                    });
                }
                let stop = msg.get("stop_reason").and_then(Value::as_str);
                self.last = if calls_tools || stop == Some("tool_use") || stop.is_none() {
                    Last::Going
                } else {
                    self.replied = t;
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
                self.last = if interrupted {
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
                    self.prompted = t.or(self.prompted);
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
                    let Some(i) = b["tool_use_id"]
                        .as_str()
                        .and_then(|id| self.pending.remove(id))
                    else {
                        continue;
                    };
                    finish(&mut self.calls[i], b, structured, t);
                    self.open.remove(&i);
                    self.changed[i] = seq;
                }
            }
            "attachment" if r["attachment"]["type"] == "hook_stopped_continuation" => {
                self.last = Last::HookStopped;
            }
            // bookkeeping (2.1.332), and a record of a kind this reader does not know that
            // carries no tool call: nothing to read in either
            _ if !carries_calls(r) => {}
            _ => self.problems.push(format!(
                "{name}:{n}: a {ty:?} record carries tool calls, a kind of record this reader \
                 does not know (Claude Code {KNOWN_VERSIONS} is): its calls are not read"
            )),
        }
    }

    /// The session read so far (`name`: how `source` strings name its file; `agent_type`: what
    /// a subagent's meta says it is), with the calls that changed after the mark `want` gives
    /// its id and those no result finished; its problems added to `problems`. `None`: no record
    /// named its session; `Some(None)`: not wanted.
    fn transcript(
        &self,
        name: &str,
        agent_type: Option<String>,
        want: &dyn Fn(&str) -> Option<u64>,
        problems: &mut Vec<String>,
    ) -> Option<Option<Transcript>> {
        problems.extend(self.problems.iter().cloned());
        let Some(sid) = self.sid.clone() else {
            if self.any {
                problems.push(format!("{name}: no record names its session"));
            }
            return None;
        };
        let id = session_id(&sid, self.agent_id.as_deref());
        let Some(since) = want(&id) else {
            return Some(None);
        };
        let in_flight = self.last == Last::Going;
        let mut calls: Vec<Call> = Vec::new();
        let mut running = Vec::new();
        for (i, c) in self.calls.iter().enumerate() {
            if self.changed[i] <= since && !self.open.contains(&i) {
                continue;
            }
            let mut c = c.clone();
            if self.pending.get(&c.id) == Some(&i) {
                if in_flight {
                    running.push(super::transcript::running(&c));
                } else {
                    // the turn ended (interrupted, stopped) with this call unanswered: it
                    // never will be
                    c.status = "error".into();
                }
            }
            calls.push(c);
        }
        running.sort_by_key(|r| r.t);
        let session = Session {
            id: id.clone(),
            // a subagent read alone is the child of the session it names
            parent: self.agent_id.as_ref().map(|_| sid.clone()),
            agent: agent_type.or_else(|| self.attribution.clone()),
            directory: self.cwd.clone(),
            created: self.first,
            updated: self.last_t,
            source: Some(format!("export:{name}")),
            model: self.model.clone(),
            program: Some(Program::ClaudeCode),
            ..Session::default()
        };
        let last = &self.last;
        let activity = Activity {
            session: id,
            last_progress: self.last_t,
            in_flight,
            running,
            error: (*last == Last::Interrupted).then(|| crate::liveness::USER_ABORT.to_string()),
            turn: self.prompted.map(|start| {
                let mut turn = crate::record::Turn {
                    start,
                    // the turn's last record is the reply that ended it (`end_turn`, ...)
                    end: self
                        .replied
                        .filter(|r| *last == Last::ReplyDone && *r >= start),
                    ..crate::record::Turn::default()
                };
                // a call left open never landed: all of them, as they were read, count
                super::transcript::land_turn(&mut turn, &self.calls);
                turn
            }),
        };
        Some(Some(Transcript {
            session,
            calls,
            activity,
            mark: self.mark,
        }))
    }
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
                        .is_some_and(super::transcript::is_git_commit)
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
        "TodoWrite" => Tool::TodoWrite.name(),
        _ => None,
    };
    let renamed: Map<String, Value> = input
        .iter()
        .map(|(k, v)| {
            let k = match (name, k.as_str()) {
                (_, "file_path" | "notebook_path") => Arg::FilePath.key(),
                (_, "old_string") => Arg::OldString.key(),
                (_, "new_string") => Arg::NewString.key(),
                (_, "replace_all") => Arg::ReplaceAll.key(),
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
            [crate::record::Running {
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
    /// Issue 39: a session followed as Claude Code writes it, its main transcript and its
    /// subagent's each growing in pieces cut at arbitrary bytes (in a line, in a character),
    /// read after every piece with the calls that changed since the last read: what follow
    /// mode has written then (each call's latest line, the activity, the sessions) is what a
    /// whole read of the files as they are gives, and each byte is parsed once.
    #[test]
    fn a_session_read_as_it_grows_is_what_a_whole_read_gives_at_every_cut() {
        use crate::record::to_line;
        use crate::sources::transcript::grow::{append, cuts, fixture};
        let cases: [(&str, Option<&str>); 4] = [
            (
                "claude-code/transcript-main.jsonl",
                Some("claude-code/transcript-subagent.jsonl"),
            ),
            ("claude-code/tail-sigkill.jsonl", None),
            ("claude-code/tail-sigint.jsonl", None),
            ("claude-code/tail-hook-deny-and-halt.jsonl", None),
        ];
        for (seed, (main, sub)) in cases.into_iter().enumerate() {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("s.jsonl");
            let sub_path = dir.path().join("s/subagents/agent-a.jsonl");
            let main_bytes = fixture(main);
            let sub_bytes = sub.map(fixture).unwrap_or_default();
            let main_cuts = cuts(&main_bytes, 150, seed as u64 + 7);
            let sub_cuts = cuts(&sub_bytes, 60, seed as u64 + 99);
            let mut files = SessionFiles::default();
            let (mut main_at, mut sub_at) = (0, 0);
            let mut marks: HashMap<String, u64> = HashMap::new();
            let mut written: HashMap<(String, String), String> = HashMap::new();
            let mut activity: HashMap<String, String> = HashMap::new();
            let mut parsed = 0;
            let steps = main_cuts.len().max(sub_cuts.len());
            for step in 0..steps {
                let m = main_cuts[step.min(main_cuts.len() - 1)];
                append(&path, &main_bytes[main_at..m]);
                main_at = m;
                if sub.is_some() {
                    let c = sub_cuts[step.min(sub_cuts.len() - 1)].min(sub_bytes.len());
                    if step == 1 {
                        std::fs::write(
                            sub_path.with_extension("meta.json"),
                            fixture("claude-code/transcript-subagent.meta.json"),
                        )
                        .unwrap();
                    }
                    append(&sub_path, &sub_bytes[sub_at..c]);
                    sub_at = c;
                }
                files.update(&path, "s.jsonl").unwrap();
                parsed += files.parsed();
                let r = files.read(&|id| Some(marks.get(id).copied().unwrap_or(0)));
                for t in &r.sessions {
                    marks.insert(t.session.id.clone(), t.mark);
                    for c in &t.calls {
                        written.insert(
                            (c.session.clone(), c.id.clone()),
                            to_line("call", c).unwrap(),
                        );
                    }
                    activity.insert(
                        t.session.id.clone(),
                        to_line("activity", &t.activity).unwrap(),
                    );
                }
                let mut whole = SessionFiles::default();
                whole.update(&path, "s.jsonl").unwrap();
                let w = whole.read(&|_| Some(0));
                assert_eq!(r.problems, w.problems, "{main} at {m}");
                let sessions = |r: &Read| -> Vec<Session> {
                    r.sessions.iter().map(|t| t.session.clone()).collect()
                };
                assert_eq!(sessions(&r), sessions(&w), "{main} at {m}");
                let mut want = HashMap::new();
                for t in &w.sessions {
                    for c in &t.calls {
                        want.insert(
                            (c.session.clone(), c.id.clone()),
                            to_line("call", c).unwrap(),
                        );
                    }
                    assert_eq!(
                        activity[&t.session.id],
                        to_line("activity", &t.activity).unwrap(),
                        "{main} at {m}"
                    );
                }
                assert_eq!(written, want, "{main} at {m}");
            }
            assert_eq!(
                parsed as usize,
                main_bytes.len() + sub_bytes.len(),
                "{main}"
            );
            assert!(!written.is_empty(), "{main}");
            if sub.is_some() {
                assert_eq!(activity.len(), 2);
            }
        }
    }
}
