//! Benchmark of `progress-detect --follow` (issue 27): what a sweep costs and what held sessions
//! weigh. Prints figures; asserts nothing about time.
//!
//! - CPU per sweep with 20 sessions looping (a call each per sweep, written running and again
//!   completed a sweep later, as `oc-calls --follow` does) while 2,000 idle sessions are held;
//!   and per sweep with nothing coming at all (the idle cost). Every 60th sweep is full and
//!   lists the sessions active since the previous full one. CPU of this process (user + system),
//!   the judging of the first full reads (the 2,000 sessions' history) subtracted.
//! - Memory: the binary's peak resident set (VmHWM) holding N sessions of 40 calls each, and
//!   over sessions coming and going (200 a minute of 10 calls, each active for 5 minutes): after 40 and
//!   after 80 minutes of it (flat once sessions are forgotten, 30 full sweeps after their last).
//!
//!     cargo bench --bench follow_detect      (BENCH_SWEEPS, default 600)

use oc_watchdog::cli::Out;
use oc_watchdog::cmd::progress_detect as cmd;
use std::fmt::Write as _;
use std::io::Write;
use std::path::Path;

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

const T0: i64 = 1_796_000_000_000;

fn session(s: &str) -> String {
    format!(
        r#"{{"kind":"session","id":"{s}","parent":null,"agent":"build","title":"bench {s}","directory":"/w/{s}","created":{T0},"updated":{T0},"status":"idle","source":"/o.db","model":"sim/sim-model"}}"#
    )
}

/// Call `i` of session `s`: healthy reads of distinct files, or (looping) the same test again.
fn call(s: &str, i: usize, t: i64, looping: bool, running: bool) -> String {
    let (tool, args) = if looping {
        (
            "bash",
            r#"{"command":"python3 -m pytest tests/test_nav.py -x"}"#.to_string(),
        )
    } else {
        (
            "read",
            format!(r#"{{"filePath":"/w/{s}/src/f{i}.js","offset":1,"limit":50}}"#),
        )
    };
    let (status, out, exit) = match (running, looping) {
        (true, _) => ("running", "null", "null"),
        (false, true) => ("completed", r#""sha1:0123456789ab""#, "1"),
        (false, false) => ("completed", r#""sha1:ba9876543210""#, "null"),
    };
    format!(
        r#"{{"kind":"call","session":"{s}","id":"prt_{s}_{i:05}","t":{t},"end":null,"tool":"{tool}","args":{args},"status":"{status}","landed":false,"exit":{exit},"file_lines":300,"model":"sim/sim-model","cost":0.002,"out":{out}}}"#
    )
}

fn activity(s: &str, t: i64) -> String {
    format!(
        r#"{{"kind":"activity","session":"{s}","last_progress":{t},"in_flight":false,"running":[],"error":null}}"#
    )
}

fn sweep(n: usize, t: i64, full: bool) -> String {
    format!(r#"{{"kind":"sweep","n":{n},"t":{t},"full":{full}}}"#)
}

/// The first full read: `idle` sessions of `calls` calls each.
fn first_read(w: &mut String, idle: usize, calls: usize) {
    for s in 0..idle {
        let id = format!("ses_i{s:05}");
        w.push_str(&session(&id));
        w.push('\n');
        for i in 0..calls {
            w.push_str(&call(&id, i, T0 + i as i64 * 1000, false, false));
            w.push('\n');
        }
        w.push_str(&activity(&id, T0 + calls as i64 * 1000));
        w.push('\n');
    }
    // and the next full read a minute later, which takes their calls for good (a cost paid
    // once, not per sweep)
    w.push_str(&sweep(1, T0 + 3_540_000, true));
    w.push('\n');
    w.push_str(&sweep(2, T0 + 3_600_000, true));
    w.push('\n');
}

/// `sweeps` sweeps after the first read, a second apart; with `looping` sessions each sending a
/// call per sweep (running, completed a sweep later).
fn sweeps(w: &mut String, sweeps: usize, looping: usize) {
    let start = T0 + 3_600_000;
    for n in 0..sweeps {
        let t = start + (n as i64 + 1) * 1000;
        let full = (n + 1) % 60 == 0;
        for s in 0..looping {
            let id = format!("ses_l{s:02}");
            if n == 0 || full {
                w.push_str(&session(&id));
                w.push('\n');
            }
            if n > 0 {
                w.push_str(&call(&id, n - 1, t - 1500, true, false));
                w.push('\n');
            }
            w.push_str(&call(&id, n, t - 500, true, true));
            w.push('\n');
            w.push_str(&activity(&id, t - 500));
            w.push('\n');
        }
        w.push_str(&sweep(n + 3, t, full));
        w.push('\n');
    }
}

/// CPU seconds this process has used (user + system), from /proc/self/stat.
fn cpu_secs() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let f: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, r)| r.split_whitespace().collect())
        .unwrap_or_default();
    let tick = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (tick(11) + tick(12)) / 100.0
}

/// Runs `progress-detect --follow` over `input` in this process; its CPU seconds and lines out.
fn follow(input: &str) -> (f64, usize) {
    use clap::Parser;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("watchdog.toml");
    std::fs::write(&config, "").unwrap();
    let args = cmd::Args::parse_from([
        "progress-detect",
        "--config",
        config.to_str().unwrap(),
        "--follow",
    ]);
    let (mut out, buf) = Out::buffer();
    let before = cpu_secs();
    cmd::run(args, &mut std::io::Cursor::new(input.as_bytes()), &mut out).unwrap();
    out.flush().unwrap();
    let cpu = cpu_secs() - before;
    (cpu, buf.text().lines().count())
}

/// The binary's peak resident set (VmHWM, kB) over `input`.
fn peak_kb(path: &Path) -> u64 {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_progress-detect"))
        .args(["--follow", path.to_str().unwrap()])
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

/// `minutes` of sessions coming and going: each minute (60 partial sweeps and a full one), 200
/// new sessions of 10 calls, each listed by the full reads of its 5 minutes and then no more.
fn churn(minutes: usize) -> String {
    let mut w = String::new();
    let mut n = 0;
    for m in 0..minutes {
        let t = T0 + m as i64 * 60_000;
        for s in 0..200 {
            let id = format!("ses_m{m:03}_{s:03}");
            w.push_str(&session(&id));
            w.push('\n');
            for i in 0..10 {
                w.push_str(&call(&id, i, t + i as i64, i % 2 == 0, false));
                w.push('\n');
            }
            w.push_str(&activity(&id, t + 10));
            w.push('\n');
        }
        // the full read lists the sessions of the last 5 minutes
        for back in 1..5.min(m + 1) {
            for s in 0..200 {
                w.push_str(&session(&format!("ses_m{:03}_{s:03}", m - back)));
                w.push('\n');
            }
        }
        n += 1;
        writeln!(w, "{}", sweep(n, t + 500, true)).unwrap();
        for k in 1..60 {
            n += 1;
            writeln!(w, "{}", sweep(n, t + k * 1000, false)).unwrap();
        }
    }
    w
}

fn main() {
    let n_sweeps: usize = std::env::var("BENCH_SWEEPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(600);
    let mut setup = String::new();
    first_read(&mut setup, 2000, 40);
    let (c_setup, _) = follow(&setup);
    let mut looping = setup.clone();
    sweeps(&mut looping, n_sweeps, 20);
    let mut idle = setup.clone();
    sweeps(&mut idle, n_sweeps, 0);
    // best of three, so a busy moment on the machine does not decide
    let best = |input: &str| {
        (0..3)
            .map(|_| follow(input))
            .min_by(|a, b| a.0.total_cmp(&b.0))
            .unwrap()
    };
    let (c_loop, lines_loop) = best(&looping);
    let (c_idle, _) = best(&idle);
    println!("first full read: 2000 sessions of 40 calls judged in {c_setup:.2} s CPU");
    let per = |c: f64| (c - c_setup).max(0.0) / n_sweeps as f64 * 1000.0;
    println!(
        "20 sessions looping, 2000 held idle: {:.3} ms CPU per sweep over {n_sweeps} sweeps ({lines_loop} lines out); at one sweep a second, {:.2}% of a core",
        per(c_loop),
        per(c_loop) / 10.0
    );
    // CPU time comes in clock ticks of 10 ms: less than one over every sweep is below it
    let idle_per = per(c_idle);
    if idle_per > 0.0 {
        println!(
            "nothing coming, 2000 held idle:      {idle_per:.3} ms CPU per sweep; {:.3}% of a core",
            idle_per / 10.0
        );
    } else {
        println!(
            "nothing coming, 2000 held idle:      below {:.3} ms CPU per sweep (one 10 ms clock tick over {n_sweeps} sweeps)",
            10.0 / n_sweeps as f64
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let mut held = Vec::new();
    for n in [200, 2000, 5000] {
        let mut s = String::new();
        first_read(&mut s, n, 40);
        let p = dir.path().join(format!("held-{n}.jsonl"));
        std::fs::File::create(&p)
            .unwrap()
            .write_all(s.as_bytes())
            .unwrap();
        held.push((n, peak_kb(&p)));
    }
    for (n, kb) in &held {
        println!(
            "held {n:>5} sessions of 40 calls: peak {:.1} MB",
            *kb as f64 / 1024.0
        );
    }
    let (n0, k0) = held[0];
    let (n1, k1) = held[2];
    println!(
        "  about {:.1} kB a held session",
        (k1 - k0) as f64 / (n1 - n0) as f64
    );
    for minutes in [40, 80] {
        let p = dir.path().join(format!("churn-{minutes}.jsonl"));
        std::fs::write(&p, churn(minutes)).unwrap();
        println!(
            "sessions coming and going, 200 a minute for {minutes} minutes ({} sessions): peak {:.1} MB",
            200 * minutes,
            peak_kb(&p) as f64 / 1024.0
        );
    }
}
