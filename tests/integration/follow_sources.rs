//! Follow mode's sources (issue #27): `oc-sessions --follow | oc-calls --follow` as spawned
//! processes reading a pipe, against a real SQLite database written while they read it (rows
//! as opencode 1.18.33 writes them, on the schema of a database real opencode made) and against
//! real opencode driven by the scripted model.

use crate::support::ocsim::Sim;
use crate::support::Home;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn write_config(home: &Home, poll_ms: u64, full_every_secs: u64) {
    let cfg = home.join(".config/oc-watchdog/watchdog.toml");
    std::fs::create_dir_all(cfg.parent().unwrap()).unwrap();
    std::fs::write(
        &cfg,
        format!("[follow]\npoll_ms = {poll_ms}\nfull_every_secs = {full_every_secs}\n"),
    )
    .unwrap();
}

/// `oc-sessions --follow | oc-calls --follow`, its output lines collected as they come.
struct Pipeline {
    sessions: Child,
    calls: Child,
    lines: Arc<Mutex<Vec<(Instant, Value)>>>,
    home_err: PathBuf,
}

/// A test that failed leaves no process behind.
impl Drop for Pipeline {
    fn drop(&mut self) {
        let _ = self.sessions.kill();
        let _ = self.calls.kill();
        let _ = self.sessions.wait();
        let _ = self.calls.wait();
    }
}

impl Pipeline {
    /// Reading `db`, or opencode's default database (under the test's HOME) when `None`.
    fn start(home: &Home, db: Option<&Path>, extra: &[&str]) -> Pipeline {
        let err = home.join("stderr.txt");
        let mut args = vec!["--follow", "--no-discover"];
        if let Some(db) = db {
            args.extend(["--db", db.to_str().unwrap()]);
        }
        args.extend_from_slice(extra);
        let mut sessions = home
            .cmd("oc-sessions")
            .args(args)
            .spawn_from(Stdio::null(), std::fs::File::create(&err).unwrap());
        let mut calls = home.cmd("oc-calls").args(["--follow"]).spawn_from(
            Stdio::from(sessions.stdout.take().unwrap()),
            std::fs::OpenOptions::new().append(true).open(&err).unwrap(),
        );
        let lines = Arc::new(Mutex::new(Vec::new()));
        let out = calls.stdout.take().unwrap();
        let sink = lines.clone();
        std::thread::spawn(move || {
            for l in std::io::BufReader::new(out).lines() {
                let Ok(l) = l else { break };
                let v: Value = serde_json::from_str(&l).unwrap_or_else(|e| panic!("{l}: {e}"));
                sink.lock().unwrap().push((Instant::now(), v));
            }
        });
        Pipeline {
            sessions,
            calls,
            lines,
            home_err: err,
        }
    }

    fn all(&self) -> Vec<Value> {
        self.lines
            .lock()
            .unwrap()
            .iter()
            .map(|(_, v)| v.clone())
            .collect()
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.home_err).unwrap_or_default()
    }

    /// Waits until a line matches; when it came.
    #[track_caller]
    fn wait_for(&self, what: &str, f: impl Fn(&Value) -> bool) -> Instant {
        let t0 = Instant::now();
        loop {
            if let Some((t, _)) = self.lines.lock().unwrap().iter().find(|(_, v)| f(v)) {
                return *t;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "no {what} within 30 s\n--- lines\n{}\n--- stderr\n{}",
                self.all()
                    .iter()
                    .map(|v| v.to_string())
                    .collect::<Vec<_>>()
                    .join("\n"),
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn calls_of(&self, session: &str, id: &str) -> Vec<Value> {
        self.all()
            .into_iter()
            .filter(|v| v["kind"] == "call" && v["session"] == session && v["id"] == id)
            .collect()
    }

    /// SIGTERM to oc-sessions: both end with status 0 and say nothing.
    fn stop(mut self) {
        let st = std::process::Command::new("kill")
            .args(["-TERM", &self.sessions.id().to_string()])
            .status()
            .unwrap();
        assert!(st.success());
        let a = self.sessions.wait().unwrap();
        let b = self.calls.wait().unwrap();
        assert_eq!(
            (a.code(), b.code()),
            (Some(0), Some(0)),
            "{}",
            self.stderr()
        );
        assert_eq!(self.stderr(), "");
    }
}

/// Writes a database as opencode 1.18.33 does: the rows of `session`, `message` and `part`
/// with their `time_updated`, and an event in the log for each change, each its own commit.
struct Writer {
    conn: rusqlite::Connection,
    event: u64,
}

impl Writer {
    /// An empty database of the schema real opencode made (a copy of the shared server's,
    /// emptied).
    fn create(path: &Path) -> Writer {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let sim = Sim::shared();
        let c = rusqlite::Connection::open(sim.db_path()).unwrap();
        c.execute("VACUUM INTO ?1", [path.to_str().unwrap()])
            .unwrap();
        drop(c);
        let conn = rusqlite::Connection::open(path).unwrap();
        conn.pragma_update(None, "journal_mode", "wal").unwrap();
        // rows of sessions without their project and event sequence rows
        conn.pragma_update(None, "foreign_keys", false).unwrap();
        conn.execute_batch(
            "DELETE FROM part; DELETE FROM message; DELETE FROM todo; DELETE FROM session;
             DELETE FROM event; DELETE FROM event_sequence;",
        )
        .unwrap();
        Writer { conn, event: 0 }
    }

    fn reopen(path: &Path) -> Writer {
        let conn = rusqlite::Connection::open(path).unwrap();
        conn.pragma_update(None, "foreign_keys", false).unwrap();
        Writer { conn, event: 0 }
    }

    fn log(&mut self, session: &str, kind: &str) {
        self.event += 1;
        // ascending ids, later than any the copied database held
        let id = format!("evt_z{:012}", self.event);
        self.conn
            .execute(
                "INSERT INTO event (id, aggregate_id, seq, type, data) VALUES (?1, ?2, ?3, ?4, '{}')",
                rusqlite::params![id, session, self.event as i64, kind],
            )
            .unwrap();
    }

    fn session(&mut self, id: &str, t: i64) {
        self.conn
            .execute(
                "INSERT INTO session (id, project_id, slug, directory, title, version, agent,
                    time_created, time_updated)
                 VALUES (?1, 'prj', 'slug', '/w/p', 'a session', '1.18.33', 'build', ?2, ?2)",
                rusqlite::params![id, t],
            )
            .unwrap();
        self.log(id, "session.created.1");
    }

    fn message(&mut self, session: &str, id: &str, t: i64) {
        let data = json!({"role": "assistant", "time": {"created": t}, "providerID": "sim",
                          "modelID": "sim-model", "cost": 0.01, "mode": "build", "agent": "build"});
        self.conn
            .execute(
                "INSERT INTO message (id, session_id, time_created, time_updated, data)
                 VALUES (?1, ?2, ?3, ?3, ?4)",
                rusqlite::params![id, session, t, data.to_string()],
            )
            .unwrap();
        self.conn
            .execute(
                "UPDATE session SET time_updated = ?2 WHERE id = ?1",
                rusqlite::params![session, t],
            )
            .unwrap();
        self.log(session, "message.updated.1");
    }

    /// A read tool part in `status`, upserted with `time_updated = t`.
    fn part(&mut self, session: &str, msg: &str, id: &str, status: &str, t: i64) {
        let mut state = json!({"status": status, "input": {"filePath": "/w/p/docs/spec.md"},
                               "time": {"start": t - 5}});
        if status == "completed" {
            state["output"] = json!("<file>...</file>");
            state["time"]["end"] = json!(t);
            state["metadata"] = json!({"display": {"totalLines": 12}});
        }
        let data = json!({"type": "tool", "callID": format!("call_{id}"), "tool": "read",
                          "state": state});
        self.conn
            .execute(
                "INSERT INTO part (id, message_id, session_id, time_created, time_updated, data)
                 VALUES (?1, ?2, ?3, ?4, ?4, ?5)
                 ON CONFLICT(id) DO UPDATE SET data = excluded.data, time_updated = excluded.time_updated",
                rusqlite::params![id, msg, session, t, data.to_string()],
            )
            .unwrap();
        self.log(session, "message.part.updated.1");
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

#[test]
fn follow_writes_a_call_when_it_appears_again_when_it_completes_and_nothing_while_idle() {
    let home = Home::new();
    let db = home.join(".local/share/opencode/opencode.db");
    let mut w = Writer::create(&db);
    // polls every 200 ms; no full read but the first within the test
    write_config(&home, 200, 3600);
    let p = Pipeline::start(&home, Some(&db), &[]);
    p.wait_for("the first full sweep", |v| v["kind"] == "sweep");
    let t = now_ms();
    w.session("ses_f1", t);
    w.message("ses_f1", "msg_f1", t);
    let written = Instant::now();
    w.part("ses_f1", "msg_f1", "prt_f1", "running", t + 10);
    let seen = p.wait_for("the running call", |v| {
        v["kind"] == "call" && v["id"] == "prt_f1"
    });
    // within a few polls of its commit (generous: two cores shared with other builds)
    assert!(
        seen - written < Duration::from_secs(3),
        "{:?}",
        seen - written
    );
    // completed in the same millisecond as the running update: read again at the cursor
    w.part("ses_f1", "msg_f1", "prt_f1", "completed", t + 10);
    p.wait_for("the completed call", |v| {
        v["kind"] == "call" && v["id"] == "prt_f1" && v["status"] == "completed"
    });
    let calls = p.calls_of("ses_f1", "prt_f1");
    let states: Vec<(&str, bool, Option<i64>)> = calls
        .iter()
        .map(|c| {
            (
                c["status"].as_str().unwrap(),
                c["end"].is_null(),
                c["file_lines"].as_i64(),
            )
        })
        .collect();
    assert_eq!(
        states,
        [("running", true, None), ("completed", false, Some(12))]
    );
    // every batch ends with a sweep, the session listed in it and its activity when it changed
    let all = p.all();
    let kinds: Vec<&str> = all.iter().map(|v| v["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds[0..2], ["source", "sweep"], "{kinds:?}");
    assert_eq!(all[1]["full"], true);
    assert!(all
        .iter()
        .skip(2)
        .all(|v| v["kind"] != "sweep" || v["full"] == false));
    let acts: Vec<&Value> = all.iter().filter(|v| v["kind"] == "activity").collect();
    assert_eq!(acts.last().unwrap()["running"], json!([]));
    assert_eq!(acts.last().unwrap()["in_flight"], true);
    assert_eq!(acts[acts.len() - 2]["running"][0]["tool"], "read");

    // idle: nothing at all over 3 s (15 polls)
    std::thread::sleep(Duration::from_millis(600));
    let before = p.all().len();
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(p.all().len(), before, "{:?}", &p.all()[before..]);
    p.stop();
}

#[test]
fn follow_survives_a_wal_truncate_and_the_database_deleted_and_recreated() {
    let home = Home::new();
    let db = home.join(".local/share/opencode/opencode.db");
    let mut w = Writer::create(&db);
    write_config(&home, 100, 3600);
    // the default database: while it is gone there is just no opencode history
    let p = Pipeline::start(&home, None, &[]);
    p.wait_for("the first sweep", |v| v["kind"] == "sweep");
    let t = now_ms();
    w.session("ses_w1", t);
    w.message("ses_w1", "msg_w1", t);
    w.part("ses_w1", "msg_w1", "prt_w1", "completed", t + 1);
    p.wait_for("the first call", |v| v["id"] == "prt_w1");
    w.conn
        .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .unwrap();
    w.part("ses_w1", "msg_w1", "prt_w2", "completed", t + 2);
    p.wait_for("the call after the truncate", |v| v["id"] == "prt_w2");

    // deleted (with its WAL) and made again, as a user who wipes opencode's data does
    drop(w);
    for ext in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{ext}", db.display()));
    }
    std::thread::sleep(Duration::from_millis(500));
    // made whole beside it and moved in, as opencode's first start leaves it
    let made = home.join("made.db");
    drop(Writer::create(&made));
    std::fs::rename(&made, &db).unwrap();
    let mut w = Writer::reopen(&db);
    let t = now_ms();
    w.session("ses_w2", t);
    w.message("ses_w2", "msg_w3", t);
    w.part("ses_w2", "msg_w3", "prt_w3", "completed", t + 1);
    p.wait_for("a call of the new database", |v| v["id"] == "prt_w3");
    // the new database was read whole at once: a full read with its source record
    let all = p.all();
    let sources = all.iter().filter(|v| v["kind"] == "source").count();
    assert!(sources >= 2, "{all:?}");
    assert!(all.iter().all(|v| v["kind"] != "blind"), "{all:?}");
    p.stop();
}

#[test]
fn a_schema_it_does_not_know_is_one_blind_record_per_full_read_then_follow_recovers() {
    let home = Home::new();
    let db = home.join(".local/share/opencode/opencode.db");
    let w = Writer::create(&db);
    w.conn
        .execute_batch("ALTER TABLE session RENAME COLUMN time_updated TO time_touched")
        .unwrap();
    drop(w);
    write_config(&home, 100, 5);
    let p = Pipeline::start(&home, Some(&db), &[]);
    p.wait_for("a second full sweep", |v| {
        v["kind"] == "sweep" && v["n"] == 2
    });
    // one blind record ahead of each full sweep, none in between
    let all = p.all();
    let kinds: Vec<&str> = all.iter().map(|v| v["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds[0..4], ["blind", "sweep", "blind", "sweep"], "{all:?}");
    assert_eq!(
        all[0]["reason"],
        "not an opencode database of a known schema (newer opencode?): table session has no column time_updated"
    );
    // a known schema put in its place (atomically, as a restore would)
    let fixed = home.join("fixed.db");
    let mut w = Writer::create(&fixed);
    let t = now_ms();
    w.session("ses_k1", t);
    w.message("ses_k1", "msg_k1", t);
    w.part("ses_k1", "msg_k1", "prt_k1", "completed", t + 1);
    drop(w);
    let c = rusqlite::Connection::open(&fixed).unwrap();
    c.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)").unwrap();
    drop(c);
    std::fs::rename(&fixed, &db).unwrap();
    p.wait_for("the call of the known schema", |v| v["id"] == "prt_k1");
    let n = p.all().len();
    let sweeps = p.all().iter().filter(|v| v["kind"] == "sweep").count() as u64;
    p.wait_for("two more full sweeps", |v| {
        v["kind"] == "sweep" && v["full"] == true && v["n"].as_u64() >= Some(sweeps + 2)
    });
    let after: Vec<Value> = p.all()[n..].to_vec();
    assert!(after.iter().all(|v| v["kind"] != "blind"), "{after:?}");
    p.stop();
}

/// Calls deduplicated by (session, id), the last line kept.
fn last_by_id(lines: &[Value], session: &str) -> Vec<Value> {
    let mut order: Vec<String> = Vec::new();
    let mut last: HashMap<String, Value> = HashMap::new();
    for v in lines
        .iter()
        .filter(|v| v["kind"] == "call" && v["session"] == session)
    {
        let id = v["id"].as_str().unwrap().to_string();
        if last.insert(id.clone(), v.clone()).is_none() {
            order.push(id);
        }
    }
    order
        .into_iter()
        .map(|id| last.remove(&id).unwrap())
        .collect()
}

#[test]
fn following_real_opencode_gives_the_calls_the_batch_gives_running_then_completed() {
    let sim = Sim::shared();
    let name = format!("follow_l1_{}", std::process::id());
    let spec = "{ROOT}/docs/spec.md";
    let read = || json!({"tool": "read", "args": {"filePath": spec}});
    let mut steps: Vec<Value> = (0..3).map(|_| read()).collect();
    steps.push(json!({"tool": "bash", "args": {"command": "sleep 2; echo done"}}));
    steps.extend((0..3).map(|_| read()));
    steps.push(json!({"text": "Done reading."}));
    sim.add_script(&name, &Value::Array(steps));
    let home = Home::new();
    write_config(&home, 100, 60);
    let db = sim.db_path();
    let p = Pipeline::start(&home, Some(&db), &["--since", "5s"]);
    p.wait_for("the first sweep", |v| v["kind"] == "sweep");
    let ran = sim.run(&name);
    // the last call's completion reaches the pipe within a few polls
    std::thread::sleep(Duration::from_secs(2));
    let follow = last_by_id(&p.all(), &ran.id);
    let batch = home
        .cmd("oc-calls")
        .args(["--db", db.to_str().unwrap(), &ran.id])
        .run();
    batch.ok();
    let batch_calls = batch.kind("call");
    assert_eq!(batch_calls.len(), 7, "{}", batch.story());
    assert_eq!(follow, batch_calls, "follow and batch disagree");
    // the bash call was seen running, then completed, and written once in each state
    let bash_id = batch_calls[3]["id"].as_str().unwrap();
    let states: Vec<String> = p
        .calls_of(&ran.id, bash_id)
        .iter()
        .map(|c| c["status"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(states.last().map(String::as_str), Some("completed"));
    assert!(states.len() >= 2, "{states:?}");
    assert_ne!(states[0], "completed", "{states:?}");
    // a line is written again only when the record changed (a completed call gets its
    // message's cost when the step finishes)
    let lines = p.calls_of(&ran.id, bash_id);
    assert!(lines.windows(2).all(|w| w[0] != w[1]), "{lines:?}");
    // and the activity follow ended on is the batch's
    let acts: Vec<Value> = p
        .all()
        .into_iter()
        .filter(|v| v["kind"] == "activity" && v["session"] == ran.id.as_str())
        .collect();
    assert_eq!(acts.last(), batch.kind("activity").last());
    p.stop();
}

#[test]
fn the_first_full_read_looks_back_to_the_last_tick_and_lists_the_open_alerts_trees() {
    let home = Home::new();
    let db = home.join(".local/share/opencode/opencode.db");
    let mut w = Writer::create(&db);
    let now = now_ms();
    let min = 60_000;
    for (id, ago) in [
        ("ses_recent", 10 * min),
        ("ses_45min", 45 * min),
        ("ses_alerted", 2 * 24 * 60 * min),
        ("ses_3h", 3 * 60 * min),
    ] {
        w.session(id, now - ago);
    }
    // the watchdog's store: a tick half an hour ago, a loop alert open on an old session
    home.cmd("wd-store").args(["last-tick"]).run().ok();
    let store =
        rusqlite::Connection::open(home.join(".local/state/oc-watchdog/watchdog.db")).unwrap();
    store
        .execute(
            "INSERT INTO ticks (t, outcome) VALUES (?1, 'flagged')",
            [now - 30 * min],
        )
        .unwrap();
    store
        .execute(
            "INSERT INTO episodes (dedup_key, kind, root, state, severity, peak_severity, opened, last_fired)
             VALUES ('loop:ses_alerted', 'loop', 'ses_alerted', 'open', 'warning', 'warning', ?1, ?1)",
            [now - 24 * 60 * min],
        )
        .unwrap();
    drop(store);
    write_config(&home, 100, 3600);
    let listed = |also_open: bool| -> Vec<String> {
        let args: &[&str] = if also_open { &["--also-open"] } else { &[] };
        let p = Pipeline::start(&home, None, args);
        p.wait_for("the first sweep", |v| v["kind"] == "sweep");
        let mut ids: Vec<String> = p
            .all()
            .iter()
            .filter(|v| v["kind"] == "session")
            .map(|v| v["id"].as_str().unwrap().to_string())
            .collect();
        ids.sort();
        p.stop();
        ids
    };
    assert_eq!(listed(true), ["ses_alerted", "ses_recent"]);
    assert_eq!(listed(false), ["ses_recent"]);
}

/// Issue 27's server restart and dropped stream: a server followed by its event stream alone
/// (`--no-db`, as a server in a container or on another host is), with full reads an hour
/// apart. A session's calls come from the polls its events bring, not from a full read; the
/// server restarted on its port, the stream is connected again and a full read follows at
/// once (what the server said meanwhile is lost); a session run after it comes as before.
#[test]
fn a_server_is_followed_by_its_event_stream_and_again_after_it_restarts() {
    let mut sim = Sim::start();
    let name = format!("follow_ev_{}", std::process::id());
    let read = json!({"tool": "read", "args": {"filePath": "{ROOT}/docs/spec.md"}});
    sim.add_script(&name, &json!([read, read, read, {"text": "Done."}]));
    let home = Home::new();
    write_config(&home, 200, 3600);
    let url = sim.url.clone();
    let p = Pipeline::start(&home, None, &["--no-db", "--server", &url, "--since", "5s"]);
    p.wait_for("the first sweep", |v| v["kind"] == "sweep");
    let completed = |p: &Pipeline, id: &str| {
        p.all()
            .iter()
            .filter(|v| v["kind"] == "call" && v["session"] == id && v["status"] == "completed")
            .map(|v| v["id"].as_str().unwrap().to_string())
            .collect::<std::collections::BTreeSet<_>>()
            .len()
    };
    let wait_calls = |p: &Pipeline, id: &str| {
        let t0 = Instant::now();
        while completed(p, id) < 3 {
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "{id}: {} of 3 calls\n{}",
                completed(p, id),
                p.stderr()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    let full_sweeps = |p: &Pipeline| {
        p.all()
            .iter()
            .filter(|v| v["kind"] == "sweep" && v["full"] == true)
            .count()
    };
    let first = sim.run(&name);
    wait_calls(&p, &first.id);
    assert_eq!(full_sweeps(&p), 1, "only the first read was full");

    sim.restart_server();
    // the stream connects again within its backoff (1 s, then 2, 4, 8, 10...) and asks for a
    // full read
    let t0 = Instant::now();
    while full_sweeps(&p) < 2 {
        assert!(
            t0.elapsed() < Duration::from_secs(40),
            "no full read after the restart\n{}",
            p.stderr()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(full_sweeps(&p), 2);
    let second = sim.run(&name);
    wait_calls(&p, &second.id);
    assert_eq!(
        full_sweeps(&p),
        2,
        "the second session came from its events"
    );
    // nothing blind: the server was read whenever the watchdog asked
    assert!(
        !p.all().iter().any(|v| v["kind"] == "blind"),
        "{:?}",
        p.all()
    );
    p.stop();
    sim.stop();
}
