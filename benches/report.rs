//! Benchmark of the operator's page at its worst expected size: 200 open loop alerts, each with
//! a picture of 150 calls, beside 30 days of episodes (20 a day) and 30 days of 5-minute ticks.
//! Prints the page's size, the time to build it (`wd-store report`), and, when Debian's
//! `chromium` is installed, how long headless Chromium takes to load and lay it out (a
//! screenshot), next to the same for an empty page: the difference is what the page costs
//! beyond starting the browser. The load average is printed with it (the machine is shared).
//!
//!     cargo bench --bench report
//!
//! `REPORT_BENCH_PAGE=FILE` keeps a copy of the page, `REPORT_BENCH_DB=FILE` of the database. `REPORT_BENCH_SESSIONS=3
//! REPORT_BENCH_CALLS=240` fills the worst case instead: every loop with 3 flagged sessions
//! of 240 kept calls each (the page then draws within its mark budget). `REPORT_BENCH_OPEN=20000`
//! sets how many loops are open, and `REPORT_BENCH_FLAGGED_TICKS=12` how many of the latest
//! ticks flagged each of them (a verdict per tick, as a running loop leaves); with
//! `REPORT_BENCH_CHROMIUM=0` the browser figures are skipped, and `REPORT_BENCH_RUNS` sets how
//! many times the page is built (the best is printed).

use rusqlite::{params, Connection};
use std::process::Command;
use std::time::Instant;

const BIN: &str = env!("CARGO_BIN_EXE_wd-store");
const T_END: i64 = 1_796_000_000_000;
const CALLS: usize = 150;
const DAYS: i64 = 30;
const MODELS: [&str; 4] = [
    "anthropic/claude-x",
    "openai/gpt-x",
    "local/qwen-coder",
    "sim/sim-model",
];
const TOOLS: [&str; 5] = ["read", "bash", "grep", "edit", "glob"];

fn fill(db: &str, open: usize, flagged_ticks: i64, sessions: usize, calls: usize) {
    // let wd-store create and migrate the database
    let st = Command::new(BIN)
        .args(["--db", db, "last-tick"])
        .env("XDG_CONFIG_HOME", "/nonexistent")
        .status()
        .unwrap();
    assert!(st.success());
    let mut c = Connection::open(db).unwrap();
    let tx = c.transaction().unwrap();
    let ticks = DAYS * 288;
    for i in 0..ticks {
        tx.execute(
            "INSERT INTO ticks (t, duration_ms, sessions, flagged, outcome) VALUES (?1, 900, 40, 3, 'flagged')",
            params![T_END - (ticks - i) * 300_000],
        )
        .unwrap();
    }
    let last_tick = ticks;
    for a in 0..open {
        let root = format!("ses_open{a:04}xxxxxxxxxxxxxxxx");
        let model = MODELS[a % 4];
        let opened = T_END - (a as i64 + 1) * 600_000;
        tx.execute(
            "INSERT INTO episodes (dedup_key, kind, root, state, severity, peak_severity, opened, last_fired, flagged_ticks,
                agent, model, title, top_target, calls, cost)
             VALUES (?1, 'loop', ?2, 'open', ?3, ?3, ?4, ?5, 4, 'build', ?6, ?7, ?8, 90, 1.23)",
            params![
                format!("opencode-loop:{root}"),
                root,
                if a % 3 == 0 { "critical" } else { "warning" },
                opened,
                T_END,
                model,
                format!("opencode loop: build repeats read src/module{a}.js"),
                format!("read src/module{a}.js"),
            ],
        )
        .unwrap();
        for k in 0..sessions {
            let session = if k == 0 {
                root.clone()
            } else {
                format!("{root}sub{k}")
            };
            for back in (0..flagged_ticks).rev() {
                tx.execute(
                "INSERT INTO verdicts (tick, t, session, root, agent, model, flagged, reasons, signals, calls,
                    calls_since_landed, cost_since_landed, first_flag_t, evidence)
                 VALUES (?1, ?2, ?3, ?4, 'build', ?5, 1, 'top,dup', ?6, ?7, 90, 1.23, ?8, ?9)",
                params![
                    last_tick - back,
                    T_END - back * 300_000,
                    session,
                    root,
                    model,
                    format!("{{\"top\":30,\"top_target\":\"read src/module{a}.js\"}}"),
                    calls as i64,
                    opened - 60_000,
                    format!("{{\"loop_start\":{{\"index\":61,\"t\":{},\"id\":\"prt_x\"}}}}", opened - 1_200_000),
                ],
            )
            .unwrap();
            }
            let t0 = opened - 3_000_000;
            let step = 3_000_000 / calls as i64;
            for k in 0..calls {
                let rep = k > 60 && k % 3 == 0;
                let tool = if rep { "read" } else { TOOLS[k % 5] };
                tx.execute(
                    "INSERT INTO call_marks (session, seq, t, tool, landed, failed, target, target_key)
                     VALUES (?1, ?2, ?3, ?4, ?5, 0, ?6, ?7)",
                    params![
                        session,
                        k as i64,
                        t0 + k as i64 * step,
                        tool,
                        tool == "edit" && k < 60,
                        if rep {
                            format!("read src/module{a}.js")
                        } else {
                            format!("{tool} x{k}")
                        },
                        if rep {
                            "top".to_string()
                        } else {
                            format!("{k}")
                        },
                    ],
                )
                .unwrap();
            }
        }
    }
    for d in 0..DAYS {
        for e in 0..20 {
            let root = format!("ses_old{d:02}{e:02}xxxxxxxxxxxxxxxxx");
            let opened = T_END - d * 86_400_000 - e * 3_600_000;
            tx.execute(
                "INSERT INTO episodes (dedup_key, kind, root, state, severity, peak_severity, opened, last_fired, resolved,
                    reason, agent, model, title, calls, cost, duration_ms)
                 VALUES (?1, 'loop', ?2, 'resolved', 'info', 'warning', ?3, ?4, ?4, 'stopped', 'build', ?5, 'opencode loop',
                    40, 0.4, 1800000)",
                params![
                    format!("opencode-loop:{root}"),
                    root,
                    opened,
                    opened + 1_800_000,
                    MODELS[(e % 4) as usize]
                ],
            )
            .unwrap();
        }
    }
    tx.commit().unwrap();
}

/// CPU time (user + system, ms) of this process's waited-for children so far, from
/// /proc/self/stat (cutime, cstime; clock ticks of 10 ms): less swayed by a busy machine than
/// wall time.
fn children_cpu_ms() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let f: Vec<&str> = stat
        .rsplit_once(')')
        .map_or("", |(_, r)| r)
        .split_whitespace()
        .collect();
    // after the command name: state is field 3, cutime 16 and cstime 17
    let tick = |i: usize| {
        f.get(i - 3)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (tick(16) + tick(17)) * 10.0
}

/// Wall and CPU ms of one headless Chromium loading `url` and writing a screenshot.
fn chromium_ms(url: &str, shot: &str) -> Option<(f64, f64)> {
    let profile = tempfile::tempdir().unwrap();
    let cpu0 = children_cpu_ms();
    let t0 = Instant::now();
    let out = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--window-size=1200,2000",
            &format!("--user-data-dir={}", profile.path().display()),
            &format!("--screenshot={shot}"),
            url,
        ])
        .output()
        .ok()?;
    out.status.success().then(|| {
        (
            t0.elapsed().as_secs_f64() * 1000.0,
            children_cpu_ms() - cpu0,
        )
    })
}

fn main() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("w.db").display().to_string();
    let env = |k: &str, d: usize| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    let sessions = env("REPORT_BENCH_SESSIONS", 1);
    let calls = env("REPORT_BENCH_CALLS", CALLS);
    let open = env("REPORT_BENCH_OPEN", 200);
    let flagged_ticks = env("REPORT_BENCH_FLAGGED_TICKS", 1) as i64;
    let t0 = Instant::now();
    fill(&db, open, flagged_ticks, sessions, calls);
    println!(
        "filled: {open} open loops x {sessions} flagged session(s) x {calls} calls, flagged by the last {flagged_ticks} tick(s), {} episodes, {} ticks in {:.1} s",
        DAYS * 20,
        DAYS * 288,
        t0.elapsed().as_secs_f64()
    );
    if let Ok(keep) = std::env::var("REPORT_BENCH_DB") {
        std::fs::copy(&db, &keep).unwrap();
    }
    let page = dir.path().join("report.html");
    let mut best = f64::MAX;
    let runs = env("REPORT_BENCH_RUNS", 5);
    for _ in 0..runs {
        let t0 = Instant::now();
        let st = Command::new(BIN)
            .args(["--db", &db, "--now", &T_END.to_string(), "report", "--out"])
            .arg(&page)
            .env("XDG_CONFIG_HOME", "/nonexistent")
            .status()
            .unwrap();
        assert!(st.success());
        best = best.min(t0.elapsed().as_secs_f64() * 1000.0);
    }
    let size = std::fs::metadata(&page).unwrap().len();
    if let Ok(keep) = std::env::var("REPORT_BENCH_PAGE") {
        std::fs::copy(&page, &keep).unwrap();
    }
    println!(
        "wd-store report: {:.0} ms (best of {runs}); page {size} bytes ({:.0} KiB, limit 1024 KiB)",
        best,
        size as f64 / 1024.0
    );
    if std::env::var("REPORT_BENCH_CHROMIUM").is_ok_and(|v| v == "0") {
        return;
    }
    let empty = dir.path().join("empty.html");
    std::fs::write(&empty, "<!DOCTYPE html><title>x</title>").unwrap();
    let shot = dir.path().join("shot.png").display().to_string();
    let base: Vec<(f64, f64)> = (0..5)
        .filter_map(|_| chromium_ms(&format!("file://{}", empty.display()), &shot))
        .collect();
    let full: Vec<(f64, f64)> = (0..5)
        .filter_map(|_| chromium_ms(&format!("file://{}", page.display()), &shot))
        .collect();
    if base.is_empty() || full.is_empty() {
        println!("chromium: not installed (tests/setup installs it); no render figure");
        return;
    }
    let min = |v: &[(f64, f64)], cpu: bool| {
        v.iter()
            .map(|p| if cpu { p.1 } else { p.0 })
            .fold(f64::MAX, f64::min)
    };
    let med = |v: &[(f64, f64)]| {
        let mut w: Vec<f64> = v.iter().map(|p| p.0).collect();
        w.sort_by(f64::total_cmp);
        w[w.len() / 2]
    };
    println!(
        "chromium --headless --screenshot: page {:.0} ms, empty page {:.0} ms (best of 5; medians {:.0} / {:.0}): the page costs {:.0} ms",
        min(&full, false),
        min(&base, false),
        med(&full),
        med(&base),
        min(&full, false) - min(&base, false)
    );
    println!(
        "chromium CPU (user+system, its processes): page {:.0} ms, empty page {:.0} ms (best of 5): the page costs {:.0} ms",
        min(&full, true),
        min(&base, true),
        min(&full, true) - min(&base, true)
    );
    println!(
        "load average: {}",
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );
}
