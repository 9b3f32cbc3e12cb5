//! Two alerters at once (issue 30, point 4): a manual `wd-alert` during a tick, and unlocked
//! `wd-store tick | wd-alert` pipelines on one fresh store, on a real SQLite file with a slow
//! webhook stand-in that counts what it was posted.

use crate::support::stub::{Reply, Stub};
use crate::support::Home;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn verdict(session: &str) -> String {
    format!(
        r#"{{"kind":"verdict","session":"{session}","root":"{session}","agent":"build","calls":50,"flagged":true,"reasons":["top"],"signals":{{"top":20,"top_target":"bash make"}},"landed_in_window":false,"calls_since_landed":50,"cost_since_landed":0.5,"t":1796000000000}}"#
    )
}

fn webhook_config(home: &Home, hook: &Stub) -> std::path::PathBuf {
    let cfg = home.join("watchdog.toml");
    std::fs::write(
        &cfg,
        format!(
            "[[channels]]\nname = \"hook\"\ntype = \"webhook\"\nurl = \"{}/hook\"\ntimeout_secs = 10\n",
            hook.url
        ),
    )
    .unwrap();
    cfg
}

/// A shell pipeline with the watchdog's binaries, stdin from `input`.
fn pipeline(home: &Home, script: &str, input: &Path) -> Child {
    Command::new("sh")
        .args(["-c", script])
        .env_clear()
        .env("HOME", home.path())
        .env("PATH", "/usr/bin:/bin")
        .env("WD_STORE", assert_cmd::cargo::cargo_bin("wd-store"))
        .env("WD_ALERT", assert_cmd::cargo::cargo_bin("wd-alert"))
        .stdin(std::fs::File::open(input).unwrap())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn count(db: &Path, sql: &str) -> i64 {
    rusqlite::Connection::open(db)
        .unwrap()
        .query_row(sql, [], |r| r.get(0))
        .unwrap()
}

fn posts(hook: &Stub) -> usize {
    hook.requests()
        .iter()
        .filter(|r| r.method == "POST" && r.path == "/hook")
        .count()
}

#[test]
fn a_manual_wd_alert_during_a_slow_delivery_sends_nothing_twice() {
    let home = Home::new();
    let hook = Stub::start();
    hook.route("POST /hook", Reply::Delay(400, 200, "{}".into()));
    let cfg = webhook_config(&home, &hook);
    let db = home.join("w.db");
    let input = home.join("tick.jsonl");
    let lines: Vec<String> = (0..8).map(|i| verdict(&format!("ses_{i}"))).collect();
    std::fs::write(&input, lines.join("\n") + "\n").unwrap();
    let empty = home.join("empty.jsonl");
    std::fs::write(&empty, "").unwrap();
    let alert = "\"$WD_ALERT\" --db \"$DB\" --config \"$CFG\"";
    let run = |inp: &Path| {
        let mut c = Command::new("sh");
        c.args(["-c", alert])
            .env_clear()
            .env("HOME", home.path())
            .env("DB", &db)
            .env("CFG", &cfg)
            .env("WD_ALERT", assert_cmd::cargo::cargo_bin("wd-alert"))
            .stdin(std::fs::File::open(inp).unwrap())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        c.spawn().unwrap()
    };
    let tick = run(&input);
    // the tick has recorded its eight triggers and is posting them, 400 ms each
    let start = Instant::now();
    while posts(&hook) == 0 {
        assert!(start.elapsed() < Duration::from_secs(20), "no post arrived");
        std::thread::sleep(Duration::from_millis(20));
    }
    let manual: Vec<Child> = (0..3).map(|_| run(&empty)).collect();
    for k in std::iter::once(tick).chain(manual) {
        let out = k.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert_eq!(count(&db, "SELECT count(*) FROM events"), 8);
    assert_eq!(
        count(&db, "SELECT count(*) FROM deliveries WHERE status = 'sent'"),
        8
    );
    assert_eq!(posts(&hook), 8, "each delivery posted once");
}

#[test]
fn thirty_unlocked_tick_pipelines_on_a_fresh_store_lose_no_decision() {
    let home = Home::new();
    let hook = Stub::start();
    hook.route("POST /hook", Reply::Delay(200, 200, "{}".into()));
    let cfg = webhook_config(&home, &hook);
    let db = home.join("w.db");
    // every tick flags the same tree and one of its own
    let inputs: Vec<std::path::PathBuf> = (0..30)
        .map(|i| {
            let p = home.join(&format!("tick{i}.jsonl"));
            std::fs::write(
                &p,
                format!("{}\n{}\n", verdict("ses_all"), verdict(&format!("ses_{i}"))),
            )
            .unwrap();
            p
        })
        .collect();
    let script = format!(
        "\"$WD_STORE\" --db '{db}' tick | \"$WD_ALERT\" --db '{db}' --config '{cfg}'",
        db = db.display(),
        cfg = cfg.display()
    );
    let kids: Vec<Child> = inputs.iter().map(|i| pipeline(&home, &script, i)).collect();
    let mut failed = Vec::new();
    for k in kids {
        let out = k.wait_with_output().unwrap();
        if !out.status.success() {
            failed.push(String::from_utf8_lossy(&out.stderr).into_owned());
        }
    }
    assert!(failed.is_empty(), "{} failed: {failed:#?}", failed.len());
    assert_eq!(count(&db, "SELECT count(*) FROM ticks"), 30);
    assert_eq!(count(&db, "SELECT count(*) FROM alert_ticks"), 30);
    assert_eq!(
        count(&db, "SELECT count(*) FROM episodes"),
        31,
        "each tree's episode opens once"
    );
    assert_eq!(
        count(&db, "SELECT count(DISTINCT dedup_key) FROM episodes"),
        31
    );
    let events = count(&db, "SELECT count(*) FROM events");
    assert_eq!(
        count(&db, "SELECT count(*) FROM events WHERE state = 'trigger'"),
        31
    );
    assert_eq!(
        count(&db, "SELECT count(*) FROM deliveries WHERE status = 'sent'"),
        events
    );
    assert_eq!(posts(&hook) as i64, events, "each delivery posted once");
}
