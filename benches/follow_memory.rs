//! Benchmark of the follow pipeline's memory over many hours of sessions coming and going, in a
//! few minutes (issue 27): the stages after oc-calls, `progress-detect --follow | wd-store tick
//! --follow | wd-alert --follow | wd-store report --follow`, each its own process as the service
//! runs them, fed sessions one after another with stream time 18 s apart (200 an hour), each
//! followed by a full sweep. Prints each stage's RssAnon (its heap and written data) as the
//! sessions go by; asserts nothing. `cargo bench --bench follow` measures the same in real hours,
//! with oc-sessions and oc-calls reading a real opencode database and a real desktop.
//!
//! Each session is a copy of the fixture's first looping session (real calls of real opencode),
//! with new ids and times, ended as a run killed in mid-turn: its process gone and its last step
//! still in flight, the case that progress-detect never forgot before 3635c8f. Its loop is
//! flagged, triggers and resolves as gone. The desktop channel is off (no bus here).
//!
//! What to expect: progress-detect and wd-store tick level off within the first hour of stream
//! (their state is the sessions of the last half hour and hour). wd-alert and wd-store report
//! also hold SQLite's page cache of the record, 2 MiB a connection by default, which fills as
//! the record grows: their RssAnon rises for the first 20 or so hours of stream, then levels.
//! The growth printed is over the second half of the sessions.
//!
//! The bench passes wd-alert's output on to wd-store report itself and waits for each sweep's
//! tick to come out of wd-alert before sending the next, so that no pipe holds a backlog.
//!
//!     cargo bench --bench follow_memory      (MEM_SESSIONS, default 4000: 20 hours of stream)
//!     MEM_BINS=/old/target/release cargo bench --bench follow_memory     (another build's binaries)

use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

const STEP_MS: i64 = 18_000;
const SOURCE: &str = "/bench/opencode.db";

fn main() {
    let n: usize = std::env::var("MEM_SESSIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4000);
    let template = template();
    let home = tempfile::tempdir().unwrap();
    let cfg_dir = home.path().join(".config/oc-watchdog");
    std::fs::create_dir_all(&cfg_dir).unwrap();
    let shipped = std::fs::read_to_string("config/watchdog.toml").unwrap();
    let desktop = "name = \"desktop\"\ntype = \"desktop\"\n";
    assert!(
        shipped.contains(desktop),
        "the shipped config's desktop channel"
    );
    std::fs::write(
        cfg_dir.join("watchdog.toml"),
        shipped.replace(desktop, &format!("{desktop}enabled = false\n")),
    )
    .unwrap();
    let stage = |bin: &str, args: &[&str]| {
        let mut c = Command::new(bin);
        c.args(args)
            .env("HOME", home.path())
            .env("XDG_CONFIG_HOME", home.path().join(".config"))
            .env("XDG_STATE_HOME", home.path().join(".local/state"))
            .env_remove("DBUS_SESSION_BUS_ADDRESS")
            .stderr(
                std::fs::File::create(home.path().join(format!(
                    "{}{}.err",
                    bin.rsplit('/').next().unwrap(),
                    args.join(" ")
                )))
                .unwrap(),
            );
        c
    };
    // MEM_BINS: a folder of another build's binaries to measure instead (an older release)
    let bins = std::env::var("MEM_BINS").ok();
    let bin = |name: &str, built: &'static str| -> String {
        bins.as_ref()
            .map_or(built.to_string(), |d| format!("{d}/{name}"))
    };
    let (detect, store, alert) = (
        bin("progress-detect", env!("CARGO_BIN_EXE_progress-detect")),
        bin("wd-store", env!("CARGO_BIN_EXE_wd-store")),
        bin("wd-alert", env!("CARGO_BIN_EXE_wd-alert")),
    );
    let mut pd = stage(&detect, &["--follow"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut tick = stage(&store, &["tick", "--follow"])
        .stdin(pd.stdout.take().unwrap())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut wa = stage(&alert, &["--follow"])
        .stdin(tick.stdout.take().unwrap())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut report = stage(&store, &["report", "--follow"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let labels = [
        "progress-detect --follow",
        "wd-store tick --follow",
        "wd-alert --follow",
        "wd-store report --follow",
    ];

    println!(
        "follow_memory bench (issue 27): the follow stages' memory over sessions coming and going"
    );
    println!(
        "  {n} sessions, one every {} s of stream time ({:.1} hours), each a copy of {} ({} lines), a full sweep after each",
        STEP_MS / 1000,
        n as f64 * STEP_MS as f64 / 3_600_000.0,
        template.id,
        template.lines.len()
    );
    println!("  binaries: {}", bins.as_deref().unwrap_or("this build's"));
    println!("  RssAnon of each stage, MiB:");
    println!(
        "  {:>9}  {:>10}  {}",
        "sessions",
        "stream h",
        labels.map(|l| format!("{l:>26}")).join("")
    );
    let mut to_pd = pd.stdin.take().unwrap();
    let mut to_report = report.stdin.take().unwrap();
    let mut from_alert = BufReader::new(wa.stdout.take().unwrap());
    let pids = [pd.id(), tick.id(), wa.id(), report.id()];
    let t0 = oc_watchdog::cli::now_ms();
    let (mut events, mut first, mut last) = (0usize, None, None);
    let every = (n / 16).max(1);
    for k in 0..n {
        let t = t0 + k as i64 * STEP_MS;
        let mut batch = format!(
            r#"{{"kind":"source","source":"{SOURCE}","reader":"database","found":["default"],"version":"1.18.33","sessions":1}}"#
        );
        batch.push('\n');
        for l in template.copy(k, t) {
            batch.push_str(&l);
            batch.push('\n');
        }
        batch.push_str(&format!(
            r#"{{"kind":"sweep","n":{},"t":{},"full":true}}"#,
            k + 1,
            t + STEP_MS - 1
        ));
        batch.push('\n');
        to_pd.write_all(batch.as_bytes()).unwrap();
        to_pd.flush().unwrap();
        // on to the report, up to and with this sweep's tick
        loop {
            let mut line = String::new();
            assert!(
                from_alert.read_line(&mut line).unwrap() > 0,
                "wd-alert ended early; see {}",
                home.path().display()
            );
            to_report.write_all(line.as_bytes()).unwrap();
            let rec: Value = serde_json::from_str(&line).expect("a JSON line from wd-alert");
            if rec["kind"] == "tick" {
                break;
            }
            events += 1;
        }
        if k % every == 0 || k + 1 == n {
            to_report.flush().unwrap();
            // the page is written at most every 2 s: let one be written before the sample
            std::thread::sleep(std::time::Duration::from_millis(2200));
            let anon = pids.map(rss_anon_mib);
            if k >= n / 2 && first.is_none() {
                first = Some((k, anon));
            }
            last = Some((k, anon));
            println!(
                "  {:>9}  {:>10.1}  {}",
                k + 1,
                (k + 1) as f64 * STEP_MS as f64 / 3_600_000.0,
                anon.map(|a| format!("{a:>26.2}")).join("")
            );
        }
    }
    drop(to_pd);
    drop(to_report);
    for c in [&mut pd, &mut tick, &mut wa, &mut report] {
        let _ = c.wait();
    }
    println!("  {events} alert events (a trigger and a resolve a session)");
    if let (Some((k0, a0)), Some((k1, a1))) = (first, last) {
        if k1 > k0 {
            println!(
                "  growth from session {} to {}, KiB per 1,000 sessions: {}",
                k0 + 1,
                k1 + 1,
                labels
                    .iter()
                    .zip(a0.iter().zip(a1.iter()))
                    .map(|(l, (b, e))| format!(
                        "{l} {:.0}",
                        (e - b) * 1024.0 * 1000.0 / (k1 - k0) as f64
                    ))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
    }
}

/// The fixture's first looping session: its session, call and activity lines.
struct Template {
    id: String,
    lines: Vec<Value>,
    t0: i64,
}

fn template() -> Template {
    let text = std::fs::read_to_string("fixtures/labelled.jsonl").unwrap();
    let all: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let s = all
        .iter()
        .find(|v| v["kind"] == "session" && v["expect"] == "flag" && v["parent"].is_null())
        .expect("a looping session in the fixture");
    let id = s["id"].as_str().unwrap().to_string();
    let lines: Vec<Value> = all
        .iter()
        .filter(|v| v["id"] == id.as_str() || v["session"] == id.as_str())
        .cloned()
        .collect();
    let t0 = s["created"].as_i64().unwrap();
    Template { id, lines, t0 }
}

impl Template {
    /// Copy `k`, its times moved to start at `t`: new ids, ended in mid-turn.
    fn copy(&self, k: usize, t: i64) -> Vec<String> {
        let new = format!("ses_mem{k:07}");
        let shift = t - self.t0;
        self.lines
            .iter()
            .map(|v| {
                let mut v = v.clone();
                let o = v.as_object_mut().unwrap();
                o.remove("expect");
                for key in ["t", "end", "created", "updated", "last_progress"] {
                    if let Some(x) = o.get(key).and_then(Value::as_i64) {
                        o.insert(key.into(), (x + shift).into());
                    }
                }
                match o["kind"].as_str().unwrap() {
                    "session" => {
                        o.insert("id".into(), new.clone().into());
                        o.insert("source".into(), SOURCE.into());
                        o.insert("status".into(), Value::Null);
                        o.insert("process".into(), "ended".into());
                    }
                    "activity" => {
                        o.insert("session".into(), new.clone().into());
                        o.insert("in_flight".into(), true.into());
                    }
                    _ => {
                        o.insert("session".into(), new.clone().into());
                        let call = format!("{}_{k}", o["id"].as_str().unwrap());
                        o.insert("id".into(), call.into());
                    }
                }
                v.to_string()
            })
            .collect()
    }
}

/// RssAnon of process `pid`, MiB (0 once it is gone).
fn rss_anon_mib(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("RssAnon:"))?
                .split_whitespace()
                .nth(1)?
                .parse::<f64>()
                .ok()
        })
        .map_or(0.0, |kib| kib / 1024.0)
}
