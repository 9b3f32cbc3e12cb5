//! Benchmark of progress-detect on a generated corpus: 1,000,000 calls over 2,000 interleaved
//! sessions (override with BENCH_CALLS / BENCH_SESSIONS). Prints calls per second for the
//! detector and for the floor no detector can beat: each line read and parsed exactly as
//! progress-detect reads and parses it, and nothing more (also, for reference, the parse into
//! `record::Call`, the contract's type). Wall and CPU seconds, best of five each, run in
//! turns (BENCH_ROUNDS). progress-detect parses on one thread and judges on another, so its
//! wall time can come near the floor's on two cores while its CPU time is the sum of both: the
//! CPU figures say what the detector costs beside the parse, the wall figures how long a run
//! takes. Also the detector on the same lines in session order, one session's
//! calls after another: what the interleaving costs (each call finding its session's state out
//! of the cache) apart from the work a call takes (nearly the same work: a child's landings
//! now come after its parent's calls, so they credit the parent late). Then the
//! detector binary's peak memory, for the corpus and for one a tenth as long (memory should
//! follow sessions x window, not input length).
//!
//! With BENCH_BEFORE=PATH, also the progress-detect binary at PATH (a build of an earlier
//! commit) against this one, as binaries on the same corpus, in turns: how much slower or faster
//! a change made it, measured in one run.
//!
//!     cargo bench --bench detect
//!     BENCH_BEFORE=/tmp/before/progress-detect cargo bench --bench detect

use oc_watchdog::cli::Out;

// the allocator progress-detect ships with, for the floor and the detector alike
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

use oc_watchdog::cmd::progress_detect as cmd;
use oc_watchdog::record::Call;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::time::Instant;

/// Writes a corpus: each session a mix of healthy work (distinct reads, landing edits) and
/// loops (one read or bash repeated), interleaved round-robin like many agents at once, or
/// (`by_session`) the same lines with each session's calls together.
fn generate(path: &Path, calls: usize, sessions: usize, by_session: bool) -> std::io::Result<()> {
    let mut w = BufWriter::new(std::fs::File::create(path)?);
    for s in 0..sessions {
        let agent = if s % 5 == 0 { "explore" } else { "build" };
        writeln!(
            w,
            r#"{{"kind":"session","id":"ses_{s:06}","parent":{},"agent":"{agent}","title":"bench {s}","directory":"/w/p{s}","created":1796000000000,"updated":1796000000000,"status":"busy","source":"http://127.0.0.1:4096","model":"sim/sim-model"}}"#,
            if s % 10 == 9 {
                format!("\"ses_{:06}\"", s - 1)
            } else {
                "null".into()
            }
        )?;
    }
    let per = calls / sessions;
    let order: Vec<(usize, usize)> = if by_session {
        (0..sessions)
            .flat_map(|s| (0..per).map(move |i| (i, s)))
            .collect()
    } else {
        (0..per)
            .flat_map(|i| (0..sessions).map(move |s| (i, s)))
            .collect()
    };
    for (i, s) in order {
        let t = 1_796_000_000_000i64 + (i * sessions + s) as i64;
        let looping = s % 3 == 0 && i > per / 2;
        let (tool, args, landed) = if looping {
            if s % 2 == 0 {
                (
                    "read",
                    format!(r#"{{"filePath":"/w/p{s}/src/navbar.js"}}"#),
                    false,
                )
            } else {
                (
                    "bash",
                    r#"{"command":"python3 -m pytest tests/test_nav.py -x"}"#.to_string(),
                    false,
                )
            }
        } else {
            match i % 4 {
                0 => (
                    "read",
                    format!(
                        r#"{{"filePath":"/w/p{s}/src/f{}.js","offset":{},"limit":50}}"#,
                        i % 17,
                        1 + (i % 9) * 50
                    ),
                    false,
                ),
                1 => (
                    "grep",
                    format!(r#"{{"pattern":"fn{}","include":"*.js"}}"#, i % 23),
                    false,
                ),
                2 => (
                    "edit",
                    format!(
                        r#"{{"filePath":"/w/p{s}/src/f{}.js","oldString":"sha1:{:012x}","newString":"sha1:{:012x}"}}"#,
                        i % 17,
                        i,
                        i + 1
                    ),
                    true,
                ),
                _ => (
                    "bash",
                    format!(r#"{{"command":"node test/run.js --case {}"}}"#, i % 31),
                    false,
                ),
            }
        };
        writeln!(
            w,
            r#"{{"kind":"call","session":"ses_{s:06}","id":"prt_{i:08}_{s:06}","t":{t},"end":{},"tool":"{tool}","args":{args},"status":"completed","landed":{landed},"exit":{},"file_lines":{},"model":"sim/sim-model","cost":0.0021}}"#,
            t + 40,
            if tool == "bash" { "0" } else { "null" },
            if tool == "read" { "300" } else { "null" },
        )?;
    }
    w.flush()
}

/// CPU seconds this process and its waited-for children have used (user + system), from
/// /proc/self/stat: on a machine others are using, the CPU time of a run moves far less than
/// its wall time.
fn cpu_secs() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // the fields after the command name (which is in parentheses and may hold spaces)
    let rest = stat.rsplit_once(')').map_or("", |x| x.1);
    let f: Vec<f64> = rest
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0.0))
        .collect();
    // utime, stime, cutime and cstime are fields 14 to 17 of the whole line, in clock ticks
    // (100 a second on Linux)
    f.get(11..15).map_or(0.0, |t| t.iter().sum::<f64>()) / 100.0
}

/// Runs each of `fs` `rounds` times, taking turns (a slow moment of a shared machine then
/// falls on all of them alike): for each, (its result, best wall seconds, best CPU seconds).
fn best_of(rounds: usize, fs: &[&dyn Fn() -> usize]) -> Vec<(usize, f64, f64)> {
    let mut best = vec![(0, f64::MAX, f64::MAX); fs.len()];
    for _ in 0..rounds {
        for (f, b) in fs.iter().zip(best.iter_mut()) {
            let (t0, c0) = (Instant::now(), cpu_secs());
            let n = f();
            let (wall, cpu) = (t0.elapsed().as_secs_f64(), cpu_secs() - c0);
            *b = (n, b.1.min(wall), b.2.min(cpu));
        }
    }
    best
}

/// The floor: every line parsed the way progress-detect parses it (its `ParsedLine`), and nothing
/// more. Also parsing into `record::Call`, the contract's type, which copies every string.
fn floor(path: &Path, contract: bool) -> usize {
    let mut n = 0;
    // read as progress-detect reads (one reused buffer, UTF-8 checked, line numbers counted)
    oc_watchdog::cli::for_each_line(
        &[path.to_path_buf()],
        &mut std::io::empty(),
        |_, _, line| {
            let call = line.contains("\"kind\":\"call\"");
            if contract {
                if call {
                    let c: Call = serde_json::from_str(line).unwrap();
                    std::hint::black_box(&c);
                }
            } else {
                let c: cmd::ParsedLine = serde_json::from_str(line).unwrap();
                std::hint::black_box(&c);
            }
            n += call as usize;
            Ok(())
        },
    )
    .unwrap();
    n
}

fn detector(path: &Path) -> usize {
    use clap::Parser;
    let args = cmd::Args::parse_from(["progress-detect", path.to_str().unwrap()]);
    let (mut out, buf) = Out::buffer();
    cmd::run(args, &mut std::io::empty(), &mut out).unwrap();
    out.flush().unwrap();
    buf.text().lines().count()
}

/// Runs a progress-detect binary over the corpus; the number of verdicts it wrote.
fn binary(exe: &Path, path: &Path) -> usize {
    let out = std::process::Command::new(exe)
        .arg(path)
        .env("XDG_CONFIG_HOME", "/nonexistent")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}: {:?}", exe.display(), out.status);
    out.stdout.iter().filter(|&&b| b == b'\n').count()
}

/// Runs the binary and samples its peak resident set (VmHWM) until it exits.
fn peak_kb(path: &Path) -> u64 {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_progress-detect"))
        .arg(path)
        .env("XDG_CONFIG_HOME", "/nonexistent")
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let status = format!("/proc/{}/status", child.id());
    let mut peak = 0;
    loop {
        if let Ok(s) = std::fs::read_to_string(&status) {
            if let Some(l) = s.lines().find(|l| l.starts_with("VmHWM:")) {
                let kb: u64 = l.split_whitespace().nth(1).unwrap().parse().unwrap();
                peak = peak.max(kb);
            }
        }
        if child.try_wait().unwrap().is_some() {
            return peak;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

fn main() {
    let calls: usize = std::env::var("BENCH_CALLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let sessions: usize = std::env::var("BENCH_SESSIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000);
    let dir = tempfile::tempdir().unwrap();
    // BENCH_KEEP=DIR keeps the corpus there (for a profiler)
    let keep = std::env::var("BENCH_KEEP")
        .ok()
        .map(std::path::PathBuf::from);
    let big = keep
        .clone()
        .unwrap_or_else(|| dir.path().to_path_buf())
        .join("corpus.jsonl");
    let small = dir.path().join("corpus-tenth.jsonl");
    let ordered = dir.path().join("corpus-by-session.jsonl");
    generate(&big, calls, sessions, false).unwrap();
    generate(&ordered, calls, sessions, true).unwrap();
    generate(&small, calls / 10, sessions, false).unwrap();
    let mb = std::fs::metadata(&big).unwrap().len() as f64 / 1e6;
    println!("corpus: {calls} calls over {sessions} interleaved sessions, {mb:.0} MB");
    // best of five each, in turns, so a busy moment on the machine does not decide the ratio
    let rounds = std::env::var("BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let r = best_of(
        rounds,
        &[
            &|| floor(&big, true),
            &|| floor(&big, false),
            &|| detector(&big),
            &|| detector(&ordered),
        ],
    );
    let [(n, t_call, c_call), (_, t_floor, c_floor), (verdicts, t_det, c_det), (_, t_ord, c_ord)] =
        r[..]
    else {
        unreachable!()
    };
    println!(
        "parse into record::Call:            {n} calls in {t_call:.2} s = {:.0} calls/s (CPU {c_call:.2} s)",
        n as f64 / t_call
    );
    println!(
        "floor (parse as progress-detect):   {n} calls in {t_floor:.2} s = {:.0} calls/s (CPU {c_floor:.2} s)",
        n as f64 / t_floor
    );
    println!("progress-detect:                    {verdicts} verdicts in {t_det:.2} s = {:.0} calls/s ({:.2}x the floor; CPU {c_det:.2} s, {:.2}x)",
        calls as f64 / t_det, t_det / t_floor, c_det / c_floor);
    println!(
        "  against the parse into record::Call: {:.2}x (CPU {:.2}x)",
        t_det / t_call,
        c_det / c_call
    );
    println!(
        "  the same lines in session order:    {t_ord:.2} s ({:.2}x the floor; CPU {c_ord:.2} s, {:.2}x)",
        t_ord / t_floor,
        c_ord / c_floor
    );
    let p_big = peak_kb(&big);
    let p_small = peak_kb(&small);
    println!(
        "peak memory (VmHWM of the binary):  {} MB for {} calls, {} MB for {} calls",
        p_big / 1024,
        calls,
        p_small / 1024,
        calls / 10
    );
    if let Some(before) = std::env::var_os("BENCH_BEFORE") {
        let before = std::path::PathBuf::from(before);
        let after = Path::new(env!("CARGO_BIN_EXE_progress-detect"));
        let r = best_of(
            rounds,
            &[&|| binary(&before, &big), &|| binary(after, &big)],
        );
        let [(n_b, t_b, c_b), (n_a, t_a, c_a)] = r[..] else {
            unreachable!()
        };
        println!("binaries on the corpus, best of {rounds} in turns:");
        println!(
            "  before ({}): {n_b} verdicts in {t_b:.2} s (CPU {c_b:.2} s)",
            before.display()
        );
        println!("  this build:   {n_a} verdicts in {t_a:.2} s (CPU {c_a:.2} s)");
        println!(
            "  this build against before: wall {:.3}x, CPU {:.3}x",
            t_a / t_b,
            c_a / c_b
        );
    }
}
