//! Seeing every opencode session on the machine (issue #11): the database read by default,
//! servers found running, every project behind a server, exported sessions, one record per
//! session and one call per call id, and the faults a source can throw at the readers.

use crate::support::ocsim::{self, http, Sim};
use crate::support::stub::{Reply, Stub};
use crate::support::Home;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn write_config(home: &Home, text: &str) -> PathBuf {
    let cfg = home.join(".config/oc-watchdog/watchdog.toml");
    std::fs::create_dir_all(cfg.parent().unwrap()).unwrap();
    std::fs::write(&cfg, text).unwrap();
    cfg
}

/// A consistent copy of a live opencode database (the WAL folded in).
fn copy_db(from: &Path, to: &Path) {
    std::fs::create_dir_all(to.parent().unwrap()).unwrap();
    let c = rusqlite::Connection::open(from).unwrap();
    c.execute("VACUUM INTO ?1", [to.to_str().unwrap()]).unwrap();
}

fn ids(recs: &[Value]) -> Vec<&str> {
    recs.iter().map(|r| r["id"].as_str().unwrap()).collect()
}

#[test]
fn a_server_that_hangs_or_trickles_is_blind_after_one_deadline_and_the_database_is_still_read() {
    let sim = Sim::shared();
    let ran = sim.run("reread");
    let home = Home::new();
    copy_db(
        &sim.db_path(),
        &home.join(".local/share/opencode/opencode.db"),
    );
    let hang = Stub::start();
    hang.route("GET /global/health", Reply::Hang);
    let trickle = Stub::start();
    trickle
        .json(
            "GET /global/health",
            r#"{"healthy":true,"version":"1.18.33"}"#,
        )
        .route("GET /project", Reply::Trickle(200));
    write_config(
        &home,
        &format!(
            "[opencode]\nservers = [\"{}\", \"{}\"]\nserver_deadline_secs = 2\n",
            hang.url, trickle.url
        ),
    );
    let t0 = Instant::now();
    let r = home.cmd("oc-sessions").args(["--since", "1d"]).run();
    let took = t0.elapsed();
    r.expect_code(2);
    // one deadline per server, not per read: a byte every 200 ms would never time out a read
    assert!(
        took < Duration::from_secs(6),
        "took {took:?}\n{}",
        r.story()
    );
    let blind: Vec<(String, String)> = r
        .kind("blind")
        .iter()
        .map(|b| {
            (
                b["source"].as_str().unwrap().into(),
                b["reason"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(
        blind,
        [
            (
                hang.url.clone(),
                format!(
                    "GET {}/global/health: no complete answer within 2s (the overall deadline per server)",
                    hang.url
                )
            ),
            (
                trickle.url.clone(),
                format!(
                    "GET {}/project: no complete answer within 2s (the overall deadline per server)",
                    trickle.url
                )
            )
        ]
    );
    // the database still gives every session to judge
    let sources = r.kind("source");
    assert_eq!(sources.len(), 1, "{}", r.story());
    assert_eq!(sources[0]["reader"], "database");
    assert!(ids(&r.kind("session")).contains(&ran.id.as_str()));
}

#[test]
fn a_body_over_the_cap_is_blind_and_is_not_read_to_the_end() {
    let stub = Stub::start();
    stub.json(
        "GET /global/health",
        r#"{"healthy":true,"version":"1.18.33"}"#,
    )
    .route("GET /project", Reply::Big(200 << 20));
    let home = Home::new();
    write_config(&home, "[opencode]\nbody_cap_mib = 1\n");
    let r = home.cmd("oc-sessions").args(["--server", &stub.url]).run();
    r.expect_code(2);
    assert_eq!(
        r.kind("blind")[0]["reason"],
        format!(
            "GET {}/project: body over the cap of 1 MiB (body_cap_mib)",
            stub.url
        )
    );
    // the reader stopped at the cap: what went out is the cap plus what the socket buffers hold
    std::thread::sleep(Duration::from_millis(300));
    let sent = stub.sent.load(std::sync::atomic::Ordering::Relaxed);
    assert!(sent < 40 << 20, "the server wrote {sent} bytes");
}

#[test]
fn an_answer_too_large_to_hold_once_parsed_is_blind_before_it_is_held() {
    // 1.5M small key/value pairs: 20 MB of text, far under the byte cap, but some 150 MB once
    // parsed; each of four such servers is stopped at the parse budget (40 MiB estimated),
    // read at once (peak RSS of the four together, measured by hand: 166 MB; 1.05 GB for
    // four bodies of 4M pairs before the budget)
    let body = format!(
        "{{{}}}",
        (0..1_500_000)
            .map(|i| format!("\"k{i}\":0"))
            .collect::<Vec<_>>()
            .join(",")
    );
    let stubs: Vec<Stub> = (0..4)
        .map(|_| {
            let stub = Stub::start();
            stub.json(
                "GET /global/health",
                r#"{"healthy":true,"version":"1.18.33"}"#,
            )
            .json("GET /project", &body);
            stub
        })
        .collect();
    let home = Home::new();
    let servers = stubs.iter().flat_map(|s| ["--server", s.url.as_str()]);
    let r = home.cmd("oc-sessions").args(servers).run();
    r.expect_code(2);
    let mut reasons: Vec<String> = r
        .kind("blind")
        .iter()
        .map(|b| b["reason"].as_str().unwrap().to_string())
        .collect();
    reasons.sort();
    let mut want: Vec<String> = stubs
        .iter()
        .map(|s| {
            format!(
                "GET {}/project: answer too large to hold: it would take more than 40 MiB parsed (parsed_cap_mib)",
                s.url
            )
        })
        .collect();
    want.sort();
    assert_eq!(reasons, want, "{}", r.story());
}

#[test]
fn a_redirect_to_another_host_is_not_followed() {
    let other = Stub::start();
    other.json(
        "GET /global/health",
        r#"{"healthy":true,"version":"1.18.33"}"#,
    );
    let stub = Stub::start();
    stub.route(
        "GET /global/health",
        Reply::Redirect(
            302,
            format!("http://localhost:{}/global/health", other.port),
        ),
    );
    let home = Home::new();
    let r = home.cmd("oc-sessions").args(["--server", &stub.url]).run();
    r.expect_code(2);
    assert_eq!(
        r.kind("blind")[0]["reason"],
        format!(
            "GET {}/global/health: HTTP 302 redirect to \"http://localhost:{}/global/health\" not followed (another host)",
            stub.url, other.port
        )
    );
    assert!(other.requests().is_empty());
    // one on the same host and port is followed
    stub.route(
        "GET /global/health",
        Reply::Redirect(307, "/health2".into()),
    )
    .json("GET /health2", r#"{"healthy":true,"version":"1.18.33"}"#)
    .json("GET /project", "[]");
    let r = home.cmd("oc-sessions").args(["--server", &stub.url]).run();
    r.ok();
    assert_eq!(r.kind("source")[0]["version"], "1.18.33");
}

#[test]
fn reads_of_fifos_and_devices_neither_hang_nor_count() {
    let home = Home::new();
    let fifo = home.join("fifo");
    assert!(std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let plain = home.join("plain.txt");
    std::fs::write(&plain, "one\ntwo\nthree\n").unwrap();
    let read = |id: &str, path: &str| {
        json!({"id": id, "type": "tool", "tool": "read", "callID": "call_1",
               "state": {"status": "completed", "input": {"filePath": path}, "output": "x",
                         "metadata": {}, "time": {"start": 1, "end": 2}}})
    };
    let msgs = json!([{"info": {"id": "msg_1", "role": "assistant", "time": {"created": 1}},
        "parts": [read("prt_1", "/dev/zero"), read("prt_2", fifo.to_str().unwrap()),
                  read("prt_3", plain.to_str().unwrap())]}]);
    let stub = Stub::start();
    stub.json(
        "GET /global/health",
        r#"{"healthy":true,"version":"1.18.33"}"#,
    )
    .json(
        "GET /session/ses_x",
        r#"{"id":"ses_x","title":"t","time":{"created":1,"updated":2}}"#,
    )
    .json("GET /session/ses_x/message", &msgs.to_string());
    let t0 = Instant::now();
    let r = home
        .cmd("oc-calls")
        .args(["--server", &stub.url, "ses_x"])
        .run();
    r.ok();
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    let lines: Vec<Value> = r
        .kind("call")
        .iter()
        .map(|c| c["file_lines"].clone())
        .collect();
    assert_eq!(lines, [Value::Null, Value::Null, json!(3)]);
}

#[test]
fn a_locked_corrupt_or_newer_database_is_blind_naming_path_and_reason() {
    let sim = Sim::shared();
    sim.run("reread");
    let home = Home::new();
    let db = home.join(".local/share/opencode/opencode.db");
    let cmd = || home.cmd("oc-sessions").args(["--no-discover"]).run();

    // newer schema: a column this reader needs is gone
    copy_db(&sim.db_path(), &db);
    let c = rusqlite::Connection::open(&db).unwrap();
    c.execute_batch("ALTER TABLE session RENAME COLUMN time_updated TO time_touched")
        .unwrap();
    drop(c);
    let r = cmd();
    r.expect_code(2);
    assert_eq!(r.kind("blind")[0]["source"], db.to_str().unwrap());
    assert_eq!(
        r.kind("blind")[0]["reason"],
        "not an opencode database of a known schema (newer opencode?): table session has no column time_updated"
    );

    // locked: a writer holds an exclusive lock on a rollback-journal database
    std::fs::remove_file(&db).unwrap();
    copy_db(&sim.db_path(), &db);
    let w = rusqlite::Connection::open(&db).unwrap();
    w.pragma_update(None, "journal_mode", "DELETE").unwrap();
    w.execute_batch("BEGIN EXCLUSIVE; DELETE FROM todo;")
        .unwrap();
    let t0 = Instant::now();
    let r = cmd();
    r.expect_code(2);
    assert!(t0.elapsed() < Duration::from_secs(6));
    assert_eq!(r.kind("blind")[0]["source"], db.to_str().unwrap());
    assert_eq!(
        r.kind("blind")[0]["reason"],
        "cannot read: database is locked"
    );
    w.execute_batch("ROLLBACK").unwrap();
    drop(w);
    let r = cmd();
    r.ok();
    assert_eq!(r.kind("source")[0]["reader"], "database");

    // corrupt: the pages are garbage
    let mut bytes = std::fs::read(&db).unwrap();
    for b in bytes.iter_mut().skip(100) {
        *b = 0xA5;
    }
    std::fs::write(&db, bytes).unwrap();
    let r = cmd();
    r.expect_code(2);
    assert_eq!(r.kind("blind")[0]["source"], db.to_str().unwrap());
    let why = r.kind("blind")[0]["reason"].as_str().unwrap().to_string();
    assert!(
        why.starts_with("cannot read: ") && why.contains("malformed"),
        "{why}"
    );
}

#[test]
fn a_session_and_its_calls_are_read_once_however_often_they_come() {
    let sim = Sim::shared();
    let ran = sim.run("reread");
    let home = Home::new();
    // one server under two URLs is one source
    let local = sim.url.replace("127.0.0.1", "localhost");
    write_config(&home, &format!("[opencode]\nservers = [\"{local}\"]\n"));
    let listed = home
        .cmd("oc-sessions")
        .args([
            "--server", &sim.url, "--no-db", "--also", &ran.id, "--since", "1ms",
        ])
        .run();
    listed.ok();
    let src = listed.kind("source");
    assert_eq!(src.len(), 1, "{}", listed.story());
    assert_eq!(src[0]["found"], json!(["argument", "configured"]));
    // the stream fed twice: each session read once, each call written once
    let twice = format!("{0}{0}", listed.stdout());
    let r = home.cmd("oc-calls").stdin(twice).run();
    r.ok();
    let mine = |kind: &str, key: &str| {
        r.kind(kind)
            .iter()
            .filter(|c| c[key] == ran.id.as_str())
            .count()
    };
    assert_eq!(mine("session", "id"), 1);
    assert_eq!(mine("call", "session"), 8);
    assert_eq!(mine("activity", "session"), 1);
    // calls already in the stream are not written again
    let again = home.cmd("oc-calls").stdin(r.stdout()).run();
    again.ok();
    assert_eq!(again.stdout(), r.stdout());
    let v = home.cmd("progress-detect").stdin(again.stdout()).run();
    v.ok();
    let verdicts: Vec<Value> = v
        .kind("verdict")
        .into_iter()
        .filter(|x| x["session"] == ran.id.as_str())
        .collect();
    assert_eq!(verdicts.len(), 1);
    assert_eq!(verdicts[0]["calls"], 8);
}

/// Runs `opencode export ID` as the server's own user would.
fn export(sim: &Sim, id: &str, to: &Path) {
    let out = ocsim::opencode(&sim.home, &sim.proj)
        .args(["export", id])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "opencode export: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::write(to, &out.stdout).unwrap();
}

#[test]
fn an_exported_session_gives_the_records_http_and_the_database_give() {
    let sim = Sim::shared();
    let ran = sim.run("healthy");
    let home = Home::new();
    let file = home.join("s.json");
    export(sim, &ran.id, &file);
    let from_export = home
        .cmd("oc-calls")
        .args(["--export", file.to_str().unwrap()])
        .run();
    from_export.ok();
    let over_http = home
        .cmd("oc-calls")
        .args(["--server", &sim.url, &ran.id])
        .run();
    over_http.ok();
    let from_db = home
        .cmd("oc-calls")
        .args(["--db", sim.db_path().to_str().unwrap(), &ran.id])
        .run();
    from_db.ok();
    let calls = from_export.kind("call");
    assert_eq!(calls.len(), 9);
    assert_eq!(calls, over_http.kind("call"));
    assert_eq!(calls, from_db.kind("call"));
    assert_eq!(from_export.kind("activity"), from_db.kind("activity"));
    // the output of a completed call is there as a hash, equal from every source
    assert!(calls
        .iter()
        .all(|c| c["out"].as_str().unwrap().starts_with("sha1:")));
    let strip = |mut s: Value| {
        for k in ["source", "status"] {
            s.as_object_mut().unwrap().remove(k);
        }
        s
    };
    let s = from_export.kind("session");
    assert_eq!(s[0]["source"], format!("export:{}", file.display()));
    assert_eq!(
        s.into_iter().map(strip).collect::<Vec<_>>(),
        from_db
            .kind("session")
            .into_iter()
            .map(strip)
            .collect::<Vec<_>>()
    );
    // stdin, two documents one after the other, the same session once
    let text = std::fs::read_to_string(&file).unwrap();
    let r = home
        .cmd("oc-calls")
        .args(["--export", "-"])
        .stdin(format!("{text}\n{text}"))
        .run();
    r.ok();
    assert_eq!(r.kind("session").len(), 1);
    assert_eq!(r.kind("call"), calls);
    // and the backtest of a session someone sent
    let v = home
        .cmd("progress-detect")
        .stdin(from_export.stdout())
        .run();
    v.ok();
    assert_eq!(v.kind("verdict")[0]["flagged"], false);
    // not an export: named
    std::fs::write(&file, r#"{"id":"ses_x"}"#).unwrap();
    let r = home
        .cmd("oc-calls")
        .args(["--export", file.to_str().unwrap()])
        .run();
    r.expect_code(2);
    assert_eq!(
        r.kind("blind")[0]["reason"],
        "document 1: no \"info\" object (not an `opencode export` document)"
    );
    // a good export and then a cut-off one: the good one's calls stay, the bad one is named
    let cut = (0..=text.len() / 2)
        .rev()
        .find(|&i| text.is_char_boundary(i))
        .unwrap();
    let r = home
        .cmd("oc-calls")
        .args(["--export", "-"])
        .stdin(format!("{text}\n{}", &text[..cut]))
        .run();
    r.expect_code(2);
    assert_eq!(r.kind("call"), calls, "{}", r.story());
    let blind = r.kind("blind");
    assert_eq!(blind.len(), 1, "{}", r.story());
    assert_eq!(blind[0]["source"], "export:-");
    assert!(
        blind[0]["reason"]
            .as_str()
            .unwrap()
            .starts_with("document 2: not JSON: EOF while parsing"),
        "{}",
        r.story()
    );
    // an empty export is a blind record, not a quiet success
    std::fs::write(&file, "").unwrap();
    let r = home
        .cmd("oc-calls")
        .args(["--export", file.to_str().unwrap()])
        .run();
    r.expect_code(2);
    assert_eq!(r.kind("call").len(), 0);
    assert_eq!(
        r.kind("blind")[0]["reason"],
        "no export document (the input is empty)"
    );
}

#[test]
fn out_is_the_hash_of_the_real_output_equal_for_equal_outputs_and_null_while_running() {
    let sim = Sim::shared();
    let ran = sim.run("reread");
    let home = Home::new();
    let r = home
        .cmd("oc-calls")
        .args(["--server", &sim.url, &ran.id])
        .run();
    r.ok();
    let calls = r.kind("call");
    // the real output of the first read, from opencode itself
    let msgs = sim.get(&format!("/session/{}/message", ran.id));
    let output = msgs
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["parts"].as_array().unwrap())
        .find(|p| p["type"] == "tool")
        .unwrap()["state"]["output"]
        .as_str()
        .unwrap()
        .to_string();
    use sha1::{Digest, Sha1};
    let hex: String = Sha1::digest(output.as_bytes())[..6]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(calls[0]["out"], format!("sha1:{hex}"));
    // eight reads of one unchanged file: one output
    assert!(calls.iter().all(|c| c["out"] == calls[0]["out"]));
    // a failed call hashes its error text; a running one has none
    let err = json!({"id": "prt_e", "type": "tool", "tool": "read", "callID": "c",
        "state": {"status": "error", "input": {"filePath": "/nope"}, "error": "File not found: /nope",
                  "time": {"start": 1, "end": 2}}});
    let run = json!({"id": "prt_r", "type": "tool", "tool": "bash", "callID": "d",
        "state": {"status": "running", "input": {"command": "sleep 9"},
                  "metadata": {"output": "partial"}, "time": {"start": 3}}});
    let msgs = json!([{"info": {"id": "msg_1", "role": "assistant", "time": {"created": 1}},
                       "parts": [err, run]}]);
    let stub = Stub::start();
    stub.json(
        "GET /global/health",
        r#"{"healthy":true,"version":"1.18.33"}"#,
    )
    .json(
        "GET /session/ses_x",
        r#"{"id":"ses_x","title":"t","time":{"created":1,"updated":2}}"#,
    )
    .json("GET /session/ses_x/message", &msgs.to_string());
    let r = home
        .cmd("oc-calls")
        .args(["--server", &stub.url, "ses_x"])
        .run();
    r.ok();
    let calls = r.kind("call");
    let hex: String = Sha1::digest(b"File not found: /nope")[..6]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(calls[0]["out"], format!("sha1:{hex}"));
    assert_eq!(calls[1]["out"], Value::Null);
}

/// Waits until `dir`'s sessions on a server include one with at least `n` tool parts.
fn wait_calls(url: &str, dir: &Path, n: usize) -> String {
    let q = format!("directory={}", dir.display());
    let t0 = Instant::now();
    loop {
        let (_, list) = http("GET", &format!("{url}/session?{q}"), None);
        for s in list.as_array().into_iter().flatten() {
            let id = s["id"].as_str().unwrap();
            let (_, msgs) = http("GET", &format!("{url}/session/{id}/message?{q}"), None);
            let tools = msgs
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|m| m["parts"].as_array().cloned().unwrap_or_default())
                .filter(|p| p["type"] == "tool")
                .count();
            if tools >= n {
                return id.to_string();
            }
        }
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "no session with {n} calls"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

#[test]
fn two_projects_behind_one_server_are_both_listed() {
    let sim = Sim::start();
    let here = sim.run("reread");
    let other = sim.proj.parent().unwrap().join("proj_b");
    ocsim::make_project(&other);
    let q = format!("directory={}", other.display());
    let (code, ses) = http(
        "POST",
        &format!("{}/session?{q}", sim.url),
        Some(&json!({})),
    );
    assert_eq!(code, 200, "{ses}");
    let there = ses["id"].as_str().unwrap().to_string();
    let (code, v) = http(
        "POST",
        &format!("{}/session/{there}/prompt_async?{q}", sim.url),
        Some(&json!({"parts": [{"type": "text", "text": "SCRIPT:reread go"}]})),
    );
    assert!(code < 300, "{v}");
    wait_calls(&sim.url, &other, 8);
    let home = Home::new();
    let r = home
        .cmd("oc-sessions")
        .args(["--server", &sim.url, "--no-db"])
        .run();
    r.ok();
    let sessions = r.kind("session");
    let dir_of = |id: &str| {
        sessions
            .iter()
            .find(|s| s["id"] == id)
            .unwrap_or_else(|| panic!("{id} not listed\n{}", r.story()))["directory"]
            .clone()
    };
    assert_eq!(dir_of(&here.id), sim.proj.to_str().unwrap());
    assert_eq!(dir_of(&there), other.to_str().unwrap());
    assert_eq!(r.kind("source")[0]["projects"], 2);
    // and oc-calls reads the other project's session through the same server
    let c = home.cmd("oc-calls").stdin(r.stdout()).run();
    c.ok();
    let n = c
        .kind("call")
        .iter()
        .filter(|x| x["session"] == there.as_str())
        .count();
    assert_eq!(n, 8);
}

#[test]
fn oc_calls_reads_ids_from_the_database_unless_a_server_is_named() {
    let sim = Sim::shared();
    let ran = sim.run("reread");
    let home = Home::new();
    let db = home.join(".local/share/opencode/opencode.db");
    copy_db(&sim.db_path(), &db);
    let r = home.cmd("oc-calls").args([&ran.id]).run();
    r.ok();
    assert_eq!(r.kind("session")[0]["source"], db.to_str().unwrap());
    assert_eq!(r.kind("call").len(), 8);
    let r = home
        .cmd("oc-calls")
        .args(["--server", &sim.url, &ran.id])
        .run();
    r.ok();
    assert_eq!(r.kind("session")[0]["source"], sim.url.as_str());
    assert_eq!(r.kind("call").len(), 8);
}

/// A second opencode database (another release channel's, one named by `OPENCODE_DB`) given
/// with `--source` or configured in `[opencode] sources` is listed through its own index, says
/// where it was found, and its sessions' calls are read from it; one that cannot be opened is a
/// blind record naming it, and the rest is still read.
#[test]
fn another_database_given_or_configured_is_listed_and_its_calls_read() {
    let sim = Sim::shared();
    let ran = sim.run("reread");
    let home = Home::new();
    let beta = home.join(".local/share/opencode/opencode-beta.db");
    copy_db(&sim.db_path(), &beta);
    let beta_s = beta.to_str().unwrap();
    let given = home
        .cmd("oc-sessions")
        .args(["--no-discover", "--since", "1d", "--source", beta_s])
        .run();
    given.ok();
    let src = given.kind("source");
    assert_eq!(src.len(), 1, "{}", given.story());
    assert_eq!(
        (&src[0]["source"], &src[0]["reader"], &src[0]["found"]),
        (&json!(beta_s), &json!("database"), &json!(["argument"]))
    );
    let mine: Vec<Value> = given
        .kind("session")
        .into_iter()
        .filter(|s| s["id"] == ran.id.as_str())
        .collect();
    assert_eq!(mine.len(), 1, "{}", given.story());
    assert_eq!(mine[0]["source"], beta_s);
    let calls = home.cmd("oc-calls").stdin(given.stdout()).run();
    calls.ok();
    let n = calls
        .kind("call")
        .iter()
        .filter(|c| c["session"] == ran.id.as_str())
        .count();
    assert_eq!(n, 8, "{}", calls.story());

    // configured, beside the default database holding the same sessions: one record each,
    // naming both; a database that is not there is blind, the others are still read
    copy_db(
        &sim.db_path(),
        &home.join(".local/share/opencode/opencode.db"),
    );
    write_config(
        &home,
        &format!("[opencode]\nsources = [\"{beta_s}\", \"/nonexistent/gone.db\"]\n"),
    );
    let both = home
        .cmd("oc-sessions")
        .args(["--no-discover", "--since", "1d"])
        .run();
    both.expect_code(2);
    let found: Vec<(Value, Value)> = both
        .kind("source")
        .iter()
        .map(|s| (s["source"].clone(), s["found"].clone()))
        .collect();
    let default = home.join(".local/share/opencode/opencode.db");
    assert_eq!(
        found,
        [
            (json!(default.to_str().unwrap()), json!(["default"])),
            (json!(beta_s), json!(["configured"])),
        ]
    );
    let blind = both.kind("blind");
    assert_eq!(blind.len(), 1, "{}", both.story());
    assert_eq!(blind[0]["source"], "/nonexistent/gone.db");
    let mine: Vec<Value> = both
        .kind("session")
        .into_iter()
        .filter(|s| s["id"] == ran.id.as_str())
        .collect();
    assert_eq!(mine.len(), 1);
    assert_eq!(
        mine[0]["sources"],
        json!([default.to_str().unwrap(), beta_s]),
        "{}",
        both.story()
    );
}

#[test]
fn a_session_imported_under_an_id_with_shell_syntax_is_refused_when_read() {
    // issue 42: opencode 1.18.33 imports an export whose id is `ses_x$(...)`; the readers
    // listed it, and the commands offered for it ran what it held
    let sim = Sim::start();
    let ran = sim.run("healthy");
    let home = Home::new();
    let file = home.join("s.json");
    export(&sim, &ran.id, &file);
    let bad = format!("ses_x$(touch {}/pwned)", home.path().display());
    let text = std::fs::read_to_string(&file)
        .unwrap()
        .replace(&ran.id, &bad);
    std::fs::write(&file, text).unwrap();
    let out = ocsim::opencode(&sim.home, &sim.proj)
        .arg("import")
        .arg(&file)
        .output()
        .unwrap();
    assert!(out.status.success(), "opencode import: {out:?}");
    let said = format!("session {bad:?} refused: its id is not an opencode session id");
    // the database, then the server, each as the only source
    let db = sim.db_path();
    for args in [
        vec!["--db", db.to_str().unwrap(), "--no-discover"],
        vec!["--no-db", "--no-discover", "--server", &sim.url],
    ] {
        let r = home.cmd("oc-sessions").args(&args).run();
        let listed = r.kind("session");
        assert!(ids(&listed).contains(&ran.id.as_str()), "{}", r.story());
        assert!(!r.stdout().contains("ses_x$("), "{}", r.story());
        assert_eq!(r.stderr().matches(&said).count(), 1, "{}", r.story());
    }
    // oc-calls: asked for it by id, or handed its session record
    let r = home
        .cmd("oc-calls")
        .args(["--db", db.to_str().unwrap(), &bad, &ran.id])
        .run();
    r.expect_code(2);
    assert!(r.stderr().contains(&said), "{}", r.story());
    assert!(!r.stdout().contains("ses_x$("), "{}", r.story());
    assert!(!r.kind("call").is_empty(), "{}", r.story());
    let listed = json!({"kind": "session", "id": bad, "source": db.to_str().unwrap()});
    let r = home.cmd("oc-calls").stdin(format!("{listed}\n")).run();
    assert!(r.stderr().contains(&said), "{}", r.story());
    assert_eq!(r.stdout(), "", "{}", r.story());
    assert!(!home.join("pwned").exists());
}
