//! What `oc-calls --export PATH` reads besides opencode's exports: the transcripts other agents
//! leave on disk, a Claude Code session (`~/.claude/projects/<dir>/<session>.jsonl`, its
//! subagents in `<session>/subagents/agent-*.jsonl`) or a Codex rollout
//! (`~/.codex/sessions/Y/M/D/rollout-*.jsonl`), or a folder holding such files at any depth.
//!
//! Each agent's wing ([`super::claude_code`], [`super::codex`]) turns its transcripts straight
//! into the project's own records ([`Transcript`]: a session, its calls, its activity), along
//! the tool vocabulary of [`crate::vocab`], with the helpers here; no message text, tool output
//! or file content leaves it. Which wing reads a file is told by its first record
//! ([`super::sent`]), not by its name.
//!
//! Each wing reads one line at a time ([`Parse`]), so one reader serves a whole read and a
//! file read as it grows: [`Lines`] hands a wing the complete lines of the bytes it is given,
//! [`Tail`] the lines appended to a file since its last read. Every call a wing reads carries
//! the seq of the line that last changed it, so a read can give only the calls that changed
//! since an earlier one (follow mode writes those).

use crate::record::{Activity, Call, Session};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// One session read from a transcript, as `oc-calls` writes it.
#[derive(Debug, Clone, PartialEq)]
pub struct Transcript {
    pub session: Session,
    /// In call order: all of them, or those that changed after the mark a read was asked
    /// from ([`super::Records::read_since`]).
    pub calls: Vec<Call>,
    pub activity: Activity,
    /// How far its file was read ([`Lines::mark`]): what changes later is marked after it.
    pub mark: u64,
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

/// One agent's reading of its transcripts, fed one line at a time ([`Lines`]) and asked at any
/// point what it read so far. A reading is cloned only to read an unfinished last line that is
/// JSON already (a record written without its newline yet), which is rare.
pub trait Parse: Clone + Default {
    /// Takes line `n` (1-based) of the file `name` names: its record, or why it has none (a
    /// problem, named by its line). `seq` numbers the lines fed, in the order they were,
    /// across every file this process reads ([`next_seq`]): what a record changed is marked
    /// with it, and a later read asks for what changed after a mark.
    fn line(&mut self, name: &str, n: usize, seq: u64, rec: Result<Value, String>);
}

/// The next line's number in the order lines are fed, never given twice in this process: a
/// mark taken from one reading of a file still holds after the file was read again whole
/// (replaced, truncated) or forgotten and read again.
pub fn next_seq() -> u64 {
    static SEQ: AtomicU64 = AtomicU64::new(1);
    SEQ.fetch_add(1, Ordering::Relaxed)
}

/// A JSON Lines text fed to a [`Parse`] as its bytes come: each complete line (with its
/// newline) is parsed once and handed on; the last line while it lacks its newline is kept
/// aside. What a whole text gives and what the same text given in pieces cut anywhere gives
/// are one and the same reading.
#[derive(Clone, Default)]
pub struct Lines<P> {
    parser: P,
    /// Complete lines taken.
    lines: usize,
    /// The seq of the last line handed on (0: none).
    seq: u64,
    /// The unfinished last line: the bytes after the last newline.
    rest: Vec<u8>,
}

impl<P: Parse> Lines<P> {
    /// Feeds the bytes that follow those fed so far.
    pub fn push(&mut self, name: &str, mut bytes: &[u8]) {
        if !self.rest.is_empty() {
            let Some(i) = memchr(b'\n', bytes) else {
                self.rest.extend_from_slice(bytes);
                return;
            };
            let mut line = std::mem::take(&mut self.rest);
            line.extend_from_slice(&bytes[..i]);
            self.take(name, &line);
            bytes = &bytes[i + 1..];
        }
        while let Some(i) = memchr(b'\n', bytes) {
            self.take(name, &bytes[..i]);
            bytes = &bytes[i + 1..];
        }
        self.rest.extend_from_slice(bytes);
    }

    /// The reading of the complete lines.
    pub fn parser(&self) -> &P {
        &self.parser
    }

    /// The seq of the last complete line handed on: what changed later has a greater one.
    pub fn mark(&self) -> u64 {
        self.seq
    }

    /// The reading as a whole read of the text fed so far gives it: the complete lines, and
    /// the unfinished last one when it is JSON already (a line that is not, or not yet, is a
    /// line being written, and is left out).
    pub fn now(&self, name: &str) -> std::borrow::Cow<'_, P> {
        use std::borrow::Cow;
        let Ok(line) = std::str::from_utf8(&self.rest) else {
            // a character cut in two: being written
            return Cow::Borrowed(&self.parser);
        };
        let line = line.trim_end_matches(['\n', '\r']);
        if line.trim().is_empty() {
            return Cow::Borrowed(&self.parser);
        }
        let n = self.lines + 1;
        let rec = match serde_json::from_str::<Value>(line) {
            Ok(v) if v.is_object() => Ok(v),
            Ok(_) => Err(format!("{name}:{n}: not a JSON object")),
            Err(_) => return Cow::Borrowed(&self.parser),
        };
        let mut p = self.parser.clone();
        p.line(name, n, next_seq(), rec);
        Cow::Owned(p)
    }

    /// One complete line, without its newline.
    fn take(&mut self, name: &str, raw: &[u8]) {
        self.lines += 1;
        let n = self.lines;
        let rec = match std::str::from_utf8(raw) {
            Err(_) => Err(format!("{name}:{n}: not UTF-8")),
            Ok(line) => {
                let line = line.trim_end_matches(['\n', '\r']);
                if line.trim().is_empty() {
                    return;
                }
                match serde_json::from_str::<Value>(line) {
                    Ok(v) if v.is_object() => Ok(v),
                    Ok(_) => Err(format!("{name}:{n}: not a JSON object")),
                    Err(e) => Err(format!("{name}:{n}: not JSON: {e}")),
                }
            }
        };
        self.seq = next_seq();
        self.parser.line(name, n, self.seq, rec);
    }
}

/// The reading of a whole JSON Lines text.
pub fn parse_text<P: Parse>(name: &str, text: &str) -> P {
    let mut l = Lines::<P>::default();
    l.push(name, text.as_bytes());
    l.now(name).into_owned()
}

fn memchr(b: u8, bytes: &[u8]) -> Option<usize> {
    bytes.iter().position(|&x| x == b)
}

/// A transcript kept open for follow mode and not read for this long is forgotten (follow mode
/// forgets a session unlisted for an hour too); one read again later is read whole.
pub const KEEP_UNREAD: std::time::Duration = std::time::Duration::from_secs(3600);

/// What a source of records kept open has read of its files, by key (a session, a file): each
/// entry read at most once between refreshes, and forgotten once not read for
/// [`KEEP_UNREAD`].
pub struct KeptReads<K, T> {
    /// Each entry, whether it was read since the last refresh, and when it was last asked for.
    map: std::collections::HashMap<K, (T, bool, std::time::Instant)>,
}

impl<K, T> Default for KeptReads<K, T> {
    fn default() -> Self {
        KeptReads {
            map: std::collections::HashMap::new(),
        }
    }
}

impl<K: std::hash::Hash + Eq + Clone, T: Default> KeptReads<K, T> {
    /// The entry of `key`, brought up to date by `update` unless it was since the last
    /// refresh (a new one starts from its default); one whose update fails is forgotten.
    pub fn read<E>(
        &mut self,
        key: &K,
        update: impl FnOnce(&mut T) -> Result<(), E>,
    ) -> Result<&T, E> {
        let now = std::time::Instant::now();
        let e = self
            .map
            .entry(key.clone())
            .or_insert_with(|| (T::default(), false, now));
        e.2 = now;
        if !e.1 {
            if let Err(why) = update(&mut e.0) {
                self.map.remove(key);
                return Err(why);
            }
            e.1 = true;
        }
        Ok(&self.map[key].0)
    }

    pub fn get(&self, key: &K) -> Option<&T> {
        self.map.get(key).map(|e| &e.0)
    }

    /// The entries read since the last refresh.
    pub fn fresh(&self) -> impl Iterator<Item = (&K, &T)> {
        self.map.iter().filter(|(_, e)| e.1).map(|(k, e)| (k, &e.0))
    }

    /// Every entry to be read again when next asked for (what was appended since); those not
    /// asked for in [`KEEP_UNREAD`] forgotten.
    pub fn refresh(&mut self) {
        self.map.retain(|_, e| {
            e.1 = false;
            e.2.elapsed() < KEEP_UNREAD
        });
    }
}

/// Counts the calls of `calls` that landed a change during `turn` (at or after its start; each
/// call once: the caller gives each only once per turn).
pub fn land_turn(turn: &mut crate::record::Turn, calls: &[Call]) {
    let start = turn.start;
    for c in calls.iter().filter(|c| c.landed && c.t >= start) {
        turn.land(crate::detect::target::describe(&c.tool, &c.args, None));
    }
}

/// Does a command run `git commit` (not `git commit-tree` and the like)?
pub fn is_git_commit(cmd: &str) -> bool {
    let mut rest = cmd;
    while let Some(i) = rest.find("git") {
        let after = &rest[i + 3..];
        let words: Vec<&str> = after.split_whitespace().take(8).collect();
        // `git -C dir commit`, `git -c k=v commit`: skip global options and their values.
        let mut j = 0;
        while j < words.len() && words[j].starts_with('-') {
            j += if matches!(words[j], "-C" | "-c") {
                2
            } else {
                1
            };
        }
        if words.get(j) == Some(&"commit") {
            return true;
        }
        rest = after;
    }
    false
}

/// The call a tool still runs, as activity records say it: a Bash with its timeout (its own,
/// else the default).
pub fn running(c: &Call) -> crate::record::Running {
    use crate::vocab::{Arg, Tool, BASH_TIMEOUT_MS};
    crate::record::Running {
        tool: c.tool.clone(),
        t: c.t,
        timeout: (Tool::of(&c.tool) == Tool::Bash).then(|| {
            c.args
                .get(Arg::Timeout.key())
                .and_then(Value::as_i64)
                .unwrap_or(BASH_TIMEOUT_MS)
        }),
        ..crate::record::Running::default()
    }
}

/// How many bytes before the end of what was read are kept to tell a file appended to from
/// one rewritten since (the same inode, no shorter, but other bytes where the read ended).
const WINDOW: usize = 64;

/// A transcript file read as it grows: what was read is kept with its reading, and a read
/// after the file changed parses only the bytes appended since ([`Lines`]). A file replaced
/// (another inode), truncated (shorter than what was read) or rewritten (the bytes just before
/// where the read ended differ) is read again whole.
#[derive(Default)]
pub struct Tail<P> {
    lines: Lines<P>,
    /// Device, inode, length and modification time when last read (`None`: never read).
    stamp: Option<(u64, u64, u64, Option<std::time::SystemTime>)>,
    /// Bytes read (the complete lines and the unfinished one).
    read: u64,
    /// The last bytes read, at most [`WINDOW`].
    window: Vec<u8>,
    /// Bytes parsed by the last [`Tail::update`] (0 when the file had not changed).
    pub parsed: u64,
}

impl<P: Parse> Tail<P> {
    /// Reads what was appended to the file at `path` (`name`: how problems name it) since the
    /// last read, or all of it the first time and when it was replaced or rewritten.
    pub fn update(&mut self, path: &Path, name: &str) -> std::io::Result<()> {
        use std::io::{Read as _, Seek, SeekFrom};
        use std::os::unix::fs::MetadataExt;
        self.parsed = 0;
        let mut f = std::fs::File::open(path)?;
        let m = f.metadata()?;
        let stamp = (m.dev(), m.ino(), m.len(), m.modified().ok());
        if self.stamp == Some(stamp) {
            return Ok(());
        }
        let same = self
            .stamp
            .is_some_and(|(dev, ino, _, _)| (dev, ino) == (stamp.0, stamp.1));
        let mut fresh = !same || stamp.2 < self.read;
        if !fresh && !self.window.is_empty() {
            let mut was = vec![0; self.window.len()];
            f.seek(SeekFrom::Start(self.read - was.len() as u64))?;
            fresh = f.read_exact(&mut was).is_err() || was != self.window;
        }
        if fresh {
            self.lines = Lines::default();
            self.read = 0;
            self.window.clear();
            f.seek(SeekFrom::Start(0))?;
        }
        self.stamp = Some(stamp);
        let mut buf = vec![0; 1 << 20];
        loop {
            let k = match f.read(&mut buf) {
                Ok(0) => break,
                Ok(k) => k,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            let chunk = &buf[..k];
            self.lines.push(name, chunk);
            self.read += k as u64;
            self.parsed += k as u64;
            if k >= WINDOW {
                self.window.clear();
                self.window.extend_from_slice(&chunk[k - WINDOW..]);
            } else {
                self.window.extend_from_slice(chunk);
                let over = self.window.len().saturating_sub(WINDOW);
                self.window.drain(..over);
            }
        }
        Ok(())
    }

    pub fn lines(&self) -> &Lines<P> {
        &self.lines
    }
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

/// Helpers for the readers' tests: a file written in pieces.
#[cfg(test)]
pub(crate) mod grow {
    use std::path::Path;

    /// About `n` cut points in `bytes`, at arbitrary places (a fixed seed: the same each run),
    /// some a byte apart; and, among them, places that split a line from its newline only and
    /// that split a character in two; its length last.
    pub fn cuts(bytes: &[u8], n: usize, seed: u64) -> Vec<usize> {
        let len = bytes.len().max(1);
        let mut x = seed | 1;
        let mut next = || {
            // xorshift64
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut out: Vec<usize> = (0..n).map(|_| (next() % len as u64) as usize).collect();
        let near: Vec<usize> = out.iter().step_by(5).map(|c| c + 1).collect();
        out.extend(near);
        let newlines = bytes.iter().enumerate().filter(|(_, &b)| b == b'\n');
        out.extend(newlines.step_by(3).map(|(i, _)| i));
        // a UTF-8 continuation byte: a character's first byte before it
        let inside = bytes.iter().enumerate().filter(|(_, &b)| b & 0xC0 == 0x80);
        out.extend(inside.step_by(4).map(|(i, _)| i));
        out.push(bytes.len());
        out.retain(|&c| c <= bytes.len());
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Appends `bytes` to the file at `path` (made when missing).
    pub fn append(path: &Path, bytes: &[u8]) {
        use std::io::Write;
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap();
        f.write_all(bytes).unwrap();
    }

    /// A fixture under `fixtures/agents/`.
    pub fn fixture(rel: &str) -> Vec<u8> {
        let p = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("fixtures/agents")
            .join(rel);
        std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reading that keeps what it was fed.
    #[derive(Clone, Default)]
    struct Kept(Vec<Result<(usize, Value), String>>);

    impl Parse for Kept {
        fn line(&mut self, _: &str, n: usize, _: u64, rec: Result<Value, String>) {
            self.0.push(rec.map(|v| (n, v)));
        }
    }

    fn records(text: &str) -> Vec<Result<(usize, Value), String>> {
        parse_text::<Kept>("t.jsonl", text).0
    }

    #[test]
    fn a_line_that_is_not_json_is_named_unless_it_is_the_unfinished_last_one() {
        let (got, problems): (Vec<_>, Vec<_>) = records("{\"a\":1}\nnope\n[1]\n{\"b\":2}\n{\"c\":")
            .into_iter()
            .partition(Result::is_ok);
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
        // a last line that is whole but for its newline is read; blank lines are counted
        let got = records("{\"a\":1}\r\n\n{\"b\":2}");
        assert_eq!(
            got.iter()
                .map(|r| r.as_ref().unwrap().0)
                .collect::<Vec<_>>(),
            [1, 3]
        );
        // bytes that are not UTF-8 spoil their line only
        let mut l = Lines::<Kept>::default();
        l.push("t.jsonl", b"{\"a\":1}\n\xff\n{\"b\":2}\n");
        assert_eq!(l.parser().0[1], Err("t.jsonl:2: not UTF-8".to_string()));
        assert_eq!(l.parser().0.len(), 3);
    }

    /// Issue 39: a text fed in pieces cut anywhere (in a line, in a character) reads as the
    /// whole text does, at every cut.
    #[test]
    fn a_text_fed_in_pieces_reads_as_the_whole_text() {
        let text = "{\"a\":\"é\"}\n\n{\"b\":2}\r\nnope\n{\"c\":3}";
        let bytes = text.as_bytes();
        for cut in 0..=bytes.len() {
            let mut l = Lines::<Kept>::default();
            l.push("t.jsonl", &bytes[..cut]);
            let whole = std::str::from_utf8(&bytes[..cut]).ok().map(records);
            if let Some(whole) = &whole {
                assert_eq!(&l.now("t.jsonl").0, whole, "cut at {cut}");
            }
            l.push("t.jsonl", &bytes[cut..]);
            assert_eq!(l.now("t.jsonl").0, records(text), "cut at {cut}");
        }
    }

    /// A file appended to is read from where the last read ended; one replaced, truncated or
    /// rewritten is read again whole.
    #[test]
    fn a_file_read_as_it_grows_is_read_again_whole_when_replaced_or_rewritten() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("t.jsonl");
        let mut t = Tail::<Kept>::default();
        let values = |t: &Tail<Kept>| -> Vec<Value> {
            t.lines()
                .now("t")
                .0
                .iter()
                .map(|r| r.as_ref().unwrap().1.clone())
                .collect()
        };
        std::fs::write(&f, "{\"a\":1}\n{\"b\":").unwrap();
        t.update(&f, "t").unwrap();
        assert_eq!(values(&t), [serde_json::json!({"a": 1})]);
        let mut w = std::fs::OpenOptions::new().append(true).open(&f).unwrap();
        std::io::Write::write_all(&mut w, b"2}\n{\"c\":3}\n").unwrap();
        t.update(&f, "t").unwrap();
        assert_eq!(t.parsed, 11);
        assert_eq!(values(&t).len(), 3);
        // unchanged: nothing read
        t.update(&f, "t").unwrap();
        assert_eq!(t.parsed, 0);
        // rewritten in place, longer: the bytes where the read ended differ
        std::fs::write(&f, "{\"x\":1}\n{\"y\":2222}\n{\"z\":3}\n").unwrap();
        t.update(&f, "t").unwrap();
        assert_eq!(values(&t).len(), 3);
        assert_eq!(values(&t)[0], serde_json::json!({"x": 1}));
        // truncated
        std::fs::write(&f, "{\"q\":1}\n").unwrap();
        t.update(&f, "t").unwrap();
        assert_eq!(values(&t), [serde_json::json!({"q": 1})]);
        // replaced by another file
        let g = dir.path().join("u.jsonl");
        std::fs::write(&g, "{\"r\":1}\n{\"s\":1}\n").unwrap();
        std::fs::rename(&g, &f).unwrap();
        t.update(&f, "t").unwrap();
        assert_eq!(values(&t)[0], serde_json::json!({"r": 1}));
    }

    #[test]
    fn times_read_as_milliseconds() {
        let v = Value::from("2026-12-04T18:23:23.131Z");
        assert_eq!(ms(Some(&v)), Some(1_796_408_603_131));
        assert_eq!(ms(Some(&Value::from("yesterday"))), None);
    }

    #[test]
    fn git_commit_is_found_in_chains() {
        assert!(is_git_commit("git add -A && git commit -q -m 'x'"));
        assert!(is_git_commit("git -C /p commit -m x"));
        assert!(!is_git_commit("git commit-tree abc"));
        assert!(!is_git_commit("git log --oneline"));
    }
}
