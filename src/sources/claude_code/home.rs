//! Claude Code's directory as a source (`claude-code:<dir>`, the directory `$CLAUDE_CONFIG_DIR`
//! names, else `~/.claude`): its sessions listed and read live, as records.
//!
//! A session is `projects/<cwd as dashes>/<session>.jsonl`, its subagents
//! `<session>/subagents/agent-<id>.jsonl` beside it; both are read by Claude Code's wing
//! ([`super`]) and a file is picked by its modification time, so an idle history
//! costs a `stat` per session. What was read of a session's files is kept while this source is
//! (follow mode keeps it open): a read after a change parses only the lines appended since. A session runs while `sessions/<pid>.json` names it and that
//! process is alive with the start time the file gives (`procStart`): the file a killed process
//! left behind names a dead pid, or one a later process reuses, and is not a running session.

use super::SessionFiles;
use crate::record::Program;
use crate::sources::transcript::{mtime_ms, proc_start, settle, KeptReads, Read, Transcript};
use crate::sources::{Listing, Records, SourceId, SourceKind};
use serde_json::{json, Value};
use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

/// Claude Code's directory, read as a source of records.
pub struct ClaudeHome {
    dir: PathBuf,
    /// Sessions whose process runs, with its pid.
    live: HashMap<String, u32>,
    /// Of those, the ones whose process says it waits for its user (`"status": "idle"` in its
    /// `sessions/<pid>.json`: an interactive session between turns, after Esc).
    waiting: HashSet<String>,
    /// Main transcripts read, by session id, each with its subagents' files (a subagent is
    /// read with its session): kept across [`Records::refresh`], so that a read after a change
    /// parses only what was appended.
    read: RefCell<KeptReads<String, SessionFiles>>,
    /// The main transcripts found, listed once per open (oc-calls asks for one session after
    /// another).
    found: std::cell::OnceCell<Vec<Found>>,
}

impl SourceKind for ClaudeHome {
    type Name = PathBuf;
    const PHRASE: &'static str = "Claude Code's files";
    const READER: &'static str = "claude-code";

    fn claim(wire: &str) -> Option<PathBuf> {
        wire.strip_prefix("claude-code:").map(PathBuf::from)
    }

    fn write(name: &PathBuf, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "claude-code:{}", name.display())
    }

    fn records(name: &PathBuf) -> Option<Box<dyn Records>> {
        Some(Box::new(ClaudeHome::new(name)))
    }
}

/// One main transcript found: its session id, its file, and the newest modification among it
/// and its subagents' files.
struct Found {
    id: String,
    file: PathBuf,
    updated: Option<i64>,
    subagents: Vec<String>,
}

/// Every main transcript under `<dir>/projects/`, with its subagents' ids: a `stat` a file.
fn found_in(dir: &Path) -> std::io::Result<Vec<Found>> {
    let mut out = Vec::new();
    let projects = dir.join("projects");
    let dirs = match std::fs::read_dir(&projects) {
        Ok(d) => d,
        // a Claude Code that never ran a session has no projects yet
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(e),
    };
    for d in dirs {
        let d = d?.path();
        if !d.is_dir() {
            continue;
        }
        for f in std::fs::read_dir(&d)? {
            let file = f?.path();
            if !file.extension().is_some_and(|x| x == "jsonl") {
                continue;
            }
            let Some(id) = file.file_stem().and_then(|s| s.to_str()).map(String::from) else {
                continue;
            };
            let mut updated = mtime_ms(&file);
            let mut subagents = Vec::new();
            let subs = file.with_extension("").join("subagents");
            for s in std::fs::read_dir(&subs).into_iter().flatten().flatten() {
                let p = s.path();
                if p.extension().is_some_and(|x| x == "jsonl") {
                    updated = updated.max(mtime_ms(&p));
                    if let Some(stem) = p.file_stem().and_then(|s| s.to_str()) {
                        subagents.push(stem.to_string());
                    }
                }
            }
            out.push(Found {
                id,
                file,
                updated,
                subagents,
            });
        }
    }
    Ok(out)
}

/// The newest modification among Claude Code's transcripts under `dir` (`None`: none, or none
/// readable): what follow mode compares at every poll before reading anything.
pub fn newest_change(dir: &Path) -> Option<i64> {
    found_in(dir).ok()?.iter().filter_map(|f| f.updated).max()
}

impl ClaudeHome {
    pub fn new(dir: &Path) -> ClaudeHome {
        let (live, waiting) = live_sessions(&dir.join("sessions"));
        ClaudeHome {
            live,
            waiting,
            dir: dir.to_path_buf(),
            read: RefCell::default(),
            found: std::cell::OnceCell::new(),
        }
    }

    /// Every main transcript under `projects/`, with its subagents' ids, listed once.
    fn found(&self) -> std::io::Result<&[Found]> {
        if let Some(f) = self.found.get() {
            return Ok(f);
        }
        let f = found_in(&self.dir)?;
        Ok(self.found.get_or_init(|| f))
    }

    /// Reads what was appended to one main transcript and its subagents' files since it was
    /// last read (all of them the first time), once between refreshes.
    fn read_main(&self, id: &str, file: &Path) -> Result<(), String> {
        let name = file.display().to_string();
        let mut read = self.read.borrow_mut();
        read.read(&id.to_string(), |f| f.update(file, &name))?;
        Ok(())
    }

    /// The sessions of a main transcript read ([`ClaudeHome::read_main`]), each with the calls
    /// that changed after the mark `want` gives it and settled by whether the main session's
    /// process runs.
    fn sessions(&self, main: &str, want: &dyn Fn(&str) -> Option<u64>) -> Read {
        let Some(mut r) = self
            .read
            .borrow()
            .get(&main.to_string())
            .map(|f| f.read(want))
        else {
            return Read::default();
        };
        // an interactive session's process runs between turns: it runs a turn while it says so
        let running = self.live.contains_key(main) && !self.waiting.contains(main);
        let wire = self.id().to_string();
        for t in &mut r.sessions {
            t.session.source = Some(wire.clone());
            settle(t, running);
        }
        r
    }

    /// The main transcript holding session `id` (a main session's or a subagent's).
    fn file_of(&self, id: &str) -> Option<(String, PathBuf)> {
        self.found()
            .ok()?
            .iter()
            .find(|f| f.id == id || f.subagents.iter().any(|s| s == id))
            .map(|f| (f.id.clone(), f.file.clone()))
    }
}

impl Records for ClaudeHome {
    fn id(&self) -> SourceId {
        SourceId::ClaudeCode(self.dir.clone())
    }

    fn program(&self) -> Program {
        Program::ClaudeCode
    }

    fn list(&self, since: i64, also: &[String]) -> Listing {
        let mut l = Listing::default();
        let found = match self.found() {
            Ok(f) => f,
            Err(e) => {
                l.problems.push(format!(
                    "{}: cannot list: {e}",
                    self.dir.join("projects").display()
                ));
                return l;
            }
        };
        let also: HashSet<&str> = also.iter().map(String::as_str).collect();
        l.facts.insert("transcripts".into(), json!(found.len()));
        let mut pids: Vec<u32> = self.live.values().copied().collect();
        pids.sort_unstable();
        if !pids.is_empty() {
            l.facts.insert("pids".into(), json!(pids));
        }
        for f in found {
            let picked = f.updated.is_some_and(|u| u >= since)
                || self.live.contains_key(&f.id)
                || also.contains(f.id.as_str())
                || f.subagents.iter().any(|s| also.contains(s.as_str()));
            if !picked {
                continue;
            }
            if let Err(why) = self.read_main(&f.id, &f.file) {
                l.problems.push(why);
                continue;
            }
            // the sessions, not their calls: only those still open come
            let r = self.sessions(&f.id, &|_| Some(u64::MAX));
            if r.sessions.is_empty() && r.problems.is_empty() {
                // a transcript with no conversation yet (a session just started)
                continue;
            }
            l.sessions.extend(r.sessions.into_iter().map(|t| t.session));
            l.problems.extend(r.problems);
        }
        l.sessions
            .sort_by(|a, b| b.updated.cmp(&a.updated).then(a.id.cmp(&b.id)));
        l
    }

    fn read_since(&self, id: &str, mark: u64) -> Result<Option<Transcript>, String> {
        // read since the last refresh (listed): its file, whatever its name
        let holder = self
            .read
            .borrow()
            .fresh()
            .find(|(_, f)| f.holds(id))
            .map(|(m, _)| m.clone());
        let main = match holder {
            Some(m) => m,
            None => {
                let Some((main, file)) = self.file_of(id) else {
                    return Ok(None);
                };
                self.read_main(&main, &file)?;
                main
            }
        };
        let r = self.sessions(&main, &|s| (s == id).then_some(mark));
        Ok(r.sessions.into_iter().find(|t| t.session.id == id))
    }

    fn refresh(&mut self) {
        (self.live, self.waiting) = live_sessions(&self.dir.join("sessions"));
        self.found = std::cell::OnceCell::new();
        self.read.get_mut().refresh();
    }
}

/// The sessions whose process runs, by `sessions/<pid>.json` (Claude Code writes one per
/// process, and removes it on every exit but SIGKILL): those whose pid is alive with the start
/// time the file gives; and of those, the ones whose file says `"status": "idle"` (an
/// interactive session waiting for its user; seen after Esc in Claude Code 2.1.332's TUI).
fn live_sessions(dir: &Path) -> (HashMap<String, u32>, HashSet<String>) {
    let mut out = HashMap::new();
    let mut waiting = HashSet::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        // `<pid>.json`; the `<pid>.<hash>.key` files beside them hold tokens, never read
        let Some(pid) = p
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".json"))
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(Some(text)) = crate::paths::read_own_small(&p, 64 * 1024) else {
            continue;
        };
        let Ok(v) = serde_json::from_str::<Value>(&text) else {
            continue;
        };
        let Some(session) = v["sessionId"].as_str() else {
            continue;
        };
        let start = match &v["procStart"] {
            Value::String(s) => Some(s.clone()),
            Value::Number(n) => Some(n.to_string()),
            _ => None,
        };
        if v["pid"].as_u64() == Some(u64::from(pid)) && start.is_some() && proc_start(pid) == start
        {
            out.insert(session.to_string(), pid);
            // `-p` says "busy" for its whole run; an interactive session "idle" between turns
            if v["status"] == "idle" {
                waiting.insert(session.to_string());
            }
        }
    }
    (out, waiting)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sessions_file_counts_only_while_its_process_has_the_start_time_it_gives() {
        let dir = tempfile::tempdir().unwrap();
        let me = std::process::id();
        let start = proc_start(me).unwrap();
        let write = |pid: u32, session: &str, start: &str| {
            std::fs::write(
                dir.path().join(format!("{pid}.json")),
                json!({"pid": pid, "sessionId": session, "procStart": start}).to_string(),
            )
            .unwrap();
        };
        write(me, "alive", &start);
        // a pid reused by a later process: another start time
        write(1, "reused", "1");
        // a killed process's file: no such pid
        write(4_000_000, "dead", &start);
        let (live, waiting) = live_sessions(dir.path());
        assert_eq!(live, HashMap::from([("alive".to_string(), me)]));
        assert!(waiting.is_empty());
    }

    /// An interactive session's process stays between turns: its file says whether it runs a
    /// turn. Before, an Esc'd interactive session read busy for as long as its TUI stayed open,
    /// and its loop never resolved (tried under tmux with Claude Code 2.1.332).
    #[test]
    fn an_interactive_session_waiting_for_its_user_is_not_running_a_turn() {
        let dir = tempfile::tempdir().unwrap();
        let me = std::process::id();
        let start = proc_start(me).unwrap();
        // the file Claude Code 2.1.332's TUI wrote after Esc (tokens and paths left out)
        let file = json!({"pid": me, "sessionId": "b6b05cec-7c76-4622-81ce-4f4aaf63e7ed",
            "cwd": "/tmp/op/proj", "startedAt": 1796430025151_i64, "procStart": start,
            "version": "2.1.332", "kind": "interactive", "entrypoint": "cli",
            "status": "idle", "updatedAt": 1796430054365_i64});
        std::fs::write(dir.path().join(format!("{me}.json")), file.to_string()).unwrap();
        let (live, waiting) = live_sessions(dir.path());
        assert_eq!(live.len(), 1);
        assert_eq!(
            waiting,
            HashSet::from(["b6b05cec-7c76-4622-81ce-4f4aaf63e7ed".to_string()])
        );
        // while a turn runs it says "busy" (as `-p` does for its whole run)
        let busy = file.to_string().replace("\"idle\"", "\"busy\"");
        std::fs::write(dir.path().join(format!("{me}.json")), busy).unwrap();
        assert!(live_sessions(dir.path()).1.is_empty());
    }

    #[test]
    fn its_source_string_is_the_directory_and_reads_back_the_same() {
        let id = SourceId::parse("claude-code:/home/u/.claude");
        assert_eq!(id, SourceId::ClaudeCode("/home/u/.claude".into()));
        assert_eq!(id.to_string(), "claude-code:/home/u/.claude");
        assert_eq!(id.reader(), "claude-code");
        assert!(id.records().is_some());
    }
}
