//! Benchmark of wd-store: recording 100 ticks of 200 verdicts each (through the real command),
//! and the operator's queries over a database holding 30 days of 5-minute ticks (8,640 ticks,
//! 1.7 million verdicts).
//!
//!     cargo bench --bench store

use rusqlite::{params, Connection};
use std::process::{Command, Stdio};
use std::time::Instant;

const BIN: &str = env!("CARGO_BIN_EXE_wd-store");
const T_END: i64 = 1_796_000_000_000;
const MODELS: [&str; 4] = [
    "anthropic/claude-x",
    "openai/gpt-x",
    "local/qwen-coder",
    "sim/sim-model",
];

fn verdict(i: usize, session: usize) -> String {
    let flagged = (session + i) % 37 == 0;
    format!(
        r#"{{"kind":"verdict","session":"ses_{session:05}","root":"ses_{:05}","agent":"build","model":"{}","flagged":{flagged},"reasons":[{}],"signals":{{"dup":0.4,"top":13,"top_target":"read src/f{}.js","slow":4,"slow_call":"read src/f.js","coverage":1.2,"coverage_file":"src/f.js"}},"landed_in_window":false,"calls":60,"calls_since_landed":22,"cost_since_landed":0.12,"first_flag":null}}"#,
        session - session % 4,
        MODELS[session % 4],
        if flagged { "\"top\"" } else { "" },
        session % 9
    )
}

fn wd(db: &str, args: &[&str], input: Option<&str>) -> f64 {
    let t0 = Instant::now();
    let mut c = Command::new(BIN)
        .args(["--db", db])
        .args(args)
        .env("XDG_CONFIG_HOME", "/nonexistent")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if let Some(i) = input {
        use std::io::Write;
        c.stdin.take().unwrap().write_all(i.as_bytes()).unwrap();
    } else {
        drop(c.stdin.take());
    }
    let out = c.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    t0.elapsed().as_secs_f64()
}

fn best(f: impl Fn() -> f64) -> f64 {
    (0..3).map(|_| f()).fold(f64::MAX, f64::min)
}

fn main() {
    let dir = tempfile::tempdir().unwrap();
    // 1. recording through the command, one process per tick as the timer runs it
    let db1 = dir.path().join("record.db").display().to_string();
    let mut total = 0.0;
    for i in 0..100 {
        let input: String = (0..200).map(|s| verdict(i, s) + "\n").collect();
        let now = (T_END - (100 - i as i64) * 300_000).to_string();
        total += wd(&db1, &["--now", &now, "tick"], Some(&input));
    }
    println!("record: 100 ticks x 200 verdicts through `wd-store tick` in {total:.2} s ({:.1} ms per tick)", total * 10.0);

    // 2. a 30-day database, built directly (the schema comes from the real command)
    let db2 = dir.path().join("month.db").display().to_string();
    wd(&db2, &["status"], None);
    let t0 = Instant::now();
    let c = Connection::open(&db2).unwrap();
    c.execute_batch("PRAGMA synchronous = OFF; BEGIN").unwrap();
    let ticks = 30 * 24 * 12;
    {
        let mut tick = c.prepare("INSERT INTO ticks (id, t, duration_ms, sessions, flagged, outcome) VALUES (?1, ?2, 900, 200, ?3, ?4)").unwrap();
        let mut v = c
            .prepare(
                "INSERT INTO verdicts (tick, t, session, root, agent, model, flagged, reasons, dup, top, top_target, slow, coverage,
                 calls, calls_since_landed, cost_since_landed) VALUES (?1, ?2, ?3, ?4, 'build', ?5, ?6, ?7, 0.4, 13, 'read src/f.js', 4, 1.2, 60, 22, 0.12)",
            )
            .unwrap();
        for i in 0..ticks {
            let t = T_END - (ticks - i) as i64 * 300_000;
            // sessions come and go: 200 active per tick out of a rolling population
            let base = i / 12 * 50;
            let flagged = (0..200).filter(|s| (base + s + i) % 37 == 0).count() as i64;
            tick.execute(params![
                i as i64 + 1,
                t,
                flagged,
                if flagged > 0 { "flagged" } else { "ok" }
            ])
            .unwrap();
            for s in 0..200 {
                let sid = base + s;
                let f = (sid + i) % 37 == 0;
                v.execute(params![
                    i as i64 + 1,
                    t,
                    format!("ses_{sid:06}"),
                    format!("ses_{:06}", sid - sid % 4),
                    MODELS[sid % 4],
                    f,
                    if f { "top" } else { "" }
                ])
                .unwrap();
            }
        }
        for a in 0..40 {
            c.execute(
                "INSERT INTO episodes (dedup_key, kind, root, state, severity, peak_severity, opened, last_fired, agent, top_target, calls, cost)
                 VALUES (?1, 'loop', ?2, ?3, 'warning', 'warning', ?4, ?4, 'build', 'read src/f.js', 30, 0.2)",
                params![format!("opencode-loop:ses_a{a}"), format!("ses_a{a}"), if a < 5 { "open" } else { "resolved" }, T_END - a * 600_000],
            )
            .unwrap();
        }
    }
    c.execute_batch("COMMIT; ANALYZE").unwrap();
    let n: i64 = c
        .query_row("SELECT count(*) FROM verdicts", [], |r| r.get(0))
        .unwrap();
    let size = std::fs::metadata(&db2).unwrap().len() as f64 / 1e6;
    println!(
        "month: {ticks} ticks, {n} verdicts, {size:.0} MB, built in {:.0} s",
        t0.elapsed().as_secs_f64()
    );
    let now = T_END.to_string();
    for (what, args) in [
        (
            "rollup --by model --since 1h",
            vec!["--now", &now, "rollup", "--by", "model", "--since", "1h"],
        ),
        (
            "rollup --by model --since 1d",
            vec!["--now", &now, "rollup", "--by", "model", "--since", "1d"],
        ),
        (
            "rollup --by model --since 30d",
            vec!["--now", &now, "rollup", "--by", "model", "--since", "30d"],
        ),
        ("loops", vec!["loops"]),
        ("status", vec!["status"]),
        (
            "verdicts --since 1h --flagged",
            vec!["--now", &now, "verdicts", "--since", "1h", "--flagged"],
        ),
        (
            "verdicts --session ses_000100",
            vec!["verdicts", "--session", "ses_000100"],
        ),
        ("last-tick", vec!["last-tick"]),
    ] {
        let t = best(|| wd(&db2, &args, None));
        println!(
            "query: wd-store {what:32} {:7.1} ms (whole command, best of 3)",
            t * 1000.0
        );
    }
}
