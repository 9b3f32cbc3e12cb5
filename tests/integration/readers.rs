//! oc-sessions and oc-calls against a real `opencode serve` driven by the scripted model, its
//! real SQLite database, and stub servers for faults and shapes opencode does not produce.

use crate::support::ocsim::{Opts, Sim};
use crate::support::stub::Stub;
use crate::support::Home;
use serde_json::Value;
use std::time::{Duration, Instant};

fn calls_over_http(home: &Home, sim: &Sim, id: &str) -> Vec<Value> {
    let r = home.cmd("oc-calls").args(["--server", &sim.url, id]).run();
    r.ok();
    r.kind("call")
}

fn col<'a>(calls: &'a [Value], key: &str) -> Vec<&'a Value> {
    calls.iter().map(|c| &c[key]).collect()
}

#[test]
fn rereading_one_file_gives_identical_read_fingerprints() {
    let sim = Sim::shared();
    let ran = sim.run("reread");
    let home = Home::new();
    let r = home
        .cmd("oc-calls")
        .args(["--server", &sim.url, &ran.id])
        .run();
    r.ok();
    let recs = r.records();
    assert_eq!(recs[0]["kind"], "session");
    assert_eq!(recs[0]["id"], ran.id.as_str());
    assert_eq!(recs[0]["agent"], "build");
    assert_eq!(recs[0]["model"], "sim/sim-model");
    let calls = r.kind("call");
    assert_eq!(calls.len(), 8);
    let spec = format!("{}/docs/spec.md", sim.proj.display());
    for c in &calls {
        assert_eq!(c["tool"], "read");
        assert_eq!(c["args"], serde_json::json!({"filePath": spec}));
        assert_eq!(c["status"], "completed");
        assert_eq!(c["landed"], false);
        assert_eq!(c["file_lines"], 50);
        assert_eq!(c["session"], ran.id.as_str());
        assert_eq!(c["model"], "sim/sim-model");
        assert!(c["cost"].as_f64().unwrap() > 0.0, "{c}");
        assert!(c["end"].as_i64().unwrap() >= c["t"].as_i64().unwrap());
        assert!(c["id"].as_str().unwrap().starts_with("prt_"));
    }
    let ts: Vec<i64> = calls.iter().map(|c| c["t"].as_i64().unwrap()).collect();
    assert!(
        ts.windows(2).all(|w| w[0] <= w[1]),
        "calls out of order: {ts:?}"
    );
}

#[test]
fn healthy_session_lands_its_edit_write_and_commit() {
    let sim = Sim::shared();
    let ran = sim.run("healthy");
    let home = Home::new();
    let calls = calls_over_http(&home, sim, &ran.id);
    let tools: Vec<&str> = calls.iter().map(|c| c["tool"].as_str().unwrap()).collect();
    assert_eq!(
        tools,
        [
            "todowrite",
            "glob",
            "grep",
            "read",
            "edit",
            "write",
            "bash",
            "bash",
            "todowrite"
        ]
    );
    let landed: Vec<bool> = calls
        .iter()
        .map(|c| c["landed"].as_bool().unwrap())
        .collect();
    assert_eq!(
        landed,
        [false, false, false, false, true, true, false, true, false]
    );
    assert_eq!(calls[6]["exit"], 0);
    assert_eq!(calls[7]["exit"], 0);
    assert_eq!(
        calls[7]["args"]["command"],
        "git add -A && git commit -q -m 'Fix navItem1; add footer'"
    );
    assert_eq!(calls[3]["args"]["offset"], 1);
    assert_eq!(calls[3]["args"]["limit"], 20);
    assert_eq!(calls[3]["file_lines"], 300);
    assert_eq!(calls[2]["args"]["pattern"], "function navItem1\\b");
    assert_eq!(calls[2]["args"]["include"], "*.js");
    // content never leaves: the edit's strings and the written file are hashes
    let old = calls[4]["args"]["oldString"].as_str().unwrap();
    assert!(old.starts_with("sha1:") && old.len() == 17, "{old}");
    assert!(calls[5]["args"]["content"]
        .as_str()
        .unwrap()
        .starts_with("sha1:"));
    assert!(calls[0]["args"]["todos"][0]["content"]
        .as_str()
        .unwrap()
        .starts_with("sha1:"));
    assert_eq!(
        calls[0]["args"]["todos"][0]["status"],
        "sha1:".to_string() + &sha1_12("in_progress")
    );
}

fn sha1_12(s: &str) -> String {
    use sha1::{Digest, Sha1};
    Sha1::digest(s.as_bytes())[..6]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[test]
fn parent_and_task_subagents_are_listed_as_a_tree() {
    let sim = Sim::shared();
    let ran = sim.run("parent");
    assert_eq!(ran.children.len(), 2);
    let home = Home::new();
    let r = home.cmd("oc-sessions").args(["--server", &sim.url]).run();
    r.ok();
    let sessions = r.kind("session");
    let mine: Vec<&Value> = sessions
        .iter()
        .filter(|s| s["id"] == ran.id.as_str() || s["parent"] == ran.id.as_str())
        .collect();
    assert_eq!(mine.len(), 3);
    let mut agents: Vec<&str> = mine
        .iter()
        .filter(|s| s["parent"] == ran.id.as_str())
        .map(|s| s["agent"].as_str().unwrap())
        .collect();
    agents.sort();
    assert_eq!(agents, ["explore", "general"]);
    let src = r.kind("source");
    assert_eq!(src[0]["source"], sim.url.as_str());
    assert_eq!(src[0]["version"], "1.18.33");
    // The parent's own calls: two task calls; each child judged on its own calls.
    let calls = calls_over_http(&home, sim, &ran.id);
    assert_eq!(
        col(&calls, "tool"),
        [&Value::from("task"), &Value::from("task")]
    );
    let subagents: Vec<&str> = calls
        .iter()
        .map(|c| c["args"]["subagent_type"].as_str().unwrap())
        .collect();
    assert_eq!(subagents, ["explore", "general"]);
    assert!(calls[0]["args"]["prompt"]
        .as_str()
        .unwrap()
        .starts_with("sha1:"));
    let looper = mine.iter().find(|s| s["agent"] == "general").unwrap();
    let child_calls = calls_over_http(&home, sim, looper["id"].as_str().unwrap());
    assert_eq!(child_calls.len(), 10);
    assert!(child_calls.iter().all(|c| c["tool"] == "grep"
        && c["args"]["pattern"] == "len\\(xs\\)"
        && c["session"] == looper["id"]));
    // --since picks a child and brings its parent, not unrelated sessions
    let since = looper["updated"].as_i64().unwrap();
    let r = home
        .cmd("oc-sessions")
        .args(["--server", &sim.url, "--since", &since.to_string()])
        .run();
    let ids: Vec<String> = r
        .kind("session")
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_string())
        .collect();
    assert!(ids.contains(&ran.id), "parent missing from {ids:?}");
    assert!(ids.contains(&looper["id"].as_str().unwrap().to_string()));
}

#[test]
fn failing_bash_keeps_its_exit_code_and_a_timeout_has_none() {
    let sim = Sim::shared();
    let ran = sim.run("failing_bash");
    let home = Home::new();
    let calls = calls_over_http(&home, sim, &ran.id);
    let tools: Vec<&str> = calls.iter().map(|c| c["tool"].as_str().unwrap()).collect();
    assert_eq!(tools, ["bash", "bash", "bash", "read"]);
    let exits: Vec<&Value> = col(&calls, "exit");
    assert_eq!(
        exits,
        [&Value::from(3), &Value::from(2), &Value::Null, &Value::Null]
    );
    let status: Vec<&str> = calls
        .iter()
        .map(|c| c["status"].as_str().unwrap())
        .collect();
    assert_eq!(status, ["completed", "completed", "completed", "error"]);
    assert_eq!(calls[3]["file_lines"], Value::Null);
    assert!(calls.iter().all(|c| c["landed"] == false));
    assert_eq!(calls[2]["args"]["timeout"], 1000);
}

#[test]
fn aborted_call_has_no_exit_and_lands_nothing() {
    let sim = Sim::shared();
    let ran = sim.run_with(
        "abort",
        Opts {
            abort_after: Some(Duration::from_secs(3)),
            ..Opts::default()
        },
    );
    let home = Home::new();
    let calls = calls_over_http(&home, sim, &ran.id);
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0]["tool"], "bash");
    assert_eq!(calls[0]["exit"], Value::Null);
    assert_eq!(calls[0]["landed"], false);
    let dur = calls[0]["end"].as_i64().unwrap() - calls[0]["t"].as_i64().unwrap();
    assert!(dur < 20_000, "aborted after {dur} ms");
}

#[test]
fn bash_that_edits_files_lands_through_opencodes_patch_record() {
    let sim = Sim::shared();
    let ran = sim.run("bash_edit");
    let home = Home::new();
    let calls = calls_over_http(&home, sim, &ran.id);
    let landed: Vec<bool> = calls
        .iter()
        .map(|c| c["landed"].as_bool().unwrap())
        .collect();
    assert_eq!(landed, [true, false]);
}

#[test]
fn secrets_and_content_never_leave_oc_calls() {
    let sim = Sim::shared();
    let ran = sim.run("secrets");
    let home = Home::new();
    let r = home
        .cmd("oc-calls")
        .args(["--server", &sim.url, &ran.id])
        .run();
    r.ok();
    let out = r.stdout();
    for secret in [
        "abc123secret",
        "eyJhbGciOiJIUzI1NiJ9",
        "launch code",
        "private note",
    ] {
        assert!(!out.contains(secret), "{secret} leaked:\n{out}");
    }
    let calls = r.kind("call");
    assert_eq!(
        calls[0]["args"]["command"],
        "API_TOKEN=*** curl -s -H 'Authorization: Bearer ***' http://127.0.0.1:9/x || true"
    );
}

#[test]
fn http_and_database_give_the_same_calls() {
    let sim = Sim::shared();
    let healthy = sim.run("healthy");
    let parent = sim.run("parent");
    let home = Home::new();
    let mut ids = vec![healthy.id.clone(), parent.id.clone()];
    ids.extend(parent.children.iter().cloned());
    let db = sim.db_path();
    let over_http = home
        .cmd("oc-calls")
        .args(["--server", &sim.url])
        .args(&ids)
        .run();
    over_http.ok();
    let from_db = home
        .cmd("oc-calls")
        .args(["--db", db.to_str().unwrap()])
        .args(&ids)
        .run();
    from_db.ok();
    let a = over_http.kind("call");
    let b = from_db.kind("call");
    assert_eq!(a.len(), 9 + 2 + 3 + 10);
    assert_eq!(a, b);
    // the sessions agree too, but for where they came from and the live status
    let strip = |mut s: Value| {
        let o = s.as_object_mut().unwrap();
        // live evidence only a server has: status, pending requests
        for k in ["source", "status", "pending"] {
            o.remove(k);
        }
        s
    };
    let sa: Vec<Value> = over_http.kind("session").into_iter().map(strip).collect();
    let sb: Vec<Value> = from_db.kind("session").into_iter().map(strip).collect();
    assert_eq!(sa, sb);
    // the pipeline form: the database, and the server found running on it (the same
    // sessions, one record each, naming both), each call once
    let listed = home
        .cmd("oc-sessions")
        .args(["--db", db.to_str().unwrap()])
        .run();
    listed.ok();
    let sources = listed.kind("source");
    assert_eq!(sources.len(), 2, "{}", listed.story());
    assert_eq!(sources[0]["source"], db.to_str().unwrap());
    assert_eq!(sources[0]["reader"], "database");
    assert_eq!(sources[0]["found"], serde_json::json!(["argument"]));
    assert_eq!(sources[1]["source"], sim.url.as_str());
    assert_eq!(sources[1]["reader"], "server");
    assert_eq!(sources[1]["found"], serde_json::json!(["discovered"]));
    let h = listed
        .kind("session")
        .into_iter()
        .filter(|s| s["id"] == healthy.id.as_str())
        .collect::<Vec<_>>();
    assert_eq!(h.len(), 1);
    assert_eq!(h[0]["source"], sim.url.as_str());
    assert_eq!(
        h[0]["sources"],
        serde_json::json!([sim.url, db.to_str().unwrap()])
    );
    assert_eq!(h[0]["status"], "idle");
    let piped = home.cmd("oc-calls").stdin(listed.stdout()).run();
    piped.ok();
    let n = piped
        .kind("call")
        .iter()
        .filter(|c| c["session"] == healthy.id.as_str())
        .count();
    assert_eq!(n, 9);
    assert_eq!(piped.kind("source").len(), 2, "source records pass through");
}

#[test]
fn database_is_read_while_a_writer_holds_it() {
    let sim = Sim::shared();
    let ran = sim.run("reread");
    let db = sim.db_path();
    // another writer holds a write transaction: a WAL reader must not wait for it
    let w = rusqlite::Connection::open(&db).unwrap();
    w.busy_timeout(Duration::from_secs(5)).unwrap();
    w.execute_batch("BEGIN IMMEDIATE").unwrap();
    let home = Home::new();
    let t0 = Instant::now();
    let r = home
        .cmd("oc-calls")
        .args(["--db", db.to_str().unwrap(), &ran.id])
        .run();
    r.ok();
    assert_eq!(r.kind("call").len(), 8);
    assert!(
        t0.elapsed() < Duration::from_secs(2),
        "reader waited {:?}",
        t0.elapsed()
    );
    w.execute_batch("ROLLBACK").unwrap();
}

#[test]
fn missing_database_is_named() {
    let home = Home::new();
    let r = home
        .cmd("oc-sessions")
        .args(["--db", "/nonexistent/opencode.db"])
        .run();
    r.expect_code(2);
    assert_eq!(
        r.stderr().trim(),
        "oc-sessions: opencode database /nonexistent/opencode.db: no such file"
    );
    // at opencode's own path, no database is no history yet: nothing to say
    let r = home.cmd("oc-sessions").args(["--no-discover"]).run();
    r.ok();
    assert_eq!(r.stdout(), "");
    assert_eq!(r.stderr(), "");
    // a file that is not a database is a blind record naming it and why
    let not_db = home.join(".local/share/opencode/opencode.db");
    std::fs::create_dir_all(not_db.parent().unwrap()).unwrap();
    std::fs::write(
        &not_db,
        "hello, not sqlite, but long enough to have a header page",
    )
    .unwrap();
    let r = home.cmd("oc-sessions").args(["--no-discover"]).run();
    r.expect_code(2);
    let blind = r.kind("blind");
    assert_eq!(blind.len(), 1, "{}", r.story());
    assert_eq!(blind[0]["source"], not_db.to_str().unwrap());
    assert_eq!(
        blind[0]["reason"],
        "cannot read: file is not a database",
        "{}",
        r.story()
    );
}

#[test]
fn no_opencode_is_a_quiet_empty_success() {
    let home = Home::new();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let t0 = Instant::now();
    let r = home
        .cmd("oc-sessions")
        .args([
            "--server",
            &format!("http://127.0.0.1:{port}"),
            "--since",
            "10m",
        ])
        .run();
    r.ok();
    assert_eq!(r.stdout(), "");
    assert_eq!(r.stderr(), "");
    assert!(t0.elapsed() < Duration::from_secs(2));
}

#[test]
fn every_configured_server_that_answers_is_read() {
    let sim = Sim::shared();
    let ran = sim.run("reread");
    let stub = Stub::start();
    stub.json("GET /global/health", r#"{"healthy":true,"version":"1.18.33"}"#)
        .json(
            "GET /session",
            r#"[{"id":"ses_stub1","title":"t","agent":"build","directory":"/w","time":{"created":1,"updated":2}}]"#,
        )
        .json("GET /session/status", r#"{"ses_stub1":{"type":"busy"}}"#);
    let home = Home::new();
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let cfg = home.join(".config/oc-watchdog/watchdog.toml");
    std::fs::create_dir_all(cfg.parent().unwrap()).unwrap();
    std::fs::write(
        &cfg,
        format!(
            "[opencode]\nservers = [\"{}\", \"http://127.0.0.1:{dead}\", \"{}\"]\n",
            sim.url, stub.url
        ),
    )
    .unwrap();
    let r = home.cmd("oc-sessions").run();
    r.ok();
    let sources: Vec<(String, Value)> = r
        .kind("source")
        .iter()
        .map(|s| {
            (
                s["source"].as_str().unwrap().to_string(),
                s["found"].clone(),
            )
        })
        .collect();
    assert_eq!(
        sources,
        [
            (sim.url.clone(), serde_json::json!(["configured"])),
            (stub.url.clone(), serde_json::json!(["configured"]))
        ]
    );
    let sessions = r.kind("session");
    assert!(sessions.iter().any(|s| s["id"] == ran.id.as_str()));
    let stubbed = sessions.iter().find(|s| s["id"] == "ses_stub1").unwrap();
    assert_eq!(stubbed["status"], "busy");
    assert_eq!(stubbed["source"], stub.url.as_str());
}

#[test]
fn basic_auth_is_sent_when_a_password_is_set() {
    let stub = Stub::start();
    stub.json(
        "GET /global/health",
        r#"{"healthy":true,"version":"1.18.33"}"#,
    )
    .json("GET /session", "[]")
    .json("GET /session/status", "{}");
    // base64("opencode:pw")
    stub.require_auth("Basic b3BlbmNvZGU6cHc=");
    let home = Home::new();
    let r = home
        .cmd("oc-sessions")
        .args(["--server", &stub.url])
        .env("OPENCODE_SERVER_PASSWORD", "pw")
        .run();
    r.ok();
    assert_eq!(r.kind("source")[0]["sessions"], 0);
    // without the password the server refuses: that is a blind watchdog, not an all-clear
    let r = home.cmd("oc-sessions").args(["--server", &stub.url]).run();
    r.expect_code(2);
    let blind = r.kind("blind");
    assert_eq!(
        blind[0]["reason"],
        format!("GET {}/global/health: HTTP 401", stub.url)
    );
}

#[test]
fn changed_api_shape_is_blind_not_empty() {
    let stub = Stub::start();
    stub.json(
        "GET /global/health",
        r#"{"healthy":true,"version":"1.99.0"}"#,
    )
    .json(
        "GET /session",
        r#"[{"id":"ses_x","title":"t","time":{"created":1,"updated":2}}]"#,
    )
    .json("GET /session/status", "{}")
    .json(
        "GET /session/ses_x",
        r#"{"id":"ses_x","title":"t","time":{"created":1,"updated":2}}"#,
    )
    .json(
        "GET /session/ses_x/message",
        r#"[{"info":{"id":"msg_1","role":"assistant"},"items":[]}]"#,
    );
    let home = Home::new();
    let r = home
        .cmd("oc-calls")
        .args(["--server", &stub.url, "ses_x"])
        .run();
    r.expect_code(2);
    let blind = r.kind("blind");
    assert_eq!(blind.len(), 1);
    assert_eq!(blind[0]["source"], stub.url.as_str());
    assert_eq!(
        blind[0]["reason"],
        "session ses_x: message msg_1 has no \"parts\" list"
    );
    // a session list that is not a list
    stub.json("GET /session", r#"{"sessions":[]}"#);
    let r = home.cmd("oc-sessions").args(["--server", &stub.url]).run();
    r.expect_code(2);
    assert_eq!(
        r.kind("blind")[0]["reason"],
        "GET /session did not return a list"
    );
}

#[test]
fn bad_stdin_lines_are_named_and_the_rest_is_read() {
    let home = Home::new();
    let r = home
        .cmd("oc-calls")
        .stdin("{\"kind\":\"note\",\"x\":1}\nnot json\n{\"kind\":\"session\",\"id\":\"ses_a\"}\n")
        .run();
    r.expect_code(2);
    assert_eq!(
        r.stdout().lines().next().unwrap(),
        "{\"kind\":\"note\",\"x\":1}"
    );
    let err = r.stderr();
    assert!(
        err.contains("oc-calls: stdin:2: expected ident at line 1 column 2"),
        "{err}"
    );
    assert!(
        err.contains("oc-calls: stdin:3: session ses_a has no \"source\""),
        "{err}"
    );
}

#[test]
fn broken_pipe_is_a_quiet_success() {
    // far more output than a pipe buffer holds, so the writer really meets a closed pipe
    let home = Home::new();
    let big = home.join("big.jsonl");
    let line = "{\"kind\":\"note\",\"text\":\"passes through unchanged\"}\n";
    std::fs::write(&big, line.repeat(50_000)).unwrap();
    let exe = assert_cmd::cargo::cargo_bin("oc-calls");
    let out = std::process::Command::new("bash")
        .arg("-c")
        .arg(format!(
            "set -o pipefail; '{}' < '{}' | head -c 10 >/dev/null",
            exe.display(),
            big.display()
        ))
        .env("HOME", home.path())
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&out.stderr).is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "oc-calls must exit 0 on a broken pipe"
    );
}
