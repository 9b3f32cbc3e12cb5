//! Follow mode's end of the pipeline: a hand-made verdict and sweep stream, fed line by line
//! through `wd-store tick --follow | wd-alert --follow`, with a real desktop notification daemon
//! on a real D-Bus session bus. Each sweep is one tick; the test waits for its `tick` record at
//! the other end before sending the next, so every notification it sees came while the stream
//! was still open.

use crate::support::desktop::Desktop;
use crate::support::Home;
use serde_json::{json, Value};
use std::io::{BufRead, Write};
use std::process::{Child, ChildStdin, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const SRC: &str = "/tmp/follow-test/opencode.db";

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// A verdict after `calls` calls (the last 3 before the loop landed), at `t`.
fn verdict(session: &str, root: &str, flagged: bool, calls: u64, class: &str, t: i64) -> String {
    json!({"kind": "verdict", "session": session, "root": root, "agent": "build", "model": "sim/sim-model",
           "flagged": flagged, "reasons": if flagged { vec!["top", "dup"] } else { vec![] },
           "signals": {"dup": 0.8, "top": 31, "top_target": "read src/a.js"},
           "landed_in_window": false, "calls": calls, "calls_since_landed": calls - 3,
           "cost_since_landed": (calls - 3) as f64 / 100.0, "t": t, "source": SRC,
           "first_flag": if flagged { json!({"index": 12, "t": t, "id": "prt_1"}) } else { Value::Null },
           "liveness": {"class": class, "evidence": "seen"}})
    .to_string()
}

fn source() -> String {
    json!({"kind": "source", "source": SRC, "reader": "database", "sessions": 3}).to_string()
}

/// `wd-store tick --follow | wd-alert --follow`, fed by the test.
struct Pipe {
    tick: Child,
    alert: Child,
    input: Option<ChildStdin>,
    /// wd-alert's output lines so far.
    out: Arc<Mutex<Vec<String>>>,
    reader: Option<std::thread::JoinHandle<()>>,
    sweeps: u64,
    ticks_seen: usize,
}

impl Pipe {
    fn start(home: &Home, cfg: &str, db: &str, d: &Desktop) -> Pipe {
        let mut tick = home
            .cmd("wd-store")
            .args(["--db", db, "--config", cfg, "tick", "--follow"])
            .spawn();
        let alert = home
            .cmd("wd-alert")
            .args(["--db", db, "--config", cfg, "--follow"])
            .env("DBUS_SESSION_BUS_ADDRESS", &d.bus)
            .env("DISPLAY", &d.display)
            .spawn_reading(Stdio::from(tick.stdout.take().unwrap()));
        let mut alert = alert;
        let out = Arc::new(Mutex::new(Vec::new()));
        let stdout = alert.stdout.take().unwrap();
        let o = out.clone();
        let reader = std::thread::spawn(move || {
            for l in std::io::BufReader::new(stdout).lines() {
                o.lock().unwrap().push(l.unwrap());
            }
        });
        Pipe {
            input: tick.stdin.take(),
            tick,
            alert,
            out,
            reader: Some(reader),
            sweeps: 0,
            ticks_seen: 0,
        }
    }

    /// One tick: its lines and the sweep that ends it; returns the events wd-alert wrote for it
    /// and its tick record, once that came out.
    fn tick(&mut self, lines: &[String], full: bool, t: i64) -> (Vec<Value>, Value) {
        self.sweeps += 1;
        let sweep = json!({"kind": "sweep", "n": self.sweeps, "t": t, "full": full}).to_string();
        let input = self.input.as_mut().unwrap();
        for l in lines.iter().chain([&sweep]) {
            writeln!(input, "{l}").unwrap();
        }
        input.flush().unwrap();
        let t0 = Instant::now();
        loop {
            let got: Vec<Value> = self
                .out
                .lock()
                .unwrap()
                .iter()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect();
            let ticks: Vec<usize> = (0..got.len())
                .filter(|&i| got[i]["kind"] == "tick")
                .collect();
            if ticks.len() > self.ticks_seen {
                let end = ticks[self.ticks_seen];
                let start = if self.ticks_seen == 0 {
                    0
                } else {
                    ticks[self.ticks_seen - 1] + 1
                };
                self.ticks_seen += 1;
                return (got[start..end].to_vec(), got[end].clone());
            }
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "no tick record came out of wd-alert --follow for sweep {}; so far: {got:?}",
                self.sweeps
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Ends the input; both stages exit 0. Returns wd-alert's whole output and its stderr.
    fn end(mut self) -> (Vec<String>, String) {
        drop(self.input.take());
        let tick = self.tick.wait_with_output().unwrap();
        let alert = self.alert.wait_with_output().unwrap();
        self.reader.take().unwrap().join().unwrap();
        let err = String::from_utf8_lossy(&alert.stderr).into_owned();
        assert_eq!(
            tick.status.code(),
            Some(0),
            "wd-store tick --follow: {}",
            String::from_utf8_lossy(&tick.stderr)
        );
        assert_eq!(alert.status.code(), Some(0), "wd-alert --follow: {err}");
        let out = self.out.lock().unwrap().clone();
        (out, err)
    }
}

fn states(evs: &[Value]) -> Vec<(String, String, String)> {
    evs.iter()
        .map(|e| {
            (
                e["root"].as_str().unwrap_or("").to_string(),
                e["state"].as_str().unwrap_or("").to_string(),
                e["reason"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

#[test]
fn a_followed_loop_triggers_at_its_first_flagged_tick_escalates_by_calls_and_resolves_across_a_restart(
) {
    let d = Desktop::shared();
    let home = Home::new();
    let cfg = home.join("wd.toml");
    std::fs::write(&cfg, "[[channels]]\nname = \"desk\"\ntype = \"desktop\"\n").unwrap();
    let (cfg, db) = (
        cfg.display().to_string(),
        home.join("wd.db").display().to_string(),
    );
    let id = std::process::id();
    let (r, c, x) = (
        format!("ses_fr{id}"),
        format!("ses_fc{id}"),
        format!("ses_fx{id}"),
    );
    let t = now_ms();
    let v = |s: &str, root: &str, flagged: bool, calls: u64, class: &str| {
        verdict(s, root, flagged, calls, class, t)
    };
    let mut p = Pipe::start(&home, &cfg, &db, d);

    // a full read: nothing flagged
    let (evs, tick) = p.tick(
        &[
            source(),
            v(&r, &r, false, 5, "idle"),
            v(&c, &r, false, 10, "active"),
            v(&x, &x, false, 4, "active"),
        ],
        true,
        t,
    );
    assert_eq!(evs, Vec::<Value>::new());
    assert_eq!(
        (
            &tick["mode"],
            &tick["full"],
            &tick["sessions"],
            &tick["outcome"]
        ),
        (&json!("follow"), &Value::Null, &json!(3), &json!("ok"))
    );
    // the child starts looping: the first partial tick that flags it triggers on its root, and
    // the desktop shows it while the stream is still open
    let (evs, tick) = p.tick(&[v(&c, &r, true, 20, "active")], false, t + 1000);
    assert_eq!(states(&evs), [(r.clone(), "trigger".into(), "".into())]);
    assert_eq!(evs[0]["severity"], "warning");
    assert_eq!(evs[0]["figures"]["calls"], 17);
    assert_eq!(
        (&tick["full"], &tick["outcome"]),
        (&json!(false), &json!("flagged"))
    );
    let seen = d.wait_for(&c, 1);
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].urgency, Some(1));
    assert_eq!(
        seen[0].summary,
        "opencode loop: build repeats read src/a.js"
    );

    // a partial tick without the tree, from the source that listed it: the loop is not gone,
    // nothing resolves (a partial read lists only what changed)
    let (evs, _) = p.tick(&[source(), v(&x, &x, false, 5, "active")], false, t + 2000);
    assert_eq!(evs, Vec::<Value>::new());
    // 50, then 97 calls after the trigger: counted, not escalated (escalate_after_calls = 100)
    for (calls, at) in [(70, 3000), (117, 4000)] {
        let (evs, _) = p.tick(&[v(&c, &r, true, calls, "active")], false, t + at);
        assert_eq!(evs, Vec::<Value>::new(), "at {calls} calls");
    }
    // the 100th call after it: critical, and it says so in calls and time, not ticks
    let (evs, _) = p.tick(&[v(&c, &r, true, 120, "active")], false, t + 5000);
    assert_eq!(
        states(&evs),
        [(r.clone(), "escalate".into(), "still_looping".into())]
    );
    assert_eq!(evs[0]["severity"], "critical");
    let summary = evs[0]["summary"].as_str().unwrap();
    assert!(
        summary.starts_with(
            "still looping 4 s and 100 calls after the alert, past the 100-call bar: "
        ),
        "{summary}"
    );
    let seen = d.wait_for(&c, 2);
    assert_eq!(
        seen.iter().map(|s| s.urgency).collect::<Vec<_>>(),
        [Some(1), Some(2)]
    );

    // wd-alert stops mid-episode (the whole pipeline, as a restart of the service does)
    let (out, err) = p.end();
    assert!(
        err.contains(&format!("dedup=loop:{r} state=escalate")),
        "{err}"
    );
    // its own output fed again: every tick was processed, nothing is sent twice
    let again = home
        .cmd("wd-alert")
        .args(["--db", &db, "--config", &cfg, "--follow"])
        .env("DBUS_SESSION_BUS_ADDRESS", &d.bus)
        .stdin(out.join("\n") + "\n")
        .run();
    again.ok();
    assert_eq!(
        again.stderr().matches("was already processed").count(),
        6,
        "{}",
        again.story()
    );
    assert!(
        again
            .stdout()
            .lines()
            .all(|l| l.contains("\"kind\":\"tick\"")),
        "{}",
        again.story()
    );

    // started again: the first full read sees the loop going on; no second trigger
    let mut p = Pipe::start(&home, &cfg, &db, d);
    let full = |cv: String, y: String| {
        vec![
            source(),
            v(&r, &r, false, 5, "idle"),
            cv,
            v(&x, &x, false, 5, "active"),
            y,
        ]
    };
    let y = format!("ses_fy{id}");
    let (evs, _) = p.tick(
        &full(
            v(&c, &r, true, 121, "active"),
            v(&y, &y, false, 3, "active"),
        ),
        true,
        t + 6000,
    );
    assert_eq!(evs, Vec::<Value>::new());
    // a change lands: resolved with progress
    let mut landed: Value = serde_json::from_str(&v(&c, &r, false, 123, "active")).unwrap();
    landed["calls_since_landed"] = json!(0);
    let (evs, _) = p.tick(&[landed.to_string()], false, t + 7000);
    assert_eq!(
        states(&evs),
        [(r.clone(), "resolve".into(), "progress".into())]
    );
    assert_eq!(
        evs[0]["figures"]["calls"], 118,
        "as the last flagged tick saw it"
    );
    // another loop triggers, then stops: a full tick finds it idle with no new call
    let (evs, _) = p.tick(&[v(&y, &y, true, 30, "active")], false, t + 8000);
    assert_eq!(states(&evs), [(y.clone(), "trigger".into(), "".into())]);
    let (evs, _) = p.tick(
        &full(landed.to_string(), v(&y, &y, true, 30, "idle")),
        true,
        t + 9000,
    );
    assert_eq!(
        states(&evs),
        [(y.clone(), "resolve".into(), "stopped".into())]
    );
    p.end();
    let seen = d.wait_for(&y, 2);
    assert_eq!(
        seen.iter().map(|s| s.urgency).collect::<Vec<_>>(),
        [Some(1), Some(0)]
    );
    // one trigger, one escalation and one resolve for the first loop, all told
    let resolved = d.wait_for(&r, 3);
    assert_eq!(
        resolved.iter().map(|s| s.urgency).collect::<Vec<_>>(),
        [Some(1), Some(2), Some(0)]
    );

    // every tick recorded in follow mode, full or partial as its sweep said
    let conn = rusqlite::Connection::open(&db).unwrap();
    let ticks: Vec<(String, bool, String)> = conn
        .prepare("SELECT mode, full, outcome FROM ticks ORDER BY id")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let full_flags: Vec<bool> = ticks.iter().map(|t| t.1).collect();
    assert_eq!(
        full_flags,
        [true, false, false, false, false, false, true, false, false, true]
    );
    assert!(ticks.iter().all(|t| t.0 == "follow"), "{ticks:?}");
    assert_eq!(ticks[2].2, "ok", "a partial tick that read nothing flagged");
}

/// Follow mode escalates this long after the trigger, however few calls came (the tick's time
/// says when: here, a stream whose sweeps are 5.5 minutes apart).
#[test]
fn a_followed_loop_escalates_by_minutes_after_its_trigger() {
    let d = Desktop::shared();
    let home = Home::new();
    let cfg = home.join("wd.toml");
    std::fs::write(&cfg, "[[channels]]\nname = \"desk\"\ntype = \"desktop\"\n").unwrap();
    let (cfg, db) = (
        cfg.display().to_string(),
        home.join("wd.db").display().to_string(),
    );
    let z = format!("ses_fz{}", std::process::id());
    let t = now_ms();
    let mut p = Pipe::start(&home, &cfg, &db, d);
    let (evs, _) = p.tick(&[verdict(&z, &z, true, 20, "active", t)], false, t);
    assert_eq!(states(&evs), [(z.clone(), "trigger".into(), "".into())]);
    let later = t + 330_000;
    let (evs, _) = p.tick(
        &[verdict(&z, &z, true, 21, "active", later)],
        false,
        later - 30_000,
    );
    assert_eq!(evs, Vec::<Value>::new(), "4.5 minutes and 1 call after it");
    let (evs, _) = p.tick(&[verdict(&z, &z, true, 22, "active", later)], false, later);
    assert_eq!(
        states(&evs),
        [(z.clone(), "escalate".into(), "still_looping".into())]
    );
    let summary = evs[0]["summary"].as_str().unwrap();
    // 330 s by the test's clock; the tick's own clock read the trigger's sweep a few ms late
    assert!(
        ["5 min 29 s", "5 min 30 s"]
            .iter()
            .any(|d| summary.starts_with(&format!(
                "still looping {d} and 2 calls after the alert, past the 5-min bar: "
            ))),
        "{summary}"
    );
    p.end();
}

/// `wd-store report --follow` rewrites the page within 2 s of a full tick or an event, while
/// its input is still open, and not for a partial tick that brought no event and flagged
/// nothing; one that flagged sessions rewrites it at most every 10 s (found trying it as an
/// operator: the page showed a loop's first 5 calls while it had made 22).
#[test]
fn the_followed_page_is_rewritten_within_seconds_of_a_full_tick_an_event_or_a_loops_growth() {
    let home = Home::new();
    let db = home.join("wd.db").display().to_string();
    let page = home.join("page.html");
    let t = now_ms();
    let z = format!("ses_fp{}", std::process::id());
    let stream = [
        source(),
        verdict(&z, &z, false, 5, "active", t),
        json!({"kind": "sweep", "n": 1, "t": t, "full": true}).to_string(),
        json!({"kind": "sweep", "n": 2, "t": t + 1000, "full": false}).to_string(),
    ]
    .join("\n");
    let ticks = home
        .cmd("wd-store")
        .args(["--db", &db, "tick", "--follow"])
        .stdin(stream + "\n")
        .run();
    ticks.ok();
    let lines: Vec<String> = ticks
        .stdout()
        .lines()
        .filter(|l| l.contains("\"kind\":\"tick\""))
        .map(String::from)
        .collect();
    assert_eq!(lines.len(), 2, "{}", ticks.story());
    let mut rep = home
        .cmd("wd-store")
        .args(["--db", &db, "report", "--follow", "--out"])
        .args([page.to_str().unwrap()])
        .spawn();
    let mut input = rep.stdin.take().unwrap();
    let wait_page = |since: Option<std::time::SystemTime>| {
        let t0 = Instant::now();
        loop {
            let m = std::fs::metadata(&page).and_then(|m| m.modified()).ok();
            if m.is_some() && m != since {
                return m;
            }
            if t0.elapsed() > Duration::from_secs(4) {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    writeln!(input, "{}", lines[0]).unwrap();
    input.flush().unwrap();
    let first = wait_page(None).expect("the page within 2 s of the full tick");
    let text = std::fs::read_to_string(&page).unwrap();
    assert!(text.contains("<td>mode</td><td>follow: "), "{text}");
    assert!(
        text.contains(&format!("<td>sources last read</td><td><code>{SRC}</code>")),
        "{text}"
    );
    // a partial tick with no event: the page stays as it is
    writeln!(input, "{}", lines[1]).unwrap();
    input.flush().unwrap();
    assert_eq!(wait_page(Some(first)), None, "rewritten for a partial tick");
    // an event: rewritten
    let ev = json!({"dedup_key": format!("loop:{z}"), "state": "trigger"}).to_string();
    writeln!(input, "{ev}").unwrap();
    input.flush().unwrap();
    let second = wait_page(Some(first)).expect("not rewritten for an event");
    // a partial tick that flagged sessions: the loops' figures grew, rewritten, but at most
    // every 10 s
    let mut flagged: Value = serde_json::from_str(&lines[1]).unwrap();
    flagged["flagged"] = json!(1);
    writeln!(input, "{flagged}").unwrap();
    input.flush().unwrap();
    let third = wait_page(Some(second)).expect("not rewritten for a flagged partial tick");
    writeln!(input, "{flagged}").unwrap();
    input.flush().unwrap();
    assert_eq!(wait_page(Some(third)), None, "rewritten twice within 10 s");
    drop(input);
    let out = rep.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
