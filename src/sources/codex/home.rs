//! Codex CLI's directory as a source (`codex:<dir>`, the directory `$CODEX_HOME` names, else
//! `~/.codex`): its threads listed and read live, as records.
//!
//! A thread is a rollout, `sessions/YYYY/MM/DD/rollout-<time>-<thread id>.jsonl` (a subagent's
//! thread a rollout of its own naming its parent), read by Codex's wing ([`super`]) and
//! picked by its modification time, so an idle history costs a `stat` per thread; what was read
//! of a rollout is kept while this source is (follow mode keeps it open), so a read after a
//! change parses only the lines appended since. Titles come from the thread index
//! (`state_5.sqlite`, table `threads`) when it is there, read again only when its files changed. A thread runs
//! while its `thread-writer-locks/<thread>.lock` is held open by a live process: the lock a
//! killed process left behind is held by nobody, and is not a running thread.

use crate::record::Program;
use crate::sources::codex;
use crate::sources::transcript::{jsonl_files, mtime_ms, settle, KeptReads, Tail, Transcript};
use crate::sources::{Listing, Records, SourceId, SourceKind};
use serde_json::json;
use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

/// Codex's directory, read as a source of records.
pub struct CodexHome {
    dir: PathBuf,
    /// Threads whose lock a live process holds, with its pid.
    live: HashMap<String, u32>,
    /// Rollouts read, by file: kept across [`Records::refresh`], so that a read after a change
    /// parses only what was appended.
    read: RefCell<KeptReads<PathBuf, Tail<codex::Parser>>>,
    /// The rollouts found, listed once per open (oc-calls asks for one thread after another).
    rollouts: std::cell::OnceCell<Vec<(String, PathBuf, Option<i64>)>>,
    /// The thread index's titles, with the stamp of its files when they were read: read again
    /// only when those changed.
    titles: RefCell<Option<(Stamp, Titles)>>,
}

/// Thread titles by thread id, or why the index could not be read.
type Titles = Result<HashMap<String, String>, String>;

/// What tells a SQLite database changed without opening it: the length and modification time
/// of its file and of its write-ahead log (where a database in WAL mode, as Codex's are,
/// takes its writes first).
type Stamp = [Option<(u64, std::time::SystemTime)>; 2];

fn stamp(db: &Path) -> Stamp {
    let of = |p: &Path| {
        let m = std::fs::metadata(p).ok()?;
        Some((m.len(), m.modified().ok()?))
    };
    let mut wal = db.as_os_str().to_owned();
    wal.push("-wal");
    [of(db), of(Path::new(&wal))]
}

impl SourceKind for CodexHome {
    type Name = PathBuf;
    const PHRASE: &'static str = "Codex's files";
    const READER: &'static str = "codex";

    fn claim(wire: &str) -> Option<PathBuf> {
        wire.strip_prefix("codex:").map(PathBuf::from)
    }

    fn write(name: &PathBuf, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "codex:{}", name.display())
    }

    fn records(name: &PathBuf) -> Option<Box<dyn Records>> {
        Some(Box::new(CodexHome::new(name)))
    }
}

/// The thread id a rollout's file name ends with (`rollout-<time>-<36-character uuid>.jsonl`).
fn thread_of(file: &Path) -> Option<String> {
    let stem = file.file_stem()?.to_str()?;
    let rest = stem.strip_prefix("rollout-")?;
    let id = rest.get(rest.len().checked_sub(36)?..)?;
    (id.bytes().filter(|&b| b == b'-').count() == 4
        && id.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-'))
    .then(|| id.to_string())
}

/// Every rollout under `<dir>/sessions/`: thread id, file, modification time (a `stat` a file).
pub(crate) fn rollouts_in(dir: &Path) -> std::io::Result<Vec<(String, PathBuf, Option<i64>)>> {
    let dir = dir.join("sessions");
    if !dir.is_dir() {
        return Ok(Vec::new());
    }
    Ok(jsonl_files(&dir)?
        .into_iter()
        .filter_map(|f| {
            let id = thread_of(&f)?;
            let t = mtime_ms(&f);
            Some((id, f, t))
        })
        .collect())
}

/// The newest modification among Codex's rollouts under `dir` (`None`: none, or none
/// readable): what follow mode compares at every poll before reading anything (the locks, a
/// look at every process's open files, are looked at only when it moved).
pub fn newest_change(dir: &Path) -> Option<i64> {
    rollouts_in(dir).ok()?.iter().filter_map(|r| r.2).max()
}

impl CodexHome {
    pub fn new(dir: &Path) -> CodexHome {
        CodexHome {
            dir: dir.to_path_buf(),
            live: held_locks(&dir.join("thread-writer-locks")),
            read: RefCell::default(),
            rollouts: std::cell::OnceCell::new(),
            titles: RefCell::new(None),
        }
    }

    /// Thread titles from the thread index, read again only when its files changed; a problem
    /// reading them is said again at every listing, as long as it lasts.
    fn titles(&self, problems: &mut Vec<String>) -> HashMap<String, String> {
        let db = self.dir.join("state_5.sqlite");
        let now = stamp(&db);
        let mut kept = self.titles.borrow_mut();
        if kept.as_ref().map(|(s, _)| s) != Some(&now) {
            let mut why = Vec::new();
            let t = titles(&db, &mut why);
            *kept = Some((now, why.into_iter().next().map_or(Ok(t), Err)));
        }
        match &kept.as_ref().expect("just read").1 {
            Ok(t) => t.clone(),
            Err(why) => {
                problems.push(why.clone());
                HashMap::new()
            }
        }
    }

    /// Every rollout under `sessions/`: thread id, file, modification time; listed once.
    fn rollouts(&self) -> std::io::Result<&[(String, PathBuf, Option<i64>)]> {
        if let Some(r) = self.rollouts.get() {
            return Ok(r);
        }
        let r = rollouts_in(&self.dir)?;
        Ok(self.rollouts.get_or_init(|| r))
    }

    /// Reads what was appended to one rollout since it was last read (all of it the first
    /// time), once between refreshes; its thread with the calls that changed after `mark`,
    /// settled by whether its lock is held.
    fn read_rollout(
        &self,
        file: &Path,
        mark: u64,
        titles: &HashMap<String, String>,
        problems: &mut Vec<String>,
    ) -> Option<Transcript> {
        let name = file.display().to_string();
        let mut read = self.read.borrow_mut();
        let tail = match read.read(&file.to_path_buf(), |t| t.update(file, &name)) {
            Ok(t) => t,
            Err(e) => {
                problems.push(format!("{name}: cannot read: {e}"));
                return None;
            }
        };
        let r = tail.lines().now(&name).read(&name, mark);
        problems.extend(r.problems);
        let mut t = r.sessions.into_iter().next()?;
        let id = t.session.id.clone();
        t.session.source = Some(self.id().to_string());
        t.session.title = titles.get(&id).cloned();
        // the TUI holds the thread's lock between turns: a turn runs while its last one is open
        let open = t.activity.in_flight;
        settle(&mut t, self.live.contains_key(&id) && open);
        Some(t)
    }
}

impl Records for CodexHome {
    fn id(&self) -> SourceId {
        SourceId::Codex(self.dir.clone())
    }

    fn program(&self) -> Program {
        Program::Codex
    }

    fn list(&self, since: i64, also: &[String]) -> Listing {
        let mut l = Listing::default();
        let rollouts = match self.rollouts() {
            Ok(r) => r,
            Err(e) => {
                l.problems.push(format!(
                    "{}: cannot list: {e}",
                    self.dir.join("sessions").display()
                ));
                return l;
            }
        };
        let titles = self.titles(&mut l.problems);
        l.facts.insert("rollouts".into(), json!(rollouts.len()));
        let mut pids: Vec<u32> = self.live.values().copied().collect();
        pids.sort_unstable();
        pids.dedup();
        if !pids.is_empty() {
            l.facts.insert("pids".into(), json!(pids));
        }
        let also: HashSet<&str> = also.iter().map(String::as_str).collect();
        let by_id: HashMap<&str, &PathBuf> =
            rollouts.iter().map(|(id, f, _)| (id.as_str(), f)).collect();
        let mut todo: Vec<&PathBuf> = rollouts
            .iter()
            .filter(|(id, _, t)| {
                t.is_some_and(|t| t >= since)
                    || self.live.contains_key(id)
                    || also.contains(id.as_str())
            })
            .map(|(_, f, _)| f)
            .collect();
        let mut listed = HashSet::new();
        // a subagent's thread brings its parent (and its parent's) into the list
        while let Some(f) = todo.pop() {
            // the thread, not its calls: only those still open come
            let Some(t) = self.read_rollout(f, u64::MAX, &titles, &mut l.problems) else {
                continue;
            };
            if !listed.insert(t.session.id.clone()) {
                continue;
            }
            if let Some(p) = t.session.parent.as_deref() {
                if !listed.contains(p) {
                    if let Some(pf) = by_id.get(p) {
                        todo.push(pf);
                    }
                }
            }
            l.sessions.push(t.session);
        }
        l.sessions
            .sort_by(|a, b| b.updated.cmp(&a.updated).then(a.id.cmp(&b.id)));
        l
    }

    fn read_since(&self, id: &str, mark: u64) -> Result<Option<Transcript>, String> {
        let rollouts = self
            .rollouts()
            .map_err(|e| format!("{}: cannot list: {e}", self.dir.display()))?;
        let Some((_, file, _)) = rollouts.iter().find(|(r, _, _)| r == id) else {
            return Ok(None);
        };
        let mut problems = Vec::new();
        let titles = match self.titles.borrow().as_ref() {
            Some((_, Ok(t))) => t.clone(),
            _ => HashMap::new(),
        };
        let t = self.read_rollout(file, mark, &titles, &mut problems);
        if let Some(why) = problems.into_iter().next() {
            return Err(why);
        }
        Ok(t.filter(|t| t.session.id == id))
    }

    fn refresh(&mut self) {
        self.live = held_locks(&self.dir.join("thread-writer-locks"));
        self.rollouts = std::cell::OnceCell::new();
        self.read.get_mut().refresh();
    }
}

/// Thread titles from Codex's thread index, read-only (none when there is no index; an index
/// of a shape not known is a problem named by its file).
fn titles(db: &Path, problems: &mut Vec<String>) -> HashMap<String, String> {
    use rusqlite::{Connection, OpenFlags};
    let mut out = HashMap::new();
    if !db.is_file() {
        return out;
    }
    let got = (|| -> rusqlite::Result<()> {
        let conn = Connection::open_with_flags(
            db,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        conn.busy_timeout(std::time::Duration::from_secs(2))?;
        let mut st = conn.prepare("SELECT id, title FROM threads")?;
        let rows = st.query_map([], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, Option<String>>(1)?))
        })?;
        for row in rows {
            if let (id, Some(title)) = row? {
                if !title.is_empty() {
                    out.insert(id, title);
                }
            }
        }
        Ok(())
    })();
    if let Err(e) = got {
        problems.push(format!("{}: cannot read thread titles: {e}", db.display()));
    }
    out
}

/// The threads whose lock file in `dir` a live process holds open, with its pid: Codex keeps
/// `<thread>.lock` open while it writes the thread, and a killed process leaves it behind held
/// by nobody. Only processes named `codex` are looked at, and only when there is a lock.
fn held_locks(dir: &Path) -> HashMap<String, u32> {
    let mut out = HashMap::new();
    let Ok(dir) = std::fs::canonicalize(dir) else {
        return out;
    };
    let locks: HashSet<PathBuf> = std::fs::read_dir(&dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        // a thread's lock, not Codex's own `.coordination.lock` beside them
        .filter(|p| {
            p.extension().is_some_and(|x| x == "lock")
                && !p
                    .file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with('.'))
        })
        .collect();
    if locks.is_empty() {
        return out;
    }
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let comm = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
        if comm.trim_end() != "codex" {
            continue;
        }
        for fd in std::fs::read_dir(e.path().join("fd"))
            .into_iter()
            .flatten()
            .flatten()
        {
            let Ok(target) = std::fs::read_link(fd.path()) else {
                continue;
            };
            if locks.contains(&target) {
                if let Some(id) = target.file_stem().and_then(|s| s.to_str()) {
                    out.insert(id.to_string(), pid);
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Esc in Codex 0.171.0's TUI: the lock stays held, the turn is over. Before, the thread
    /// read busy for as long as the TUI stayed open and its loop never resolved.
    #[test]
    fn a_tui_thread_whose_last_turn_was_aborted_or_completed_runs_no_turn() {
        // the turn events of the real rollout (trimmed to the fields read)
        let started = r#"{"timestamp":"2026-12-05T00:26:47.186Z","ordinal":1,"type":"event_msg","payload":{"type":"task_started","turn_attribution":{"turn_id":"01a24398-a5f1-7c40-9db0-0a758f2e1d91","turn_trigger":"user"}}}"#;
        let call = r#"{"timestamp":"2026-12-05T00:26:48.000Z","ordinal":5,"type":"response_item","payload":{"type":"function_call","name":"exec_command","arguments":"{}","call_id":"c1"}}"#;
        let aborted = r#"{"timestamp":"2026-12-05T00:26:59.321Z","ordinal":39,"type":"event_msg","payload":{"type":"turn_aborted","turn_id":"01a24398-a5f1-7c40-9db0-0a758f2e1d91","reason":"interrupted"}}"#;
        let complete = r#"{"timestamp":"2026-12-05T00:27:30.000Z","ordinal":60,"type":"event_msg","payload":{"type":"task_complete","turn_id":"01a24398-b"}}"#;
        let meta = r#"{"timestamp":"2026-12-05T00:26:46.000Z","type":"session_meta","payload":{"id":"01a24398-a5f1-7c40-9db0-0a758f2e1d91"}}"#;
        let turn_open = |lines: &[&str]| {
            let text = std::iter::once(meta)
                .chain(lines.iter().copied())
                .collect::<Vec<_>>()
                .join("\n");
            codex::read("r.jsonl", &text).sessions[0].activity.in_flight
        };
        assert!(turn_open(&[started, call]));
        assert!(!turn_open(&[started, call, aborted]));
        assert!(turn_open(&[started, aborted, started]));
        assert!(!turn_open(&[started, complete]));
        // a thread opened with no turn yet runs none
        assert!(!turn_open(&[call]));
    }

    #[test]
    fn a_rollouts_thread_is_the_uuid_its_name_ends_with() {
        let f = Path::new(
            "/h/.codex/sessions/2026/12/04/rollout-2026-12-04T18-26-25-01a2424e-e1ee-7de2-9e5a-01e48aaf54aa.jsonl",
        );
        assert_eq!(
            thread_of(f).as_deref(),
            Some("01a2424e-e1ee-7de2-9e5a-01e48aaf54aa")
        );
        assert_eq!(thread_of(Path::new("/h/notes.jsonl")), None);
        assert_eq!(thread_of(Path::new("/h/rollout-short.jsonl")), None);
    }

    #[test]
    fn a_lock_nobody_holds_is_not_a_running_thread() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("01a2424e-e1ee-7de2-9e5a-01e48aaf54aa.lock"),
            "",
        )
        .unwrap();
        assert!(held_locks(dir.path()).is_empty());
        assert!(held_locks(&dir.path().join("none")).is_empty());
    }
}
