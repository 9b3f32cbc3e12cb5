//! The detector's accuracy, measured where it was not tuned: every labelled corpus, per source
//! (the session lines' `corpus` field: one agent and model), beside the baseline to beat,
//! ForgeCode's doom-loop rule computed in the same run on the same calls.
//!
//! A loop is caught **on time** when the first flag comes at or after its labelled start
//! (`flag_after`), **early** when before it (a false alarm at that moment, not a catch), and
//! **missed** when it never flags; a run labelled `no_flag`, or any run of the productive
//! corpus, that flags at all is a **false flag** (a session a labelled corpus leaves unlabelled
//! is not counted). A flag after the label's `flag_by` (the
//! fixture's loops that must be told within so many calls) counts as missed. "Calls in" is the median position of the
//! on-time first flags in their loops (1 = the loop's first call).
//!
//!     cargo bench --bench accuracy            # release build
//!     cargo test --bench accuracy             # the same report from a debug build (tests/run)
//!
//! The corpora: `fixtures/labelled.jsonl`, and from `../shared/corpora` (or `$OC_SHARED/corpora`)
//! `external-dev.jsonl`, `external4-dev.jsonl` and `miniswe-productive-dev.jsonl`; a missing one
//! is said and skipped. With `ACCURACY_STRICT=1` (tests/run) it exits 1 unless every source has
//! no early flag, no false flag, and at least as many loops on time as the baseline, and,
//! when every corpus is there, unless the median first flag is at most call 6 of its loop. `ACCURACY_SET="KEY=VALUE ..."` tries thresholds
//! (progress-detect's `--set`) on every corpus at once; `ACCURACY_VERBOSE=1` adds a line per run.
//! `ACCURACY_BEFORE=PATH` runs another progress-detect (an older build) on the same corpora and
//! says, on the loops that one catches on time, how many this build catches and how early
//! (the bar: not later than before on what was already caught).

use clap::Parser;
use oc_watchdog::cli::Out;
use oc_watchdog::cmd::progress_detect as cmd;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// What one detector did on one source.
#[derive(Default, Clone)]
struct Tally {
    loops: u32,
    on_time: u32,
    early: u32,
    missed: u32,
    runs: u32,
    false_flags: u32,
    positions: Vec<u64>,
}

impl Tally {
    /// `start`: the loop's first call, and the times it must flag at or after and by, if said.
    fn add(&mut self, expect_flag: bool, first: Option<(u64, i64)>, start: &Start) {
        if !expect_flag {
            self.runs += 1;
            self.false_flags += first.is_some() as u32;
            return;
        }
        self.loops += 1;
        match start.judge(first) {
            Catch::Missed => self.missed += 1,
            Catch::Early => self.early += 1,
            Catch::OnTime(at) => {
                self.on_time += 1;
                self.positions.push(at);
            }
        }
    }
    fn merge(&mut self, o: &Tally) {
        self.loops += o.loops;
        self.on_time += o.on_time;
        self.early += o.early;
        self.missed += o.missed;
        self.runs += o.runs;
        self.false_flags += o.false_flags;
        self.positions.extend(&o.positions);
    }
    fn median(&self) -> Option<f64> {
        median(&self.positions)
    }
    fn columns(&self) -> String {
        let median = self.median().map_or("-".into(), |m| format!("{m}"));
        format!(
            "{:>3} {:>5} {:>3} {:>3} {:>7} {:>5}",
            self.on_time,
            self.early,
            self.missed,
            self.false_flags,
            format!("/{}", self.runs),
            median
        )
    }
}

/// Where a labelled loop starts: its first call (1-based), and the times a flag must come at or
/// after (`flag_after`) and by (`flag_by`), where the label says.
struct Start {
    call: u64,
    after: Option<i64>,
    by: Option<i64>,
}

/// One session of a corpus: its label and its calls' (tool, canonical args, time).
struct Run {
    source: String,
    /// The label: a loop, a productive run, or none (a session the labels leave out, unless the
    /// whole corpus is of productive runs).
    expect: Option<bool>,
    flag_after: Option<i64>,
    flag_by: Option<i64>,
    calls: Vec<(String, String, i64)>,
}

/// What a first flag is for a labelled loop.
enum Catch {
    Missed,
    Early,
    /// On time, at this call of the loop (1 = its first).
    OnTime(u64),
}

impl Start {
    fn judge(&self, first: Option<(u64, i64)>) -> Catch {
        match first {
            None => Catch::Missed,
            Some((_, t)) if self.after.is_some_and(|after| t < after) => Catch::Early,
            // a flag later than the label allows (the fixture's flag_by) is too late to count
            Some((_, t)) if self.by.is_some_and(|by| t > by) => Catch::Missed,
            Some((index, _)) => Catch::OnTime(index.saturating_sub(self.call) + 1),
        }
    }
}

fn median(positions: &[u64]) -> Option<f64> {
    let mut p = positions.to_vec();
    p.sort_unstable();
    let n = p.len();
    (n > 0).then(|| {
        if n % 2 == 1 {
            p[n / 2] as f64
        } else {
            (p[n / 2 - 1] + p[n / 2]) as f64 / 2.0
        }
    })
}

/// This build against another progress-detect (`ACCURACY_BEFORE`) on the loops that one
/// catches on time: the "not later than today on the loops it already catches".
#[derive(Default)]
struct Versus {
    before: Vec<u64>,
    now: Vec<u64>,
    earlier: u32,
    later: u32,
    lost: Vec<String>,
    /// Loops this build catches on time and the other does not.
    gained: u32,
}

impl Versus {
    fn add(&mut self, id: &str, before: Catch, now: Catch) {
        match (before, now) {
            (Catch::OnTime(b), Catch::OnTime(n)) => {
                self.before.push(b);
                self.now.push(n);
                self.earlier += (n < b) as u32;
                self.later += (n > b) as u32;
            }
            (Catch::OnTime(b), _) => {
                self.before.push(b);
                self.lost.push(id.to_string());
            }
            (_, Catch::OnTime(_)) => self.gained += 1,
            _ => {}
        }
    }
    fn say(&self, bin: &str) {
        let m = |p: &[u64]| median(p).map_or("-".into(), |m| m.to_string());
        println!(
            "against {bin}: of the {} loops it catches on time, this build catches {} (median \
             call {}; its own {}): earlier on {}, later on {}, the same on {}; missed or early: {}",
            self.before.len(),
            self.now.len(),
            m(&self.now),
            m(&self.before),
            self.earlier,
            self.later,
            self.now.len() as u32 - self.earlier - self.later,
            if self.lost.is_empty() {
                "none".to_string()
            } else {
                self.lost.join(", ")
            }
        );
        println!(
            "  and {} loops on time that it does not catch on time",
            self.gained
        );
    }
}

impl Run {
    fn start(&self) -> Start {
        let call = self.flag_after.map_or(1, |after| {
            self.calls
                .iter()
                .position(|c| c.2 >= after)
                .map_or(self.calls.len() as u64 + 1, |i| i as u64 + 1)
        });
        Start {
            call,
            after: self.flag_after,
            by: self.flag_by,
        }
    }
}

fn read_runs(path: &Path) -> (Vec<String>, BTreeMap<String, Run>) {
    let text = std::fs::read_to_string(path).expect("read corpus");
    let mut order = Vec::new();
    let mut runs: BTreeMap<String, Run> = BTreeMap::new();
    for (n, line) in text.lines().enumerate() {
        let v: Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("{}:{}: {e}", path.display(), n + 1));
        let s = |k: &str| v.get(k).and_then(Value::as_str).map(String::from);
        match s("kind").as_deref() {
            Some("session") => {
                let id = s("id").expect("session id");
                order.push(id.clone());
                runs.insert(
                    id,
                    Run {
                        source: s("corpus").unwrap_or_else(|| "opencode (fixture)".into()),
                        expect: s("expect").map(|e| e == "flag"),
                        flag_after: v.get("flag_after").and_then(Value::as_i64),
                        flag_by: v.get("flag_by").and_then(Value::as_i64),
                        calls: Vec::new(),
                    },
                );
            }
            Some("call") => {
                let run = runs
                    .get_mut(&s("session").expect("call session"))
                    .expect("session first");
                // serde_json's maps keep keys sorted: the string is canonical JSON
                let args = v.get("args").cloned().unwrap_or(Value::Null).to_string();
                let t = v.get("t").and_then(Value::as_i64).unwrap_or(0);
                run.calls.push((s("tool").unwrap_or_default(), args, t));
            }
            _ => {}
        }
    }
    // a corpus with no label at all is one of productive runs (the false-flag rate's)
    if runs.values().all(|r| r.expect.is_none()) {
        for r in runs.values_mut() {
            r.expect = Some(false);
        }
    }
    (order, runs)
}

/// How many times the trailing block of `p` entries repeats at the end of `seq`, a trailing
/// partial block that matches the block's start counting as one (ForgeCode's
/// `count_recent_pattern_repetitions`).
fn forge_count<T: PartialEq>(seq: &[T], p: usize) -> usize {
    let total = seq.len();
    if p == 0 || total < p {
        return 0;
    }
    let (mut reps, mut check) = (0, total);
    let partial = total % p;
    if partial != 0 {
        if total < p + partial {
            return 0;
        }
        let ps = total - partial - p;
        if seq[total - partial..] != seq[ps..ps + partial] {
            return 0;
        }
        reps += 1;
        check = total - partial;
    }
    let start = check - p;
    let pattern = &seq[start..check];
    reps += 1;
    let mut pos = start;
    while pos >= p {
        pos -= p;
        if &seq[pos..pos + p] != pattern {
            break;
        }
        reps += 1;
    }
    reps
}

/// ForgeCode's doom-loop rule: the first call (1-based index, time) after which the trailing
/// pattern of (tool, arguments) repeats at least 3 times.
fn forgecode(calls: &[(String, String, i64)]) -> Option<(u64, i64)> {
    let seq: Vec<(&str, &str)> = calls.iter().map(|c| (&c.0[..], &c.1[..])).collect();
    (3..=seq.len()).find_map(|n| {
        (1..n)
            .any(|p| forge_count(&seq[..n], p) >= 3)
            .then(|| (n as u64, calls[n - 1].2))
    })
}

/// progress-detect's first flag of each session: (call index, time), run as the command runs.
fn detector(path: &Path) -> BTreeMap<String, Option<(u64, i64)>> {
    let mut argv = vec!["progress-detect".into(), path.as_os_str().to_owned()];
    for set in std::env::var("ACCURACY_SET")
        .unwrap_or_default()
        .split_whitespace()
    {
        argv.extend(["--set".into(), set.into()]);
    }
    let args = cmd::Args::parse_from(argv);
    let (mut out, buf) = Out::buffer();
    cmd::run(args, &mut std::io::empty(), &mut out).expect("progress-detect");
    out.flush().expect("flush");
    first_flags(&buf.text())
}

/// Another progress-detect's first flags (`ACCURACY_BEFORE`: an older build, say), run as a
/// command on the same corpus.
fn detector_at(bin: &str, path: &Path) -> BTreeMap<String, Option<(u64, i64)>> {
    let out = std::process::Command::new(bin)
        .arg(path)
        .env(
            "XDG_CONFIG_HOME",
            std::env::var_os("XDG_CONFIG_HOME").unwrap(),
        )
        .output()
        .unwrap_or_else(|e| panic!("{bin}: {e}"));
    first_flags(&String::from_utf8_lossy(&out.stdout))
}

/// Each session's first flag (call index, time) from progress-detect's verdicts.
fn first_flags(text: &str) -> BTreeMap<String, Option<(u64, i64)>> {
    let mut first = BTreeMap::new();
    for line in text.lines() {
        let v: Value = serde_json::from_str(line).expect("verdict");
        if v["kind"] != "verdict" {
            continue;
        }
        let f = &v["first_flag"];
        let flag = f["index"]
            .as_u64()
            .map(|i| (i, f["t"].as_i64().unwrap_or(0)));
        first.insert(v["session"].as_str().unwrap_or("").to_string(), flag);
    }
    first
}

/// The most calls into a loop its median first flag may come at, over every corpus.
const MEDIAN_BAR: f64 = 6.0;

fn main() {
    // a developer's own config must not change the figures
    let home = tempfile::tempdir().expect("tempdir");
    std::env::set_var("XDG_CONFIG_HOME", home.path());
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let shared = std::env::var_os("OC_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("../shared"));
    let corpora = [
        root.join("fixtures/labelled.jsonl"),
        shared.join("corpora/external-dev.jsonl"),
        shared.join("corpora/external4-dev.jsonl"),
        shared.join("corpora/miniswe-productive-dev.jsonl"),
    ];
    println!(
        "{:<58} {:>5} | {:<30} | {:<30}",
        "corpus / source", "loops", "progress-detect", "ForgeCode doom-loop rule"
    );
    let head = format!(
        "{:>3} {:>5} {:>3} {:>3} {:>7} {:>5}",
        "on", "early", "mis", "ff", "/runs", "in"
    );
    println!("{:<58} {:>5} | {head} | {head}", "", "");
    let (mut all_ours, mut all_forge) = (Tally::default(), Tally::default());
    let mut failures = Vec::new();
    let before_bin = std::env::var("ACCURACY_BEFORE").ok();
    let mut versus = Versus::default();
    let mut every_corpus = true;
    for path in &corpora {
        if !path.exists() {
            println!("{}: missing, skipped", path.display());
            every_corpus = false;
            continue;
        }
        let (order, runs) = read_runs(path);
        let flags = detector(path);
        let before = before_bin.as_deref().map(|bin| detector_at(bin, path));
        let name = path.file_name().unwrap().to_string_lossy();
        println!("{name}");
        let mut by_source: BTreeMap<&str, (Tally, Tally)> = BTreeMap::new();
        for id in &order {
            let run = &runs[id];
            let Some(expect_flag) = run.expect else {
                continue;
            };
            let start = run.start();
            let ours = flags.get(id).copied().flatten();
            if std::env::var_os("ACCURACY_VERBOSE").is_some() {
                let at = |f: Option<(u64, i64)>| f.map_or("-".into(), |f| f.0.to_string());
                println!(
                    "  {id}: {} from call {}, progress-detect {}, ForgeCode {}",
                    if expect_flag { "loop" } else { "no loop" },
                    start.call,
                    at(ours),
                    at(forgecode(&run.calls))
                );
            }
            if let (Some(before), true) = (&before, expect_flag) {
                let then = before.get(id).copied().flatten();
                versus.add(id, start.judge(then), start.judge(ours));
            }
            let t = by_source.entry(&run.source).or_default();
            t.0.add(expect_flag, ours, &start);
            t.1.add(expect_flag, forgecode(&run.calls), &start);
        }
        for (source, (ours, forge)) in &by_source {
            println!(
                "  {:<56} {:>5} | {} | {}",
                source.chars().take(56).collect::<String>(),
                ours.loops,
                ours.columns(),
                forge.columns()
            );
            if ours.early > 0 || ours.false_flags > 0 || ours.on_time < forge.on_time {
                failures.push(format!(
                    "{name}: {source}: {} early, {} false flag(s), {} on time (ForgeCode {})",
                    ours.early, ours.false_flags, ours.on_time, forge.on_time
                ));
            }
            all_ours.merge(ours);
            all_forge.merge(forge);
        }
    }
    println!(
        "{:<58} {:>5} | {} | {}",
        "all",
        all_ours.loops,
        all_ours.columns(),
        all_forge.columns()
    );
    let median = all_ours.median().unwrap_or(0.0);
    println!(
        "median first flag: call {median} of the loop (the bar: at most {MEDIAN_BAR}; ForgeCode {})",
        all_forge.median().unwrap_or(0.0)
    );
    // the bar is over every labelled corpus: a checkout without shared/ measures the
    // fixture alone, whose median says nothing of it
    if every_corpus && median > MEDIAN_BAR {
        failures.push(format!(
            "median first flag at call {median} of the loop, above {MEDIAN_BAR}"
        ));
    }
    if let Some(bin) = &before_bin {
        versus.say(bin);
    }
    for f in &failures {
        println!("short of the bar: {f}");
    }
    if std::env::var_os("ACCURACY_STRICT").is_some_and(|v| v == "1") && !failures.is_empty() {
        std::process::exit(1);
    }
}
