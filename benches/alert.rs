//! Benchmark of wd-alert (through the real commands, one process per tick as the timer runs
//! them): ticks of 10,000, 40,000 and 100,000 verdicts (trees of four sessions; 1% flagged, 0.5%
//! stalled), three ticks each: the trigger tick, a tick where the loops go on, and the tick that
//! resolves them. And, during the 100,000-verdict tick, a `wd-store tick` started every 20 ms
//! against the same database: how many failed and how long the slowest waited.
//!
//!     cargo bench --bench alert

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

const ALERT: &str = env!("CARGO_BIN_EXE_wd-alert");
const STORE: &str = env!("CARGO_BIN_EXE_wd-store");
const T0: i64 = 1_796_000_000_000;

/// Tick `k` (0, 1, 2) of `n` sessions: loops on every 100th session (a root), stalls on every
/// 200th + 1; at tick 2 nothing is flagged any more and nothing stalls.
fn stream(n: usize, k: usize) -> String {
    let mut s = String::with_capacity(n * 400);
    s += "{\"kind\":\"source\",\"source\":\"http://127.0.0.1:4096\",\"sessions\":1}\n";
    for i in 0..n {
        let flagged = k < 2 && i % 100 == 0;
        let stalled = k < 2 && i % 200 == 1;
        let calls = 40 + 12 * k;
        let class = if stalled { "stalled" } else { "active" };
        let alert = if stalled {
            ",\"alert\":\"warning\""
        } else {
            ""
        };
        s += &format!(
            "{{\"kind\":\"verdict\",\"session\":\"ses_{i:06}\",\"root\":\"ses_{:06}\",\"agent\":\"build\",\"model\":\"sim/sim-model\",\
             \"flagged\":{flagged},\"reasons\":[{}],\"signals\":{{\"top\":31,\"top_target\":\"read src/f{}.js\"}},\
             \"calls\":{calls},\"calls_since_landed\":{calls},\"cost_since_landed\":0.12,\"t\":{},\
             \"liveness\":{{\"class\":\"{class}\",\"evidence\":\"busy and silent for 950 s\"{alert}}}}}\n",
            i - i % 4,
            if flagged { "\"top\"" } else { "" },
            i % 9,
            T0 + k as i64 * 300_000
        );
    }
    s
}

fn run(bin: &str, args: &[&str], input: &str) -> (f64, bool, String) {
    let t0 = Instant::now();
    let mut c = Command::new(bin)
        .args(args)
        .env("XDG_CONFIG_HOME", "/nonexistent")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut sin = c.stdin.take().unwrap();
    let input = input.to_string();
    let w = std::thread::spawn(move || {
        use std::io::Write;
        let _ = sin.write_all(input.as_bytes());
    });
    let out = c.wait_with_output().unwrap();
    w.join().unwrap();
    (
        t0.elapsed().as_secs_f64(),
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

fn main() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("wd.toml");
    // a channel that is configured but disabled: every event is routed, nothing is sent
    std::fs::write(
        &cfg,
        "[[channels]]\nname = \"hook\"\ntype = \"webhook\"\nurl = \"http://127.0.0.1:9/x\"\nenabled = false\n",
    )
    .unwrap();
    let cfg = cfg.display().to_string();
    for n in [10_000, 40_000, 100_000] {
        let db = dir.path().join(format!("a{n}.db")).display().to_string();
        let mut line = format!("wd-alert, {n} verdicts:");
        for k in 0..3 {
            let now = (T0 + k as i64 * 300_000).to_string();
            let base = [
                "--db",
                db.as_str(),
                "--config",
                cfg.as_str(),
                "--now",
                now.as_str(),
            ];
            let (_, ok, recorded) = run(STORE, &[&base[..], &["tick"]].concat(), &stream(n, k));
            assert!(ok, "{recorded}");
            let contend = n == 100_000 && k == 1;
            let stop = Arc::new(AtomicBool::new(false));
            let side = contend.then(|| {
                let (db, stop) = (db.clone(), stop.clone());
                std::thread::spawn(move || {
                    let (mut runs, mut failed, mut slowest) = (0, 0, 0.0f64);
                    while !stop.load(Ordering::Relaxed) {
                        let (t, ok, _) = run(
                            STORE,
                            &["--db", &db, "tick"],
                            "{\"kind\":\"verdict\",\"session\":\"ses_side\",\"flagged\":false}\n",
                        );
                        runs += 1;
                        failed += !ok as i32;
                        slowest = slowest.max(t);
                        std::thread::sleep(std::time::Duration::from_millis(20));
                    }
                    (runs, failed, slowest)
                })
            });
            let (t, ok, out) = run(ALERT, &base, &recorded);
            stop.store(true, Ordering::Relaxed);
            assert!(ok, "{out}");
            let events = out.lines().filter(|l| l.starts_with('{')).count();
            line += &format!(" tick {} {t:.2} s ({events} events);", k + 1);
            if let Some(h) = side {
                let (runs, failed, slowest) = h.join().unwrap();
                println!(
                    "concurrent `wd-store tick` during the 100,000-verdict wd-alert: {runs} runs, {failed} failed, slowest {:.0} ms",
                    slowest * 1000.0
                );
            }
        }
        println!("{line}");
    }
}
