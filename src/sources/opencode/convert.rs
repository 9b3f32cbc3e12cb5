//! Turns opencode 1.18.x objects (sessions, and messages with their parts, the same shapes
//! over HTTP and in the database) into contract-v1 records. Any shape this module does not
//! recognise is an error whose text becomes a `blind` record's reason, never "no calls".

use crate::record::{Call, Session};
use crate::scrub::scrub_args;
use crate::sources::transcript::is_git_commit;
use crate::vocab::{Arg, Lands, Tool, BASH_TIMEOUT_MS};
use serde_json::{Map, Value};
use std::collections::{HashMap, HashSet};

/// opencode versions whose shapes these readers were proven against.
pub const KNOWN_VERSIONS: &str = "1.18.x (tested on 1.18.33)";

/// What reading one of opencode's shapes gives: the value, or why the shape is not as expected.
type ShapeResult<T> = Result<T, String>;

fn obj<'a>(v: &'a Value, what: &str) -> ShapeResult<&'a Map<String, Value>> {
    v.as_object()
        .ok_or_else(|| format!("{what} is not an object"))
}

fn str_field<'a>(o: &'a Map<String, Value>, key: &str, what: &str) -> ShapeResult<&'a str> {
    o.get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| format!("{what} has no string {key:?}"))
}

/// `provider/model` from `{providerID, id|modelID}`.
fn model_of(v: Option<&Value>) -> Option<String> {
    let o = v?.as_object()?;
    let p = o.get("providerID")?.as_str()?;
    let m = o.get("id").or_else(|| o.get("modelID"))?.as_str()?;
    Some(format!("{p}/{m}"))
}

/// A session record from an API `Session` object.
pub fn session_of(v: &Value, status: Option<&str>, source: &str) -> ShapeResult<Session> {
    let o = obj(v, "session")?;
    let id = str_field(o, "id", "session")?;
    let time = o
        .get("time")
        .and_then(Value::as_object)
        .ok_or_else(|| format!("session {id} has no \"time\" object"))?;
    Ok(Session {
        id: id.to_string(),
        parent: o.get("parentID").and_then(Value::as_str).map(String::from),
        agent: o.get("agent").and_then(Value::as_str).map(String::from),
        // opencode writes titles from the first prompt: mask its secrets, read as prose
        title: o
            .get("title")
            .and_then(Value::as_str)
            .map(crate::scrub::mask_title),
        directory: o.get("directory").and_then(Value::as_str).map(String::from),
        created: time.get("created").and_then(Value::as_i64),
        updated: time.get("updated").and_then(Value::as_i64),
        status: status.map(String::from),
        source: Some(source.to_string()),
        model: model_of(o.get("model")),
        ..Session::default()
    })
}

/// Reads the total line count of files on disk, once per path, for reads whose metadata lacks
/// it. Only regular files up to [`LINES_MAX_BYTES`], opened without blocking (a FIFO or a
/// device named by a read must neither hang the reader nor fill its memory), counted as they
/// stream in.
#[derive(Default)]
pub struct LineCache(HashMap<String, Option<i64>>);

/// The largest file whose lines are counted (32 MiB); a larger one gets no `file_lines`.
pub const LINES_MAX_BYTES: u64 = 32 << 20;

/// Lines of a regular file (a last line without a newline counts), or None.
pub fn count_lines(path: &str) -> Option<i64> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer.
    const O_NONBLOCK: i32 = 0o4000;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(O_NONBLOCK)
        .open(path)
        .ok()?;
    let meta = f.metadata().ok()?;
    if !meta.is_file() || meta.len() > LINES_MAX_BYTES {
        return None;
    }
    let mut f = f.take(LINES_MAX_BYTES);
    let mut buf = vec![0u8; 64 << 10];
    let (mut n, mut last) = (0usize, b'\n');
    loop {
        let k = f.read(&mut buf).ok()?;
        if k == 0 {
            break;
        }
        n += buf[..k].iter().filter(|&&b| b == b'\n').count();
        last = buf[k - 1];
    }
    Some((n + (last != b'\n') as usize) as i64)
}

impl LineCache {
    fn lines(&mut self, path: &str) -> Option<i64> {
        *self
            .0
            .entry(path.to_string())
            .or_insert_with(|| count_lines(path))
    }
}

fn diff_has_change(diff: &str) -> bool {
    diff.lines().any(|l| {
        (l.starts_with('+') && !l.starts_with("+++"))
            || (l.starts_with('-') && !l.starts_with("---"))
    })
}

/// Did an edit-like tool change a file? From `metadata.filediff`/`files` counts or the diff.
fn edit_landed(meta: &Map<String, Value>) -> bool {
    let counted = |o: &Map<String, Value>| {
        o.get("additions").and_then(Value::as_i64).unwrap_or(0)
            + o.get("deletions").and_then(Value::as_i64).unwrap_or(0)
            > 0
    };
    if let Some(fd) = meta.get("filediff").and_then(Value::as_object) {
        if counted(fd) {
            return true;
        }
    }
    if let Some(files) = meta.get("files").and_then(Value::as_array) {
        if files.iter().filter_map(Value::as_object).any(counted) {
            return true;
        }
    }
    meta.get("diff")
        .and_then(Value::as_str)
        .is_some_and(diff_has_change)
}

/// Did a successful bash change the files the step's patch names? The snapshot diff of a step
/// also catches what other sessions changed in the same worktree meanwhile, so the command must
/// either name a changed file or be one that writes.
fn bash_wrote(cmd: &str, unexplained: &[&str]) -> bool {
    if unexplained.is_empty() {
        return false;
    }
    let names_one = unexplained.iter().any(|f| {
        let base = f.rsplit('/').next().unwrap_or(f);
        !base.is_empty() && cmd.contains(base)
    });
    let writes = [
        " > ",
        ">>",
        "sed -i",
        "tee ",
        "mv ",
        "cp ",
        "rm ",
        "git apply",
        "git checkout",
        "patch ",
        "touch ",
        "mkdir ",
    ]
    .iter()
    .any(|w| cmd.contains(w));
    names_one || writes
}

/// What a session's messages say about its liveness (see [`crate::liveness`]). Only times,
/// states, tool names and error class names: no content.
pub fn activity_of(session: &str, messages: &Value) -> crate::record::Activity {
    use crate::record::{Activity, Ask, Running, Turn};
    let mut a = Activity {
        session: session.to_string(),
        ..Activity::default()
    };
    let mut bump = |t: Option<i64>| {
        if let Some(t) = t {
            a.last_progress = Some(a.last_progress.map_or(t, |x| x.max(t)));
        }
    };
    let time = |v: &Value, k: &str| v.get("time").and_then(|t| t.get(k)).and_then(Value::as_i64);
    let mut last_assistant: Option<&Value> = None;
    // the latest message that began a turn (a person's prompt, `opencode run`'s message)
    let mut prompted: Option<i64> = None;
    for m in messages.as_array().into_iter().flatten() {
        let info = &m["info"];
        bump(time(info, "created"));
        bump(time(info, "completed"));
        if info["role"] == "assistant" {
            last_assistant = Some(m);
        } else if info["role"] == "user" {
            prompted = prompted.max(time(info, "created"));
        }
        for p in m["parts"].as_array().into_iter().flatten() {
            bump(time(p, "start"));
            bump(time(p, "end"));
            if p["type"] == "tool" {
                let st = &p["state"];
                bump(time(st, "start"));
                bump(time(st, "end"));
            }
        }
    }
    if let Some(m) = last_assistant {
        let info = &m["info"];
        a.error = info
            .get("error")
            .and_then(|e| e.get("name"))
            .and_then(Value::as_str)
            .map(String::from);
        // a step that ended in tool calls is not the end of the turn: opencode starts the next
        // step (a new assistant message) at once, a few milliseconds later; read between the two,
        // the turn looked over, and follow mode resolved a loop that went on
        let steps_on = info["finish"] == "tool-calls";
        a.in_flight = (time(info, "completed").is_none() || steps_on) && a.error.is_none();
        a.turn = prompted.map(|start| Turn {
            start,
            end: turn_end(messages, start),
            ..Turn::default()
        });
        for p in m["parts"].as_array().into_iter().flatten() {
            let st = &p["state"];
            if p["type"] == "tool" && matches!(st["status"].as_str(), Some("pending" | "running")) {
                let tool = p["tool"].as_str().unwrap_or("").to_string();
                let timeout = if Tool::of(&tool) == Tool::Bash {
                    Some(
                        st["input"]
                            .get(Arg::Timeout.key())
                            .and_then(Value::as_i64)
                            .unwrap_or(BASH_TIMEOUT_MS),
                    )
                } else {
                    None
                };
                let asks = match Tool::of(&tool) {
                    _ if tool == "question" => Some(Ask::Question),
                    Tool::Bash if st.get("metadata").is_none() => Some(Ask::Permission),
                    _ => None,
                };
                a.running.push(Running {
                    t: time(st, "start").or(time(info, "created")).unwrap_or(0),
                    tool,
                    timeout,
                    asks,
                });
            }
        }
    } else {
        a.turn = prompted.map(|start| Turn {
            start,
            ..Turn::default()
        });
    }
    a
}

/// When the turn that began at `start` finished, by the last assistant message of `messages`:
/// its last step ended as a model ends a turn (`finish: "stop"`, not in tool calls, not cut at a
/// length), after the prompt, with no error and no tool still running. `None`: it goes on, or it
/// did not finish.
pub fn turn_end(messages: &Value, start: i64) -> Option<i64> {
    let m = messages
        .as_array()?
        .iter()
        .rev()
        .find(|m| m["info"]["role"] == "assistant")?;
    let info = &m["info"];
    let at = |k: &str| info["time"].get(k).and_then(Value::as_i64);
    let running = m["parts"].as_array().into_iter().flatten().any(|p| {
        p["type"] == "tool" && matches!(p["state"]["status"].as_str(), Some("pending" | "running"))
    });
    let finished = info["finish"] == "stop"
        && info.get("error").map_or(true, Value::is_null)
        && at("created").is_some_and(|c| c >= start)
        && !running;
    at("completed").filter(|_| finished)
}

/// The files a step's tool calls name as theirs: their `filePath`, and the files in their
/// metadata (apply_patch lists what it changed there).
fn explained_files<'a>(tools: &[&'a Map<String, Value>]) -> HashSet<&'a str> {
    let mut explained: HashSet<&str> = HashSet::new();
    for p in tools {
        if let Some(input) = p
            .get("state")
            .and_then(|s| s.get("input"))
            .and_then(Value::as_object)
        {
            if let Some(f) = input.get(Arg::FilePath.key()).and_then(Value::as_str) {
                explained.insert(f);
            }
        }
        if let Some(files) = p
            .get("state")
            .and_then(|s| s.get("metadata"))
            .and_then(|m| m.get("files"))
            .and_then(Value::as_array)
        {
            explained.extend(
                files
                    .iter()
                    .filter_map(|f| f.get(Arg::FilePath.key()).and_then(Value::as_str)),
            );
        }
    }
    explained
}

/// The calls of one session from its messages (`[{info, parts}]`, in order).
pub fn calls_of(session: &str, messages: &Value, lines: &mut LineCache) -> ShapeResult<Vec<Call>> {
    let msgs = messages
        .as_array()
        .ok_or_else(|| format!("messages of {session} are not a list"))?;
    let mut out = Vec::new();
    for m in msgs {
        let m = obj(m, "message")?;
        let info = m
            .get("info")
            .and_then(Value::as_object)
            .ok_or("message has no \"info\" object")?;
        let mid = str_field(info, "id", "message info")?;
        let role = str_field(info, "role", &format!("message {mid}"))?;
        let parts = m
            .get("parts")
            .and_then(Value::as_array)
            .ok_or_else(|| format!("message {mid} has no \"parts\" list"))?;
        if role != "assistant" {
            continue;
        }
        let model = match (
            info.get("providerID").and_then(Value::as_str),
            info.get("modelID").and_then(Value::as_str),
        ) {
            (Some(p), Some(m)) => Some(format!("{p}/{m}")),
            _ => None,
        };
        let created = info
            .get("time")
            .and_then(|t| t.get("created"))
            .and_then(Value::as_i64)
            .unwrap_or(0);
        let mut tools = Vec::new();
        let mut patched: HashSet<&str> = HashSet::new();
        for p in parts {
            let p = obj(p, &format!("part of message {mid}"))?;
            match p.get("type").and_then(Value::as_str) {
                Some("tool") => tools.push(p),
                Some("patch") => patched.extend(
                    p.get("files")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .filter_map(Value::as_str),
                ),
                Some(_) => {}
                None => return Err(format!("a part of message {mid} has no \"type\"")),
            }
        }
        if tools.is_empty() {
            continue;
        }
        let cost = info
            .get("cost")
            .and_then(Value::as_f64)
            .map(|c| c / tools.len() as f64);
        // Files the step's patch names that no edit-like tool explains were changed by bash.
        let explained = explained_files(&tools);
        let unexplained: Vec<&str> = patched
            .iter()
            .filter(|f| !explained.contains(*f))
            .copied()
            .collect();
        for p in tools {
            out.push(call_of(
                session,
                p,
                created,
                &model,
                cost,
                &patched,
                &unexplained,
                lines,
            )?);
        }
    }
    Ok(out)
}

/// Whether a completed call of `kind` landed a change (see [`Lands`]).
fn lands(
    kind: Tool,
    input: &Map<String, Value>,
    meta: &Map<String, Value>,
    exit: Option<i64>,
    patched: &HashSet<&str>,
    unexplained: &[&str],
) -> bool {
    let file = input.get(Arg::FilePath.key()).and_then(Value::as_str);
    match kind.lands() {
        Lands::ByDiff => edit_landed(meta),
        Lands::ByNewFile => {
            meta.get("exists").and_then(Value::as_bool) == Some(false)
                || file.is_some_and(|f| patched.contains(f))
        }
        Lands::ByCommand => {
            let cmd = input
                .get(Arg::Command.key())
                .and_then(Value::as_str)
                .unwrap_or("");
            exit == Some(0) && (is_git_commit(cmd) || bash_wrote(cmd, unexplained))
        }
        Lands::Never => false,
    }
}

/// A read's file's total lines: from its metadata, else (unless it failed) counted on disk.
fn total_lines(
    meta: &Map<String, Value>,
    status: &str,
    file: Option<&str>,
    lines: &mut LineCache,
) -> Option<i64> {
    meta.get("display")
        .and_then(|d| d.get("totalLines"))
        .and_then(Value::as_i64)
        .or_else(|| {
            if status == "error" {
                None
            } else {
                file.and_then(|f| lines.lines(f))
            }
        })
}

#[allow(clippy::too_many_arguments)]
fn call_of(
    session: &str,
    p: &Map<String, Value>,
    msg_created: i64,
    model: &Option<String>,
    cost: Option<f64>,
    patched: &HashSet<&str>,
    unexplained: &[&str],
    lines: &mut LineCache,
) -> ShapeResult<Call> {
    let id = str_field(p, "id", "tool part")?;
    let tool = str_field(p, "tool", &format!("tool part {id}"))?;
    let state = p
        .get("state")
        .and_then(Value::as_object)
        .ok_or_else(|| format!("tool part {id} has no \"state\""))?;
    let status = str_field(state, "status", &format!("state of tool part {id}"))?;
    if !matches!(status, "pending" | "running" | "completed" | "error") {
        return Err(format!("tool part {id} has unknown status {status:?}"));
    }
    let empty = Map::new();
    let input = state
        .get("input")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let meta = state
        .get("metadata")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let time = state.get("time").and_then(Value::as_object);
    let t = time
        .and_then(|t| t.get("start"))
        .and_then(Value::as_i64)
        .unwrap_or(msg_created);
    let end = time.and_then(|t| t.get("end")).and_then(Value::as_i64);
    let done = status == "completed";
    let kind = Tool::of(tool);
    let exit = if kind == Tool::Bash {
        meta.get("exit").and_then(Value::as_i64)
    } else {
        None
    };
    let file = input.get(Arg::FilePath.key()).and_then(Value::as_str);
    let landed = done && lands(kind, input, meta, exit, patched, unexplained);
    let file_lines = if kind == Tool::Read {
        total_lines(meta, status, file, lines)
    } else {
        None
    };
    let out = match status {
        "completed" => state.get("output").and_then(Value::as_str),
        "error" => state.get("error").and_then(Value::as_str),
        _ => None,
    }
    .map(crate::scrub::hash_str);
    Ok(Call {
        session: session.to_string(),
        id: id.to_string(),
        t,
        end,
        tool: tool.to_string(),
        args: scrub_args(input),
        status: status.to_string(),
        landed,
        exit,
        file_lines,
        model: model.clone(),
        cost,
        out,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::transcript::land_turn;
    use serde_json::json;

    #[test]
    fn lines_are_counted_only_in_regular_files_and_never_block() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("f.txt");
        std::fs::write(&f, "a\nb\nc").unwrap();
        assert_eq!(count_lines(f.to_str().unwrap()), Some(3));
        std::fs::write(&f, "a\nb\n").unwrap();
        assert_eq!(count_lines(f.to_str().unwrap()), Some(2));
        std::fs::write(&f, "").unwrap();
        assert_eq!(count_lines(f.to_str().unwrap()), Some(0));
        // a device that never ends, a directory, a FIFO nobody writes to: no count, at once
        assert_eq!(count_lines("/dev/zero"), None);
        assert_eq!(count_lines(dir.path().to_str().unwrap()), None);
        let fifo = dir.path().join("fifo");
        let st = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(st.success());
        let t0 = std::time::Instant::now();
        assert_eq!(count_lines(fifo.to_str().unwrap()), None);
        assert!(t0.elapsed() < std::time::Duration::from_secs(1));
        // too big to count
        let big = dir.path().join("big");
        std::fs::File::create(&big)
            .unwrap()
            .set_len(LINES_MAX_BYTES + 1)
            .unwrap();
        assert_eq!(count_lines(big.to_str().unwrap()), None);
    }

    /// A step that ended in tool calls (its message completed, `finish: "tool-calls"`) with the
    /// next step's message not written yet: the turn goes on. Found by an operator's journey,
    /// where follow mode read the 12 ms between the two, called every flagged session idle and
    /// resolved a loop that went on for 150 more calls.
    #[test]
    fn a_step_that_ended_in_tool_calls_is_not_the_end_of_the_turn() {
        let step = |finish: &str, completed: Option<i64>, error: Option<&str>| {
            let mut info = json!({"id": "msg_2", "role": "assistant", "finish": finish,
                                  "time": {"created": 10}});
            if let Some(c) = completed {
                info["time"]["completed"] = json!(c);
            }
            if let Some(e) = error {
                info["error"] = json!({"name": e});
            }
            json!([{"info": {"id": "msg_1", "role": "user", "time": {"created": 1}}, "parts": []},
                   {"info": info, "parts": []}])
        };
        let in_flight = |m: &Value| activity_of("ses_a", m).in_flight;
        assert!(in_flight(&step("tool-calls", Some(20), None)));
        assert!(in_flight(&step("tool-calls", None, None)));
        assert!(!in_flight(&step("stop", Some(20), None)));
        assert!(!in_flight(&step(
            "tool-calls",
            Some(20),
            Some("MessageAbortedError")
        )));
    }

    /// Issue 41, done: a turn finished when its last step ended as a model ends one, after the
    /// prompt; not while it steps on, runs a tool, or after an error; a new prompt begins
    /// another. What it landed counts its landed calls from its start.
    #[test]
    fn a_turn_finished_when_its_last_step_stopped_after_its_prompt() {
        let msgs = |finish: &str, error: Option<&str>, prompt_at: i64| {
            let mut info = json!({"id": "msg_2", "role": "assistant", "finish": finish,
                                  "time": {"created": 10, "completed": 20}});
            if let Some(e) = error {
                info["error"] = json!({"name": e});
            }
            json!([{"info": {"id": "msg_1", "role": "user", "time": {"created": prompt_at}}, "parts": []},
                   {"info": info, "parts": []}])
        };
        let turn = |m: &Value| activity_of("ses_a", m).turn.unwrap();
        assert_eq!(turn(&msgs("stop", None, 1)).end, Some(20));
        assert_eq!(turn(&msgs("stop", None, 1)).start, 1);
        assert_eq!(turn(&msgs("tool-calls", None, 1)).end, None);
        assert_eq!(turn(&msgs("length", None, 1)).end, None);
        assert_eq!(
            turn(&msgs("stop", Some("MessageAbortedError"), 1)).end,
            None
        );
        // a prompt after the last reply: its turn has not replied yet
        assert_eq!(turn(&msgs("stop", None, 15)).end, None);
        let call = |id: &str, t: i64, landed: bool| Call {
            session: "ses_a".into(),
            id: id.into(),
            t,
            tool: "write".into(),
            args: json!({"filePath": format!("/p/{id}.md")})
                .as_object()
                .unwrap()
                .clone(),
            status: "completed".into(),
            landed,
            ..Call::default()
        };
        let mut t = turn(&msgs("stop", None, 5));
        land_turn(
            &mut t,
            &[
                call("old", 4, true),
                call("a", 6, true),
                call("b", 7, false),
                call("c", 8, true),
            ],
        );
        assert_eq!(
            (t.landed, t.targets),
            (
                2,
                vec!["write /p/a.md".to_string(), "write /p/c.md".to_string()]
            )
        );
    }

    #[test]
    fn part_without_state_is_a_shape_error() {
        let msgs = json!([{"info": {"id": "msg_1", "role": "assistant"},
                           "parts": [{"id": "prt_1", "type": "tool", "tool": "read"}]}]);
        let e = calls_of("ses_a", &msgs, &mut LineCache::default()).unwrap_err();
        assert_eq!(e, "tool part prt_1 has no \"state\"");
    }

    #[test]
    fn message_without_parts_is_a_shape_error() {
        let msgs = json!([{"info": {"id": "msg_1", "role": "assistant"}}]);
        let e = calls_of("ses_a", &msgs, &mut LineCache::default()).unwrap_err();
        assert_eq!(e, "message msg_1 has no \"parts\" list");
    }

    #[test]
    fn bash_that_changed_files_lands_through_the_patch_part() {
        let msgs = json!([{"info": {"id": "msg_1", "role": "assistant", "cost": 0.5},
            "parts": [
              {"id": "prt_1", "type": "tool", "tool": "bash", "state": {"status": "completed",
               "input": {"command": "sed -i s/a/b/ f.txt"}, "metadata": {"exit": 0},
               "time": {"start": 5, "end": 6}}},
              {"id": "prt_2", "type": "patch", "files": ["/p/f.txt"]}]}]);
        let calls = calls_of("ses_a", &msgs, &mut LineCache::default()).unwrap();
        assert_eq!(calls.len(), 1);
        assert!(calls[0].landed);
        assert_eq!(calls[0].exit, Some(0));
        assert_eq!(calls[0].cost, Some(0.5));
    }

    #[test]
    fn bash_that_only_reads_is_not_credited_with_another_sessions_changes() {
        // regression: an aborted `sleep` was credited with a concurrent session's edit
        let msgs = json!([{"info": {"id": "msg_1", "role": "assistant"},
            "parts": [
              {"id": "prt_1", "type": "tool", "tool": "bash", "state": {"status": "completed",
               "input": {"command": "echo started; sleep 30"}, "metadata": {"exit": null}}},
              {"id": "prt_2", "type": "tool", "tool": "bash", "state": {"status": "completed",
               "input": {"command": "cat src/navbar.js | head"}, "metadata": {"exit": 0}}},
              {"id": "prt_3", "type": "patch", "files": ["/p/README.md"]}]}]);
        let calls = calls_of("ses_a", &msgs, &mut LineCache::default()).unwrap();
        assert!(!calls[0].landed);
        assert!(!calls[1].landed);
    }
}
