//! Benchmark of one change of a long Claude Code or Codex session in follow mode (issue 39): the
//! cost of reading a few lines an agent appended, before (the session's files read whole at every
//! change, as follow mode did until the readers read as files grow) and after (what was appended
//! read, the rest kept).
//!
//! The long sessions are the real transcripts of `fixtures/agents/` repeated, with their call ids
//! renamed in each copy: Claude Code's `transcript-main.jsonl` to about 45 MB (`FT_CLAUDE_MB`),
//! Codex's `rollout-main.jsonl` to about 126 MB (`FT_CODEX_MB`), in a temporary HOME-like folder
//! removed at the end. A change appends the next few lines of the same transcript (a call and its
//! result, about 10 KB), then the session is read as follow mode reads it: through the agent's
//! directory ([`Records::read_since`] with the mark of the last read, after
//! [`Records::refresh`]). Prints, per agent: wall time per change (median of `FT_CHANGES`,
//! default 20), bytes parsed per change, and the peak RSS of each way (the high-water mark reset
//! before each, by `/proc/self/clear_refs`).
//!
//!     cargo bench --bench follow_transcripts
//!     FT_CLAUDE_MB=10 FT_CODEX_MB=10 cargo bench --bench follow_transcripts     (quicker)

use oc_watchdog::sources::claude_code::home::ClaudeHome;
use oc_watchdog::sources::claude_code::{self, SessionFiles};
use oc_watchdog::sources::codex::home::CodexHome;
use oc_watchdog::sources::codex::{self, Parser};
use oc_watchdog::sources::transcript::Tail;
use oc_watchdog::sources::Records;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn env_num(key: &str, default: usize) -> usize {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn fixture(rel: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/agents")
        .join(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Copy `k` of a transcript's lines, its call ids made its own (`prefix` starts them all).
fn copy(lines: &[&str], prefix: &str, k: usize) -> String {
    let mut out = String::new();
    for l in lines {
        out.push_str(&l.replace(prefix, &format!("{prefix}c{k}_")));
        out.push('\n');
    }
    out
}

/// Writes copies of `lines` (the first `skip` only once: a session's opening) to `path` until
/// it holds `mb` MB; returns the copies written.
fn grow(path: &Path, lines: &[&str], skip: usize, prefix: &str, mb: usize) -> usize {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut size = 0;
    let mut k = 0;
    while size < mb * 1_000_000 {
        let part = if k == 0 { lines } else { &lines[skip..] };
        let text = copy(part, prefix, k);
        f.write_all(text.as_bytes()).unwrap();
        size += text.len();
        k += 1;
    }
    f.flush().unwrap();
    k
}

fn append(path: &Path, text: &str) {
    let mut f = std::fs::OpenOptions::new().append(true).open(path).unwrap();
    f.write_all(text.as_bytes()).unwrap();
}

/// The peak resident set of this process since the last reset, in MB (`None`: no /proc).
fn peak_mb() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let kb: f64 = s
        .lines()
        .find(|l| l.starts_with("VmHWM:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    Some(kb / 1024.0)
}

fn reset_peak() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// The next change: `per` lines of the transcript's copy `k`, from line `at`.
struct Changes<'a> {
    lines: &'a [&'a str],
    skip: usize,
    prefix: &'a str,
    k: usize,
    at: usize,
    per: usize,
}

impl Changes<'_> {
    fn next(&mut self) -> String {
        let body = &self.lines[self.skip..];
        let mut out = String::new();
        for _ in 0..self.per {
            if self.at == body.len() {
                self.at = 0;
                self.k += 1;
            }
            out.push_str(&copy(&body[self.at..=self.at], self.prefix, self.k));
            self.at += 1;
        }
        out
    }
}

struct Figures {
    wall: Duration,
    parsed: u64,
    peak: Option<f64>,
    /// Calls given over all the changes.
    calls: usize,
}

fn print(agent: &str, size: u64, how: &str, f: &Figures) {
    println!(
        "{agent:<12} {:>6.1} MB  {how:<36} {:>9.2} ms/change  {:>11} bytes parsed/change  peak RSS {:>7}  ({} calls given in all)",
        size as f64 / 1e6,
        f.wall.as_secs_f64() * 1000.0,
        f.parsed,
        f.peak.map_or("?".into(), |p| format!("{p:.0} MB")),
        f.calls,
    );
}

fn main() {
    let changes = env_num("FT_CHANGES", 20);
    let base = tempfile::tempdir().unwrap();
    println!(
        "one change of a long session ({changes} changes, median; a change appends six lines)"
    );

    // Claude Code: ~/.claude/projects/<dir>/<session>.jsonl
    let text = fixture("claude-code/transcript-main.jsonl");
    let lines: Vec<&str> = text.lines().collect();
    let sid = "69dd091f-9c50-4e7e-842e-220de441ed90";
    let home = base.path().join("claude");
    let file = home
        .join("projects/-home-user-src-proj-c4")
        .join(format!("{sid}.jsonl"));
    // the opening (queue operations, the prompt) once; then the calls again and again
    let skip = 3;
    let k = grow(&file, &lines, skip, "toolu_", env_num("FT_CLAUDE_MB", 45));
    let mut ch = Changes {
        lines: &lines,
        skip,
        prefix: "toolu_",
        k,
        at: 0,
        per: 6,
    };
    let size = std::fs::metadata(&file).unwrap().len();
    // after: the directory kept open, refreshed at each change
    reset_peak();
    let mut src = ClaudeHome::new(&home);
    let mut mark = src.read_since(sid, 0).unwrap().unwrap().mark;
    let mut files = SessionFiles::default();
    files.update(&file, "s").unwrap();
    let (mut walls, mut parsed, mut calls) = (Vec::new(), 0, 0);
    for _ in 0..changes {
        append(&file, &ch.next());
        let t0 = Instant::now();
        src.refresh();
        let t = src.read_since(sid, mark).unwrap().unwrap();
        walls.push(t0.elapsed());
        mark = t.mark;
        calls += t.calls.len();
        files.update(&file, "s").unwrap();
        parsed += files.parsed();
    }
    let after = Figures {
        wall: median(walls),
        parsed: parsed / changes as u64,
        peak: peak_mb(),
        calls,
    };
    drop((src, files));
    // before: read whole at every change (a source opened afresh, as each batch did)
    reset_peak();
    let (mut walls, mut calls) = (Vec::new(), 0);
    for _ in 0..changes.min(5) {
        append(&file, &ch.next());
        let t0 = Instant::now();
        // as the reader before did: the file's text, then every line of it
        let text = std::fs::read_to_string(&file).unwrap();
        let r = claude_code::read("s", &text, &[]);
        walls.push(t0.elapsed());
        calls += r.sessions[0].calls.len();
    }
    let before = Figures {
        wall: median(walls),
        parsed: std::fs::metadata(&file).unwrap().len(),
        peak: peak_mb(),
        calls,
    };
    print(
        "claude-code",
        size,
        "before: read whole at each change",
        &before,
    );
    print("claude-code", size, "after: what was appended", &after);
    std::fs::remove_dir_all(&home).unwrap();

    // Codex: ~/.codex/sessions/Y/M/D/rollout-<time>-<thread>.jsonl
    let text = fixture("codex/rollout-main.jsonl");
    let lines: Vec<&str> = text.lines().collect();
    let tid = "01a2424e-bb0a-7271-9868-8995912d9079";
    let home = base.path().join("codex");
    let file: PathBuf = home
        .join("sessions/2026/12/04")
        .join(format!("rollout-2026-12-04T18-26-25-{tid}.jsonl"));
    let skip = 1;
    let k = grow(&file, &lines, skip, "call_s", env_num("FT_CODEX_MB", 126));
    let mut ch = Changes {
        lines: &lines,
        skip,
        prefix: "call_s",
        k,
        at: 0,
        per: 6,
    };
    let size = std::fs::metadata(&file).unwrap().len();
    reset_peak();
    let mut src = CodexHome::new(&home);
    let mut mark = src.read_since(tid, 0).unwrap().unwrap().mark;
    let mut tail = Tail::<Parser>::default();
    tail.update(&file, "r").unwrap();
    let (mut walls, mut parsed, mut calls) = (Vec::new(), 0, 0);
    for _ in 0..changes {
        append(&file, &ch.next());
        let t0 = Instant::now();
        src.refresh();
        let t = src.read_since(tid, mark).unwrap().unwrap();
        walls.push(t0.elapsed());
        mark = t.mark;
        calls += t.calls.len();
        tail.update(&file, "r").unwrap();
        parsed += tail.parsed;
    }
    let after = Figures {
        wall: median(walls),
        parsed: parsed / changes as u64,
        peak: peak_mb(),
        calls,
    };
    drop((src, tail));
    reset_peak();
    let (mut walls, mut calls) = (Vec::new(), 0);
    for _ in 0..changes.min(5) {
        append(&file, &ch.next());
        let t0 = Instant::now();
        let text = std::fs::read_to_string(&file).unwrap();
        let r = codex::read("r", &text);
        walls.push(t0.elapsed());
        calls += r.sessions[0].calls.len();
    }
    let before = Figures {
        wall: median(walls),
        parsed: std::fs::metadata(&file).unwrap().len(),
        peak: peak_mb(),
        calls,
    };
    print("codex", size, "before: read whole at each change", &before);
    print("codex", size, "after: what was appended", &after);
}
