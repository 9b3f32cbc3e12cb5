//! Beyond one machine: a real Prometheus Alertmanager (Debian's prometheus-alertmanager) on a
//! loopback port receiving the watchdog's alerts, asserted through its own API, and the metrics
//! file checked by the real `promtool check metrics`.

use crate::support::Home;
use serde_json::{json, Value};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Alertmanager {
    url: String,
    child: Child,
    _dir: tempfile::TempDir,
}

impl Alertmanager {
    fn start() -> Alertmanager {
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("am.yml");
        std::fs::write(
            &cfg,
            "route:\n  receiver: \"null\"\nreceivers:\n  - name: \"null\"\n",
        )
        .unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new("prometheus-alertmanager")
            .arg(format!("--config.file={}", cfg.display()))
            .arg(format!(
                "--storage.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--cluster.listen-address=")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("prometheus-alertmanager (apt-get install prometheus-alertmanager)");
        let url = format!("http://127.0.0.1:{port}");
        let t0 = Instant::now();
        while ureq::get(&format!("{url}/-/ready")).call().is_err() {
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "alertmanager did not start"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        Alertmanager {
            url,
            child,
            _dir: dir,
        }
    }

    /// The alerts Alertmanager holds (active, not resolved), as its API returns them.
    fn alerts(&self) -> Vec<Value> {
        ureq::get(&format!("{}/api/v2/alerts", self.url))
            .call()
            .unwrap()
            .into_json::<Vec<Value>>()
            .unwrap()
    }
}

impl Drop for Alertmanager {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn verdict(root: &str, flagged: bool, calls: u64) -> String {
    json!({"kind": "verdict", "session": root, "root": root, "agent": "build", "model": "sim/sim-model",
           "flagged": flagged, "reasons": if flagged { vec!["top"] } else { vec![] },
           "signals": {"dup": 0.8, "top": 31, "top_target": "read src/a.js", "slow": 30, "slow_call": "read src/a.js",
                       "coverage": 0.0, "coverage_file": null},
           "landed_in_window": false, "calls": calls, "calls_since_landed": calls - 3, "cost_since_landed": 0.37})
    .to_string()
}

#[test]
fn alertmanager_sees_trigger_escalate_and_resolve_and_one_dead_peer_does_not_matter() {
    let am = Alertmanager::start();
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let home = Home::new();
    let metrics = home.join("oc-watchdog.prom");
    let cfg = home.join("wd.toml");
    std::fs::write(
        &cfg,
        format!(
            "[store]\nmetrics_file = \"{}\"\n\n[alert]\nlink_base = \"http://127.0.0.1:8080/loops#\"\n\n\
             [[channels]]\nname = \"fleet\"\ntype = \"alertmanager\"\nurls = [\"{}\", \"http://127.0.0.1:{dead}\"]\n",
            metrics.display(),
            am.url
        ),
    )
    .unwrap();
    let db = home.join("wd.db").display().to_string();
    let cfg = cfg.display().to_string();
    // real time here: Alertmanager judges endsAt against its own clock
    // a loop that goes on makes new calls every tick
    let calls = std::cell::Cell::new(44);
    let tick = |flagged: bool| {
        let now = oc_watchdog::cli::now_ms().to_string();
        calls.set(calls.get() + 10);
        let s = home
            .cmd("wd-store")
            .args(["--db", &db, "--config", &cfg, "--now", &now, "tick"])
            .stdin(format!(
                "{{\"kind\":\"source\",\"source\":\"http://x\",\"sessions\":1}}\n{}\n",
                verdict("ses_fleet", flagged, calls.get())
            ))
            .run();
        let a = home
            .cmd("wd-alert")
            .args(["--db", &db, "--config", &cfg, "--now", &now])
            .stdin(s.stdout())
            .run();
        a.ok();
        a
    };
    let mine = || -> Vec<Value> {
        am.alerts()
            .into_iter()
            .filter(|a| a["labels"]["root_session"] == "ses_fleet")
            .collect()
    };
    let r = tick(true);
    assert!(
        r.stderr().contains("failed: POST http://127.0.0.1:"),
        "the dead peer is logged: {}",
        r.story()
    );
    let a = mine();
    assert_eq!(a.len(), 1, "{a:?}");
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .to_string();
    assert_eq!(
        a[0]["labels"],
        json!({"alertname": "AgentLoop", "severity": "warning", "host": host, "root_session": "ses_fleet",
               "agent": "build", "model": "sim/sim-model", "program": "opencode"})
    );
    assert_eq!(a[0]["status"]["state"], "active");
    assert_eq!(
        a[0]["annotations"]["summary"],
        "opencode loop: build repeats read src/a.js"
    );
    assert!(a[0]["annotations"]["description"]
        .as_str()
        .unwrap()
        .contains("\"calls_since_landed\":51"));
    assert_eq!(
        a[0]["generatorURL"],
        "http://127.0.0.1:8080/loops#ses_fleet"
    );
    let first_update = a[0]["updatedAt"].clone();
    // flagged ticks re-post the open alert (Alertmanager would time it out otherwise)
    std::thread::sleep(Duration::from_millis(50));
    tick(true);
    let a = mine();
    assert_eq!(a.len(), 1);
    assert_ne!(a[0]["updatedAt"], first_update, "re-posted");
    // the third flagged tick escalates: the post that opens the critical alert ends the warning
    tick(true);
    let a = mine();
    assert_eq!(a.len(), 1, "{a:?}");
    assert_eq!(a[0]["labels"]["severity"], "critical");
    // resolve
    tick(false);
    assert_eq!(mine(), Vec::<Value>::new());
    let failed: i64 = rusqlite::Connection::open(&db)
        .unwrap()
        .query_row(
            "SELECT count(*) FROM deliveries WHERE status = 'failed'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(failed, 0, "one peer up is a delivery");
    // the metrics file the tick wrote passes the real promtool
    let text = std::fs::read_to_string(&metrics).unwrap();
    assert!(
        text.contains("ocwatchdog_ticks_total{outcome=\"flagged\"} 3"),
        "{text}"
    );
    assert!(
        text.contains("ocwatchdog_open_alerts{severity=\"critical\"} 0"),
        "{text}"
    );
    let mut p = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (apt-get install prometheus)");
    use std::io::Write;
    p.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let out = p.wait_with_output().unwrap();
    assert!(
        out.status.success() && out.stdout.is_empty() && out.stderr.is_empty(),
        "promtool: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
