//! wd-store against real SQLite files: ticks in the pipeline, the operator's queries, two
//! writers at once, a killed tick, a locked or foreign file, migrations, retention.

use crate::support::{repo, Home};
use serde_json::{json, Value};
use std::io::Write;
use std::process::{Command, Stdio};

fn fixture_verdicts(home: &Home) -> String {
    let r = home
        .cmd("progress-detect")
        .args([repo().join("fixtures/labelled.jsonl").to_str().unwrap()])
        .run();
    r.ok();
    r.stdout()
}

fn verdict(session: &str, model: &str, flagged: bool) -> String {
    json!({"kind": "verdict", "session": session, "root": session, "agent": "build", "model": model,
           "flagged": flagged, "reasons": if flagged { vec!["top"] } else { vec![] },
           "signals": {"dup": 0.5, "top": 14, "top_target": "read src/a.js", "slow": 3, "slow_call": null,
                       "coverage": 1.0, "coverage_file": "src/a.js"},
           "landed_in_window": false, "calls": 40, "calls_since_landed": 30, "cost_since_landed": 0.25,
           "first_flag": if flagged { json!({"index": 12, "t": 5, "id": "prt_1"}) } else { Value::Null }})
    .to_string()
}

fn db(home: &Home) -> String {
    home.join("wd.db").display().to_string()
}

fn count(db: &str, sql: &str) -> i64 {
    rusqlite::Connection::open(db)
        .unwrap()
        .query_row(sql, [], |r| r.get(0))
        .unwrap()
}

#[test]
fn tick_passes_the_stream_through_and_records_it() {
    let home = Home::new();
    let input = format!(
        "{}\n{}",
        r#"{"kind":"source","source":"http://127.0.0.1:4096","sessions":3}"#,
        fixture_verdicts(&home)
    );
    let r = home
        .cmd("wd-store")
        .args(["--db", &db(&home), "--now", "1796000000000", "tick"])
        .stdin(input.clone())
        .run();
    r.ok();
    let out = r.stdout();
    assert!(out.starts_with(&input), "input must pass through unchanged");
    let tick: Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    assert_eq!(tick["kind"], "tick");
    assert_eq!(tick["id"], 1);
    assert_eq!(tick["outcome"], "flagged");
    assert_eq!(tick["sessions"], 44);
    assert_eq!(tick["flagged"], 23);
    let r = home
        .cmd("wd-store")
        .args(["--db", &db(&home), "last-tick"])
        .run();
    assert_eq!(r.stdout(), "1796000000000\n");
    let r = home
        .cmd("wd-store")
        .args(["--db", &db(&home), "status"])
        .run();
    let st = &r.kind("status")[0];
    assert_eq!(st["last_tick"], 1796000000000i64);
    // what stands now: the 23 flagged sessions of the fixture all stopped (idle), and no loop
    // alert is open (no wd-alert ran), so nothing loops; the tick's own record keeps its 23
    assert_eq!(st["outcome"], "ok");
    assert_eq!(st["verdicts"], 44);
    assert_eq!(st["flagged"], 0);
    assert_eq!(st["open_alerts"], 0);
    let r = home
        .cmd("wd-store")
        .args([
            "--db",
            &db(&home),
            "--now",
            "1796000060000",
            "verdicts",
            "--since",
            "5m",
            "--flagged",
        ])
        .run();
    let rows = r.kind("verdict_row");
    assert_eq!(rows.len(), 23);
    let nav = rows
        .iter()
        .find(|v| v["signals"]["top_target"] == "read src/navbar.js")
        .unwrap();
    assert_eq!(nav["reasons"], "dup,top,slow,coverage,circling");
    assert_eq!(nav["first_flag_index"], 7);
    assert_eq!(nav["loop_start_index"], 1);
    assert_eq!(nav["evidence"]["calls"].as_array().unwrap().len(), 12);
    assert_eq!(nav["digest"].as_array().unwrap().len(), 12);
    assert_eq!(nav["model"], "sim/sim-model");
}

#[test]
fn empty_tick_records_no_agent_and_malformed_lines_are_skipped() {
    let home = Home::new();
    let r = home
        .cmd("wd-store")
        .args(["--db", &db(&home), "tick"])
        .stdin("")
        .run();
    r.ok();
    assert_eq!(r.kind("tick")[0]["outcome"], "no_agent");
    let r = home
        .cmd("wd-store")
        .args(["--db", &db(&home), "tick", "--outcome", "no_agent"])
        .stdin("")
        .run();
    r.ok();
    let input = format!(
        "{}\n{{oops\n{}\n",
        verdict("ses_a", "p/m", true),
        verdict("ses_b", "p/m", false)
    );
    let r = home
        .cmd("wd-store")
        .args(["--db", &db(&home), "tick"])
        .stdin(input)
        .run();
    r.expect_code(2);
    assert!(
        r.stderr()
            .contains("wd-store: stdin:2: key must be a string"),
        "{}",
        r.story()
    );
    let out = r.stdout();
    assert_eq!(
        out.lines().nth(1),
        Some("{oops"),
        "the bad line passes through too"
    );
    let t: Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    assert_eq!(t["sessions"], 2, "the good lines are recorded");
    assert_eq!(
        t["outcome"], "blind",
        "a tick that could not read its input is not an all-clear"
    );
    assert_eq!(count(&db(&home), "SELECT count(*) FROM ticks"), 3);
}

#[test]
fn concurrent_writers_lose_no_row() {
    let home = Home::new();
    let cfg = home.join("wd.toml");
    std::fs::write(&cfg, "[[channels]]\nname = \"desk\"\ntype = \"desktop\"\n").unwrap();
    // create the database first, as the first tick would
    home.cmd("wd-store")
        .args(["--db", &db(&home), "last-tick"])
        .run()
        .ok();
    let verdicts: String = (0..200)
        .map(|i| verdict(&format!("ses_{i:03}"), "p/m", i % 7 == 0) + "\n")
        .collect();
    let exe = assert_cmd::cargo::cargo_bin("wd-store");
    let mut kids = Vec::new();
    for i in 0..8 {
        let mut c = Command::new(&exe)
            .args(["--db", &db(&home), "tick"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut sin = c.stdin.take().unwrap();
        let v = verdicts.clone();
        std::thread::spawn(move || sin.write_all(v.as_bytes()));
        kids.push((format!("tick {i}"), c));
        let c = Command::new(&exe)
            .args([
                "--db",
                &db(&home),
                "--config",
                cfg.to_str().unwrap(),
                "channels",
                "set",
                "desk",
                "--enabled",
                if i % 2 == 0 { "false" } else { "true" },
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        kids.push((format!("channels set {i}"), c));
    }
    for (what, c) in kids {
        let out = c.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{what}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert_eq!(count(&db(&home), "SELECT count(*) FROM ticks"), 8);
    assert_eq!(count(&db(&home), "SELECT count(*) FROM verdicts"), 1600);
    assert_eq!(count(&db(&home), "SELECT count(*) FROM channels"), 1);
    let ok: String = rusqlite::Connection::open(db(&home))
        .unwrap()
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(ok, "ok");
}

#[test]
fn a_tick_killed_midway_leaves_nothing() {
    let home = Home::new();
    home.cmd("wd-store")
        .args(["--db", &db(&home), "last-tick"])
        .run()
        .ok();
    let mut c = Command::new(assert_cmd::cargo::cargo_bin("wd-store"))
        .args(["--db", &db(&home), "tick"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut sin = c.stdin.take().unwrap();
    for i in 0..100 {
        writeln!(sin, "{}", verdict(&format!("ses_{i}"), "p/m", false)).unwrap();
    }
    sin.flush().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    c.kill().unwrap();
    c.wait().unwrap();
    assert_eq!(count(&db(&home), "SELECT count(*) FROM ticks"), 0);
    assert_eq!(count(&db(&home), "SELECT count(*) FROM verdicts"), 0);
}

#[test]
fn a_database_locked_past_the_busy_timeout_is_named_and_untouched() {
    let home = Home::new();
    let cfg = home.join("wd.toml");
    std::fs::write(&cfg, "[store]\nbusy_timeout_ms = 300\n").unwrap();
    home.cmd("wd-store")
        .args(["--db", &db(&home), "last-tick"])
        .run()
        .ok();
    let holder = rusqlite::Connection::open(db(&home)).unwrap();
    holder.execute_batch("BEGIN IMMEDIATE").unwrap();
    let r = home
        .cmd("wd-store")
        .args([
            "--db",
            &db(&home),
            "--config",
            cfg.to_str().unwrap(),
            "tick",
        ])
        .stdin(verdict("ses_a", "p/m", true))
        .run();
    r.expect_code(2);
    let err = r.stderr();
    assert!(
        err.starts_with(&format!(
            "wd-store: watchdog database {}: locked by another process past the busy timeout",
            db(&home)
        )),
        "{err}"
    );
    holder.execute_batch("ROLLBACK").unwrap();
    assert_eq!(count(&db(&home), "SELECT count(*) FROM ticks"), 0);
}

#[test]
fn a_file_that_is_not_a_watchdog_database_is_refused() {
    let home = Home::new();
    let text = home.join("notes.txt");
    std::fs::write(
        &text,
        "just text, long enough to not be an empty database file at all",
    )
    .unwrap();
    let r = home
        .cmd("wd-store")
        .args(["--db", text.to_str().unwrap(), "status"])
        .run();
    r.expect_code(2);
    assert_eq!(
        r.stderr().trim(),
        format!(
            "wd-store: watchdog database {}: not a watchdog database (not SQLite)",
            text.display()
        )
    );
    let other = home.join("other.db");
    rusqlite::Connection::open(&other)
        .unwrap()
        .execute_batch("CREATE TABLE t (x)")
        .unwrap();
    let r = home
        .cmd("wd-store")
        .args(["--db", other.to_str().unwrap(), "status"])
        .run();
    r.expect_code(2);
    assert!(
        r.stderr()
            .contains("not a watchdog database (application_id 0x0)"),
        "{}",
        r.story()
    );
}

#[test]
fn an_older_database_is_upgraded_without_losing_rows() {
    let home = Home::new();
    let path = db(&home);
    {
        // a version-1 database, as the first release wrote it
        let c = rusqlite::Connection::open(&path).unwrap();
        c.execute_batch("PRAGMA journal_mode = WAL").unwrap();
        c.execute_batch(oc_watchdog::store::schema::MIGRATIONS[0])
            .unwrap();
        c.pragma_update(
            None,
            "application_id",
            oc_watchdog::store::schema::APPLICATION_ID,
        )
        .unwrap();
        c.pragma_update(None, "user_version", 1).unwrap();
        c.execute(
            "INSERT INTO ticks (t, outcome) VALUES (1796000000000, 'ok')",
            [],
        )
        .unwrap();
        c.execute(
            "INSERT INTO verdicts (tick, t, session, root, flagged) VALUES (1, 1796000000000, 'ses_old', 'ses_old', 0)",
            [],
        )
        .unwrap();
        c.execute(
            "INSERT INTO verdicts (tick, t, session, root, flagged, reasons, dup, top, top_target, slow, coverage)
             VALUES (1, 1796000000000, 'ses_loop', 'ses_loop', 1, 'top,slow', 0.5, 14, 'read src/a.js', 15, 1.5)",
            [],
        )
        .unwrap();
    }
    let r = home.cmd("wd-store").args(["--db", &path, "verdicts"]).run();
    r.ok();
    let rows = r.kind("verdict_row");
    assert_eq!(rows[1]["session"], "ses_old");
    // the version-1 signal columns moved into the one signals object
    assert_eq!(rows[0]["session"], "ses_loop");
    assert_eq!(rows[0]["reasons"], "top,slow");
    assert_eq!(
        rows[0]["signals"],
        json!({"dup": 0.5, "top": 14, "top_target": "read src/a.js", "slow": 15, "slow_call": null,
               "coverage": 1.5, "coverage_file": null})
    );
    assert_eq!(
        count(&path, "PRAGMA user_version"),
        oc_watchdog::store::schema::latest()
    );
    assert_eq!(count(&path, "SELECT count(*) FROM actions"), 0);
}

#[test]
fn rollup_puts_flagged_sessions_next_to_each_models_share() {
    let home = Home::new();
    let mut input = String::new();
    for i in 0..6 {
        input += &verdict(&format!("ses_a{i}"), "prov/alpha", i < 3);
        input += "\n";
    }
    for i in 0..2 {
        input += &verdict(&format!("ses_b{i}"), "prov/beta", i == 0);
        input += "\n";
    }
    for now in ["1796000000000", "1796000300000"] {
        home.cmd("wd-store")
            .args(["--db", &db(&home), "--now", now, "tick"])
            .stdin(input.clone())
            .run()
            .ok();
    }
    let r = home
        .cmd("wd-store")
        .args([
            "--db",
            &db(&home),
            "--now",
            "1796000400000",
            "rollup",
            "--by",
            "model",
            "--since",
            "1h",
        ])
        .run();
    r.ok();
    let rows = r.kind("rollup");
    assert_eq!(rows[0]["model"], "prov/alpha");
    assert_eq!(rows[0]["sessions"], 6);
    assert_eq!(rows[0]["share_of_sessions"], 0.75);
    assert_eq!(rows[0]["flagged_sessions"], 3);
    assert_eq!(rows[0]["share_of_flagged"], 0.75);
    assert_eq!(rows[1]["model"], "prov/beta");
    assert_eq!(rows[1]["flagged_sessions"], 1);
    let r = home
        .cmd("wd-store")
        .args([
            "--db",
            &db(&home),
            "--now",
            "1796000400000",
            "--format",
            "csv",
            "rollup",
            "--since",
            "1h",
        ])
        .run();
    assert_eq!(
        r.stdout().lines().take(2).collect::<Vec<_>>(),
        [
            "model,sessions,share_of_sessions,flagged_sessions,share_of_flagged",
            "prov/alpha,6,0.75,3,0.75"
        ]
    );
}

#[test]
fn channel_settings_change_at_run_time_and_unknown_names_are_refused() {
    let home = Home::new();
    let cfg = home.join("wd.toml");
    std::fs::write(
        &cfg,
        "[[channels]]\nname = \"desk\"\ntype = \"desktop\"\n\n[[channels]]\nname = \"hook\"\ntype = \"webhook\"\nurl = \"http://127.0.0.1:9/x\"\nmin_severity = \"critical\"\n",
    )
    .unwrap();
    let base = [
        "--db".to_string(),
        db(&home),
        "--config".into(),
        cfg.display().to_string(),
    ];
    // a query does not make the database: a tick does
    home.cmd("wd-store")
        .args(base.iter())
        .args(["tick"])
        .stdin("")
        .run()
        .ok();
    let r = home
        .cmd("wd-store")
        .args(base.iter())
        .args(["channels"])
        .run();
    let ch = r.kind("channel");
    assert_eq!(ch.len(), 2);
    assert_eq!(
        (ch[0]["enabled"].clone(), ch[0]["min_severity"].clone()),
        (json!(true), json!("warning"))
    );
    let r = home
        .cmd("wd-store")
        .args(base.iter())
        .args([
            "channels",
            "set",
            "desk",
            "--enabled",
            "false",
            "--min-severity",
            "critical",
        ])
        .run();
    r.ok();
    let desk = &r.kind("channel")[0];
    assert_eq!(desk["enabled"], false);
    assert_eq!(desk["min_severity"], "critical");
    assert_eq!(desk["overridden"], true);
    let r = home
        .cmd("wd-store")
        .args(base.iter())
        .args(["channels", "set", "sms", "--enabled", "true"])
        .run();
    r.expect_code(2);
    assert_eq!(
        r.stderr().trim(),
        "wd-store: no channel \"sms\" in the config (channels: desk, hook)"
    );
}

#[test]
fn prune_drops_old_ticks_but_never_open_alerts() {
    let home = Home::new();
    let day = 86_400_000i64;
    let t0 = 1_796_000_000_000i64;
    for d in [0, 10, 40] {
        home.cmd("wd-store")
            .args([
                "--db",
                &db(&home),
                "--now",
                &(t0 + d * day).to_string(),
                "tick",
            ])
            .stdin(verdict("ses_a", "p/m", false))
            .run()
            .ok();
    }
    {
        let c = rusqlite::Connection::open(db(&home)).unwrap();
        c.execute(
            "INSERT INTO episodes (dedup_key, kind, root, state, severity, peak_severity, opened, last_fired) VALUES ('loop:ses_a', 'loop', 'ses_a', 'open', 'warning', 'warning', ?1, ?1)",
            [t0],
        )
        .unwrap();
    }
    let r = home
        .cmd("wd-store")
        .args([
            "--db",
            &db(&home),
            "--now",
            &(t0 + 41 * day).to_string(),
            "prune",
            "--older-than",
            "30d",
        ])
        .run();
    r.ok();
    let p = &r.kind("pruned")[0];
    assert_eq!(p["ticks"], 2);
    assert_eq!(p["verdicts"], 2);
    assert_eq!(count(&db(&home), "SELECT count(*) FROM ticks"), 1);
    assert_eq!(
        count(
            &db(&home),
            "SELECT count(*) FROM alerts WHERE state = 'open'"
        ),
        1
    );
    let r = home
        .cmd("wd-store")
        .args(["--db", &db(&home), "--format", "table", "loops"])
        .run();
    let out = r.stdout();
    // an episode written by hand names no session: the empty column is left out
    assert!(out.starts_with("status   opened "), "{out}");
    assert!(out.contains("\nwarning  "), "{out}");
}

/// The page's calls come from the stream: `wd-store calls` passes the call stream on unchanged
/// and stages every session's latest calls; the tick keeps those of the 23 sessions it flags
/// (the fixture's 949 calls of them, the detector's targets) and empties the stage. No file of
/// the calls is written or read.
#[test]
fn the_calls_stage_passes_the_stream_on_and_the_tick_keeps_its_flagged_sessions_calls() {
    let home = Home::new();
    let input = std::fs::read_to_string(repo().join("fixtures/labelled.jsonl")).unwrap();
    let staged = home
        .cmd("wd-store")
        .args(["--db", &db(&home), "calls"])
        .stdin(input.clone())
        .run();
    staged.ok();
    assert!(staged.stdout() == input, "the stream passes on unchanged");
    assert_eq!(count(&db(&home), "SELECT count(*) FROM call_marks"), 0);
    assert_eq!(
        count(&db(&home), "SELECT count(DISTINCT session) FROM tick_calls"),
        44
    );
    let verdicts = home.cmd("progress-detect").stdin(staged.stdout()).run();
    verdicts.ok();
    home.cmd("wd-store")
        .args(["--db", &db(&home), "tick"])
        .stdin(verdicts.stdout())
        .run()
        .ok();
    let d = db(&home);
    assert_eq!(count(&d, "SELECT count(*) FROM call_marks"), 949);
    assert_eq!(
        count(&d, "SELECT count(DISTINCT session) FROM call_marks"),
        23
    );
    assert_eq!(count(&d, "SELECT count(*) FROM tick_calls"), 0);
    let first: (String, String) = rusqlite::Connection::open(&d)
        .unwrap()
        .query_row(
            "SELECT target, target_key FROM call_marks WHERE session = 'ses_dcf301bd9ffeJIs8Qnd1IYRsKa' AND seq = 1",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(
        first,
        (
            "read docs/spec.md offset 8 limit 25".to_string(),
            "5a5c5453e956949f".to_string()
        )
    );
}

/// The fixture, a batch as oc-calls writes it (each session's calls, then its `activity`
/// record), `copies` times over under ids of their own.
fn fixture_batch(copies: usize) -> String {
    let input = std::fs::read_to_string(repo().join("fixtures/labelled.jsonl")).unwrap();
    let mut out = String::new();
    for k in 0..copies {
        for line in input.lines() {
            let mut v: Value = serde_json::from_str(line).unwrap();
            let keys: &[&str] = match v["kind"].as_str() {
                Some("session") => &["id"],
                Some("call") => &["id", "session"],
                _ => &["session"],
            };
            for key in keys {
                v[*key] = format!("{}_{k}", v[*key].as_str().unwrap()).into();
            }
            out += &format!("{v}\n");
        }
    }
    out
}

#[test]
fn the_calls_stage_writes_a_large_batch_as_sessions_end_and_replaces_the_last_ones() {
    // 440 sessions, 12,000 calls: the marks are written in two chunks, each session's
    // as its activity record ends it, and the batch replaces whatever the last one staged
    let home = Home::new();
    let stage = |copies: usize| {
        let input = fixture_batch(copies);
        let r = home
            .cmd("wd-store")
            .args(["--db", &db(&home), "calls"])
            .stdin(input.clone())
            .run();
        r.ok();
        assert!(r.stdout() == input, "the stream passes on unchanged");
        let d = db(&home);
        (
            count(&d, "SELECT count(DISTINCT session) FROM tick_calls"),
            count(&d, "SELECT count(*) FROM tick_calls"),
            count(&d, "SELECT max(seq) FROM tick_calls"),
        )
    };
    assert_eq!(stage(10), (440, 12_000, 152));
    assert_eq!(stage(1), (44, 1_200, 152));
}

#[test]
fn calls_follow_stages_each_batch_at_its_sweep_with_the_stream_still_open() {
    use std::io::BufRead;
    let home = Home::new();
    let db = db(&home);
    let mut child = home
        .cmd("wd-store")
        .args(["--db", &db, "calls", "--follow"])
        .spawn();
    let mut sin = child.stdin.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let _ = tx.send(line.unwrap());
        }
    });
    let call = |s: &str, id: &str, t: i64, status: &str| {
        json!({"kind": "call", "session": s, "id": id, "t": t, "tool": "read",
               "args": {"filePath": format!("/w/{id}.rs")}, "status": status})
        .to_string()
    };
    // waits for the sweep `n` to come out: the batch before it is staged by then
    let until_sweep = |n: u64| loop {
        let l = rx
            .recv_timeout(std::time::Duration::from_secs(20))
            .expect("the sweep did not pass while the stream was open");
        let v: Value = serde_json::from_str(&l).unwrap();
        if v["kind"] == "sweep" {
            assert_eq!(v["n"], n);
            return;
        }
    };
    let marks = |s: &str| -> Vec<(i64, String, bool)> {
        let c = rusqlite::Connection::open(&db).unwrap();
        let mut st = c
            .prepare("SELECT seq, target, failed FROM tick_calls WHERE session = ?1 ORDER BY seq")
            .unwrap();
        st.query_map([s], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    };
    let batch1 = [
        r#"{"kind":"session","id":"s","directory":"/w"}"#.to_string(),
        call("s", "a", 1000, "completed"),
        call("s", "b", 2000, "running"),
        r#"{"kind":"sweep","n":1,"t":3000,"full":true}"#.to_string(),
    ];
    writeln!(sin, "{}", batch1.join("\n")).unwrap();
    sin.flush().unwrap();
    until_sweep(1);
    assert_eq!(
        marks("s"),
        [
            (0, "read a.rs".into(), false),
            (1, "read b.rs".into(), false)
        ]
    );
    // b ends in an error (its line replaces the running one), c is new; t is a second session
    let batch2 = [
        call("s", "b", 2000, "error"),
        call("s", "c", 4000, "completed"),
        call("t", "x", 4500, "completed"),
        r#"{"kind":"sweep","n":2,"t":5000,"full":false}"#.to_string(),
    ];
    writeln!(sin, "{}", batch2.join("\n")).unwrap();
    sin.flush().unwrap();
    until_sweep(2);
    assert_eq!(
        marks("s"),
        [
            (0, "read a.rs".into(), false),
            (1, "read b.rs".into(), true),
            (2, "read c.rs".into(), false)
        ]
    );
    assert_eq!(marks("t"), [(0, "read /w/x.rs".into(), false)]);
    drop(sin);
    assert!(child.wait().unwrap().success());
}

/// A query on a missing database made it (and its directory) and printed an empty status,
/// exit 0: a mistyped `--db` or a removed state directory looked like a quiet watchdog. Now
/// every query names the missing database (exit 2) and creates nothing; the commands that
/// record create it and its directory.
#[test]
fn a_query_on_a_missing_database_names_it_and_creates_nothing() {
    let home = Home::new();
    let dir = home.join("nonexistent/dir");
    let db = dir.join("w.db");
    let db_s = db.to_str().unwrap();
    let queries: &[&[&str]] = &[
        &["status"],
        &["loops"],
        &["alerts"],
        &["verdicts"],
        &["rollup"],
        &["blocks"],
        &["channels"],
        &["prune"],
        &["metrics"],
        &["report", "--out", "-"],
    ];
    for q in queries {
        let r = home.cmd("wd-store").args(["--db", db_s]).args(*q).run();
        r.expect_code(2);
        assert_eq!(
            r.stderr().trim(),
            format!(
                "wd-store: watchdog database {db_s}: not found (the first tick or `wd-store tick` creates it; --db names another)"
            ),
            "{}",
            r.story()
        );
        assert_eq!(r.stdout(), "", "{}", r.story());
        assert!(!home.join("nonexistent").exists(), "{q:?} created it");
    }
    // the default database too, after its state directory was removed
    let r = home.cmd("wd-store").args(["status"]).run();
    r.expect_code(2);
    assert!(
        r.stderr().contains(&format!(
            "watchdog database {}: not found",
            home.join(".local/state/oc-watchdog/watchdog.db").display()
        )),
        "{}",
        r.story()
    );
    assert!(!home.join(".local/state/oc-watchdog").exists());
    // a command that records (or the tick script's first step) makes the directory and the
    // database
    let r = home.cmd("wd-store").args(["--db", db_s, "last-tick"]).run();
    r.ok();
    assert_eq!(r.stdout(), "");
    assert!(db.exists());
    std::fs::remove_dir_all(home.join("nonexistent")).unwrap();
    home.cmd("wd-store")
        .args(["--db", db_s, "tick"])
        .stdin("")
        .run()
        .ok();
    assert_eq!(count(db_s, "SELECT count(*) FROM ticks"), 1);
    let r = home.cmd("wd-store").args(["--db", db_s, "status"]).run();
    r.ok();
    assert_eq!(r.kind("status")[0]["outcome"], json!("no_agent"));
}

/// A watchdog database holding the fixture's 23 loops as one tick (`progress-detect |
/// wd-store tick | wd-alert`) at `now`, its desktop channel off.
fn fixture_loops_db(home: &Home, now: &str) -> String {
    let cfg = home.join("wd.toml");
    std::fs::write(
        &cfg,
        "[[channels]]\nname = \"desktop\"\ntype = \"desktop\"\nenabled = false\n",
    )
    .unwrap();
    let cfg = cfg.display().to_string();
    let stored = home
        .cmd("wd-store")
        .args(["--db", &db(home), "--config", &cfg, "--now", now, "tick"])
        .stdin(fixture_verdicts(home))
        .run();
    stored.ok();
    home.cmd("wd-alert")
        .args(["--db", &db(home), "--config", &cfg, "--now", now])
        .stdin(stored.stdout())
        .run()
        .ok();
    db(home)
}

/// `wd-store ARGS` at `now`, in UTC, with `COLUMNS` set to `columns` (none: a pipe's default).
fn table_at(home: &Home, now: &str, columns: Option<&str>, args: &[&str]) -> String {
    let db = db(home);
    let cfg = home.join("wd.toml").display().to_string();
    let mut all = vec!["--db", &db, "--config", &cfg, "--now", now];
    all.extend_from_slice(args);
    let mut c = home.cmd("wd-store").env("TZ", "UTC").args(&all);
    if let Some(w) = columns {
        c = c.env("COLUMNS", w);
    }
    let r = c.run();
    r.ok();
    r.stdout()
}

fn widest(table: &str) -> usize {
    table.lines().map(|l| l.chars().count()).max().unwrap_or(0)
}

#[test]
fn loops_table_fits_the_terminal_and_does_not_cut_titles_to_8_characters() {
    // issue 40: `wd-store loops --format table` was 103 columns on these loops whatever the
    // terminal (its --help said 100) and cut project and title to 8 characters ("amount …")
    let home = Home::new();
    let now = "1796300000000";
    fixture_loops_db(&home, now);
    let loops = |columns| table_at(&home, now, columns, &["loops", "--format", "table"]);
    let row = |table: &str| -> String {
        table
            .lines()
            .find(|l| l.contains("ses_dc5721858ffedLRWqfrh3YU7lD"))
            .unwrap_or_else(|| panic!("{table}"))
            .to_string()
    };
    let at80 = loops(Some("80"));
    assert_eq!(widest(&at80), 80, "{at80}");
    assert_eq!(at80.lines().count(), 24, "{at80}");
    assert_eq!(
        at80.lines().next().unwrap(),
        "status   session                         project       session_title"
    );
    assert_eq!(
        row(&at80),
        "warning  ses_dc5721858ffedLRWqfrh3YU7lD  …vwM7Q1/proj  amount parsing orchestra…"
    );
    let at120 = loops(Some("120"));
    assert_eq!(widest(&at120), 120, "{at120}");
    assert!(
        at120.lines().next().unwrap().starts_with(
            "status   session                         opened UTC   burned            project       session_title"
        ),
        "{at120}"
    );
    assert!(
        row(&at120).ends_with("  6 calls, $0.02,…  …vwM7Q1/proj  amount parsing orchestrator"),
        "{at120}"
    );
    // not a terminal and no COLUMNS: the documented 100
    let piped = loops(None);
    assert_eq!(widest(&piped), 100, "{piped}");
    // alerts fit too, their burned figures cut, not the session to paste
    let alerts = table_at(&home, now, Some("80"), &["alerts", "--format", "table"]);
    assert!(widest(&alerts) <= 80, "{alerts}");
    assert!(
        alerts.contains("  ses_dc5721858ffedLRWqfrh3YU7lD"),
        "{alerts}"
    );
}

#[test]
fn status_is_a_key_value_block_not_one_135_column_row() {
    // issue 40: `wd-store status` on a terminal (and with --format table) was one row of 135
    // columns: 12 headers over 12 values
    let home = Home::new();
    let now = "1796300000000";
    fixture_loops_db(&home, now);
    let status = table_at(&home, now, Some("80"), &["status", "--format", "table"]);
    // how long the tick took is the clock's, not --now's
    let (took, rest): (Vec<&str>, Vec<&str>) =
        status.lines().partition(|l| l.starts_with("duration_ms "));
    assert_eq!(took.len(), 1, "{status}");
    assert_eq!(
        rest.join("\n") + "\n",
        "last_tick UTC   2026-12-03 12:13:20\n\
         mode            timer\n\
         outcome         flagged\n\
         sessions        44\n\
         flagged         23\n\
         verdicts        44\n\
         open_alerts     23\n\
         blind           -\n\
         figures_at UTC  2026-12-03 12:13:20\n\
         channels        desktop:off:warning\n\
         state           -\n"
    );
    // the machine formats are one row, as they were
    let csv = table_at(&home, now, Some("80"), &["status", "--format", "csv"]);
    assert_eq!(csv.lines().count(), 2, "{csv}");
    assert!(
        csv.starts_with("last_tick,mode,outcome,sessions,flagged,"),
        "{csv}"
    );
    let jsonl = table_at(&home, now, Some("80"), &["status"]);
    let rec: Value = serde_json::from_str(jsonl.trim()).unwrap();
    assert_eq!(rec["open_alerts"], 23);
}

#[test]
fn look_closer_verdicts_table_has_readable_columns_not_600_columns_of_json() {
    // issue 40: the page's "Look closer" command, `wd-store verdicts --session ID --format
    // table`, printed 588-column lines of 20 stored columns, signals and evidence as raw JSON
    let home = Home::new();
    let now = "1796300000000";
    fixture_loops_db(&home, now);
    let s = "ses_dc571e19affeX7aNLACM1xE6go";
    let closer = |columns| {
        table_at(
            &home,
            now,
            Some(columns),
            &["verdicts", "--session", s, "--format", "table"],
        )
    };
    let calls: String = [
        "offset 136 limit 45",
        "offset 181 limit 45",
        "offset 226 limit 45",
        "offset 271 limit 45",
        "offset 1 limit 38",
        "offset 39 limit 38",
        "offset 77 limit 38",
        "offset 115 limit 38",
        "offset 153 limit 38",
        "offset 191 limit 38",
        "offset 229 limit 38",
        "offset 267 limit 38",
    ]
    .iter()
    .map(|c| format!("  read docs/runbook.md {c}\n"))
    .collect();
    assert_eq!(
        closer("80"),
        format!(
            "t UTC        agent  flag  reasons   calls  cost   repeats\n\
             12-03 12:13  build  FLAG  circling  21     $0.21  pages through docs/runbook.md…\n\
             \n\
             last calls of the newest flagged verdict (12-03 12:13 UTC):\n{calls}"
        )
    );
    let at120 = closer("120");
    assert!(
        at120.starts_with(
            "t UTC        agent  flag  reasons   calls  since_landed  cost   repeats\n\
             12-03 12:13  build  FLAG  circling  21     21            $0.21  pages through docs/runbook.md (3.0 passes)\n"
        ),
        "{at120}"
    );
    assert!(!at120.contains('{'), "{at120}");
    // every session: the session column comes back, each line fits
    let all = table_at(&home, now, Some("80"), &["verdicts", "--format", "table"]);
    assert_eq!(widest(&all), 80, "{all}");
    assert!(all.starts_with("t UTC        session  "), "{all}");
    // --wide and the JSONL keep every stored column
    let wide = table_at(
        &home,
        now,
        Some("80"),
        &["verdicts", "--session", s, "--format", "table", "--wide"],
    );
    assert!(wide.contains("{\"circling\":3.0,"), "{wide}");
    let rec: Value = serde_json::from_str(
        table_at(&home, now, Some("80"), &["verdicts", "--session", s]).trim(),
    )
    .unwrap();
    assert_eq!(rec["signals"]["circling_file"], "docs/runbook.md");
    assert_eq!(rec["digest"].as_array().unwrap().len(), 12);
}
