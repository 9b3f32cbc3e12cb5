//! Liveness against real opencode sessions (a provider that stops answering mid-stream, 503
//! retries, an unanswered permission prompt, a session that stops with open todos, an abort),
//! replayed on a virtual clock with `progress-detect --now`, and through wd-alert.

use crate::support::ocsim::{http, Opts, Sim};
use crate::support::Home;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// The pipeline's JSONL for one session, as the tick would see it now.
fn capture(home: &Home, sim: &Sim, id: &str) -> String {
    let s = home
        .cmd("oc-sessions")
        .args(["--server", &sim.url, "--also", id, "--since", "1ms"])
        .run();
    s.ok();
    let mine: String = s
        .stdout()
        .lines()
        .filter(|l| l.contains("\"kind\":\"source\"") || l.contains(&format!("\"id\":\"{id}\"")))
        .map(|l| format!("{l}\n"))
        .collect();
    let c = home.cmd("oc-calls").stdin(mine).run();
    c.ok();
    c.stdout()
}

fn liveness_at(home: &Home, stream: &str, now: i64, id: &str) -> Value {
    let r = home
        .cmd("progress-detect")
        .args(["--now", &now.to_string()])
        .stdin(stream)
        .run();
    r.ok();
    r.kind("verdict")
        .into_iter()
        .find(|v| v["session"] == id)
        .unwrap()["liveness"]
        .clone()
}

fn start(sim: &Sim, script: &str, agent: Option<&str>) -> String {
    let (code, ses) = http("POST", &format!("{}/session", sim.url), Some(&json!({})));
    assert_eq!(code, 200);
    let id = ses["id"].as_str().unwrap().to_string();
    sim.prompt(
        &id,
        script,
        &Opts {
            agent: agent.map(String::from),
            ..Opts::default()
        },
    );
    id
}

/// Waits for the `hang` script's second model request: it streams its first chunk and then
/// says nothing.
fn wait_hanging(sim: &Sim, id: &str) {
    wait_until("the hanging request", || {
        let m = sim.get(&format!("/session/{id}/message"));
        m.as_array()
            .unwrap()
            .iter()
            .filter(|m| m["info"]["role"] == "assistant")
            .count()
            >= 2
    });
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_provider_that_stops_answering_is_suspect_at_300s_and_stalled_at_900s_never_before() {
    let sim = Sim::shared();
    let id = start(sim, "hang", None);
    // the second model request streams its first chunk and then says nothing
    wait_hanging(sim, &id);
    std::thread::sleep(Duration::from_millis(500));
    let home = Home::new();
    let stream = capture(&home, sim, &id);
    let act: Value = stream
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|r| r["kind"] == "activity")
        .unwrap();
    assert_eq!(act["in_flight"], true);
    let last = act["last_progress"].as_i64().unwrap();
    let at = |s: i64| liveness_at(&home, &stream, last + s * 1000, &id);
    assert_eq!(at(10)["class"], "active");
    let l = at(300);
    assert_eq!(
        (
            l["class"].as_str(),
            l["alert"].clone(),
            l["action"].as_str()
        ),
        (Some("suspect"), Value::Null, Some("probe"))
    );
    assert_eq!(at(899)["class"], "suspect");
    let l = at(900);
    assert_eq!(l["class"], "stalled");
    assert_eq!(l["alert"], "warning");
    assert_eq!(l["status"], "busy");
    assert_eq!(
        l["evidence"],
        "busy and silent for 900 s (hard threshold 900 s)"
    );
    // and the watchdog's answer at 900 s: one warning, once
    let db = home.join("wd.db").display().to_string();
    let run = |now: i64| {
        let r = home
            .cmd("progress-detect")
            .args(["--now", &now.to_string()])
            .stdin(stream.clone())
            .run();
        let t = home
            .cmd("wd-store")
            .args(["--db", &db, "--now", &now.to_string(), "tick"])
            .stdin(r.stdout())
            .run();
        let a = home
            .cmd("wd-alert")
            .args(["--db", &db, "--now", &now.to_string()])
            .stdin(t.stdout())
            .run();
        a.ok();
        a.records()
    };
    assert_eq!(run(last + 899_000), Vec::<Value>::new());
    let evs = run(last + 900_000);
    assert_eq!(evs.len(), 1);
    assert_eq!(evs[0]["dedup_key"], format!("stalled:{id}"));
    assert_eq!(evs[0]["severity"], "warning");
    assert_eq!(run(last + 1_200_000), Vec::<Value>::new());
    http("POST", &format!("{}/session/{id}/abort", sim.url), None);
}

#[test]
fn a_503_retry_is_recorded_with_its_attempt() {
    let sim = Sim::shared();
    let id = start(sim, "retry503", None);
    let mut seen = Value::Null;
    wait_until("status retry", || {
        let st = sim.get("/session/status");
        if st[&id]["type"] == "retry" {
            seen = st[&id].clone();
            true
        } else {
            false
        }
    });
    assert!(seen["attempt"].as_i64().unwrap() >= 1);
    let home = Home::new();
    // between two requests the status is retry for seconds (backoff); a read may still land on
    // the short busy moment of a request, so look up to five times
    let l = (0..5)
        .map(|_| liveness_at(&home, &capture(&home, sim, &id), sim_now(), &id))
        .find(|l| l["class"] == "retrying")
        .expect("never saw the session retrying");
    assert!(
        l["evidence"]
            .as_str()
            .unwrap()
            .starts_with("provider retry attempt "),
        "{l}"
    );
    assert_eq!(l["status"], "retry");
    assert_eq!(
        l["alert"],
        Value::Null,
        "under the bound: recorded, no alert"
    );
    sim.wait_idle(&id, None);
}

fn sim_now() -> i64 {
    oc_watchdog::cli::now_ms()
}

#[test]
fn an_unanswered_permission_prompt_needs_a_person_not_a_stall_alert() {
    let sim = Sim::shared();
    let id = start(sim, "ask_bash", Some("asker"));
    let mut req = String::new();
    wait_until("the permission request", || {
        let p = sim.get("/permission");
        match p
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["sessionID"] == id.as_str())
        {
            Some(p) => {
                req = p["id"].as_str().unwrap().to_string();
                true
            }
            None => false,
        }
    });
    let home = Home::new();
    let stream = capture(&home, sim, &id);
    // hours later it still is a person that is needed, not a stall
    let l = liveness_at(&home, &stream, sim_now() + 3 * 3_600_000, &id);
    assert_eq!(l["class"], "awaiting_user");
    assert_eq!(l["alert"], "info");
    assert_eq!(
        l["evidence"],
        "1 permission and 0 question request(s) wait for a person"
    );
    http(
        "POST",
        &format!("{}/permission/{req}/reply", sim.url),
        Some(&json!({"reply": "reject"})),
    );
    sim.wait_idle(&id, None);
}

#[test]
fn a_session_that_stops_with_open_todos_needs_finalization() {
    let sim = Sim::shared();
    let ran = sim.run("todo_stop");
    let home = Home::new();
    let stream = capture(&home, sim, &ran.id);
    let l = liveness_at(&home, &stream, sim_now(), &ran.id);
    assert_eq!(l["class"], "needs_finalization");
    assert_eq!(
        l["evidence"],
        "stopped with 2 todo(s) still pending or in progress"
    );
    assert_eq!(l["alert"], "info");
}

#[test]
fn an_aborted_session_is_interrupted_by_the_user() {
    let sim = Sim::shared();
    let ran = sim.run_with(
        "abort",
        Opts {
            abort_after: Some(Duration::from_secs(2)),
            ..Opts::default()
        },
    );
    let home = Home::new();
    let stream = capture(&home, sim, &ran.id);
    let l = liveness_at(&home, &stream, sim_now(), &ran.id);
    assert_eq!(l["class"], "interrupted");
    assert_eq!(l["evidence"], "interrupted by the user");
}

#[test]
fn the_nudge_is_sent_once_and_only_when_switched_on() {
    let sim = Sim::shared();
    let ran = sim.run("todo_stop");
    let home = Home::new();
    let db = home.join("wd.db").display().to_string();
    let on = home.join("on.toml");
    std::fs::write(&on, "[liveness]\nnudge = true\n").unwrap();
    let tick = |cfg: Option<&std::path::Path>| {
        let stream = capture(&home, sim, &ran.id);
        let mut args = vec!["--db".to_string(), db.clone()];
        if let Some(c) = cfg {
            args.extend(["--config".to_string(), c.display().to_string()]);
        }
        let v = home.cmd("progress-detect").stdin(stream).run();
        let t = home
            .cmd("wd-store")
            .args(&args)
            .args(["tick"])
            .stdin(v.stdout())
            .run();
        let a = home.cmd("wd-alert").args(&args).stdin(t.stdout()).run();
        a.ok();
        (t.stdout(), a)
    };
    let nudges = || -> Vec<String> {
        sim.get(&format!("/session/{}/message", ran.id))
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["info"]["role"] == "user")
            .flat_map(|m| m["parts"].as_array().unwrap().clone())
            .filter_map(|p| p["text"].as_str().map(String::from))
            .filter(|t| t.starts_with("[oc-watchdog nudge"))
            .collect()
    };
    // off by default: the alert, no prompt
    let (_, a) = tick(None);
    assert_eq!(
        a.records()[0]["dedup_key"],
        format!("unfinished:{}", ran.id)
    );
    assert!(!a.stderr().contains("nudge"), "{}", a.story());
    assert_eq!(nudges().len(), 0);
    // switched on, for a new alert episode on another database
    let db2 = home.join("wd2.db").display().to_string();
    let tick2 = || {
        let stream = capture(&home, sim, &ran.id);
        let args = [
            "--db".to_string(),
            db2.clone(),
            "--config".into(),
            on.display().to_string(),
        ];
        let v = home.cmd("progress-detect").stdin(stream).run();
        let t = home
            .cmd("wd-store")
            .args(&args)
            .args(["tick"])
            .stdin(v.stdout())
            .run();
        let a = home.cmd("wd-alert").args(&args).stdin(t.stdout()).run();
        a.ok();
        (t.stdout(), a)
    };
    let (input, a) = tick2();
    assert!(
        a.stderr()
            .contains(&format!("oc-watchdog: nudge session={} ", ran.id)),
        "{}",
        a.story()
    );
    assert!(a.stderr().contains("status=sent HTTP 204"), "{}", a.story());
    sim.wait_idle(&ran.id, None);
    assert_eq!(
        nudges(),
        ["[oc-watchdog nudge v1] Observed by the local watchdog: this session stopped while its todo \
          list still has open items (stopped with 2 todo(s) still pending or in progress). Please check \
          your todo list and the working tree, do not repeat actions that already took effect, and \
          either finish the remaining work or say briefly why you cannot."]
    );
    // the same tick again, and the next tick: nothing more is sent
    let again = home
        .cmd("wd-alert")
        .args(["--db", &db2, "--config", on.to_str().unwrap()])
        .stdin(input)
        .run();
    again.ok();
    let (_, a) = tick2();
    assert!(!a.stderr().contains("nudge"), "{}", a.story());
    sim.wait_idle(&ran.id, None);
    assert_eq!(nudges().len(), 1);
    let rows: Vec<String> = {
        let c = rusqlite::Connection::open(&db2).unwrap();
        let mut st = c
            .prepare("SELECT observation || ':' || status FROM actions")
            .unwrap();
        st.query_map([], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    };
    assert_eq!(rows, ["needs_finalization:sent"]);
}

/// Regression (#41): a stalled session the operator aborted resolved "recovered" ("the session
/// is interrupted now"); it now resolves "stopped", saying a person interrupted it.
#[test]
fn a_stalled_session_aborted_by_the_operator_resolves_stopped_not_recovered() {
    let sim = Sim::shared();
    let id = start(sim, "hang", None);
    wait_hanging(sim, &id);
    std::thread::sleep(Duration::from_millis(500));
    let home = Home::new();
    let db = home.join("wd.db").display().to_string();
    // the tick at `now`, on the virtual clock: wd-alert's transitions of this session
    let tick = |now: i64| -> Vec<String> {
        let stream = capture(&home, sim, &id);
        let v = home
            .cmd("progress-detect")
            .args(["--now", &now.to_string()])
            .stdin(stream)
            .run();
        v.ok();
        let t = home
            .cmd("wd-store")
            .args(["--db", &db, "tick", "--now", &now.to_string()])
            .stdin(v.stdout())
            .run();
        t.ok();
        let a = home
            .cmd("wd-alert")
            .args(["--db", &db])
            .stdin(t.stdout())
            .run();
        a.ok();
        a.stderr()
            .lines()
            .filter(|l| l.starts_with("oc-watchdog: dedup=") && l.contains(&id))
            .map(|l| l.split(" title=").next().unwrap().to_string())
            .collect()
    };
    let t0 = sim_now();
    assert_eq!(
        tick(t0 + 950_000),
        [format!(
            "oc-watchdog: dedup=stalled:{id} state=trigger severity=warning"
        )]
    );
    let (code, _) = http("POST", &format!("{}/session/{id}/abort", sim.url), None);
    assert_eq!(code, 200);
    sim.wait_idle(&id, None);
    // (the interruption is an alert of its own, as before)
    assert_eq!(
        tick(t0 + 960_000),
        [
            format!("oc-watchdog: dedup=stalled:{id} state=resolve severity=info reason=stopped"),
            format!("oc-watchdog: dedup=interrupted:{id} state=trigger severity=info"),
        ]
    );
    let why: String = rusqlite::Connection::open(&db)
        .unwrap()
        .query_row(
            "SELECT json_extract(body, '$.details.why') FROM events WHERE state = 'resolve'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(why, "the session stopped: interrupted by the user");
}

/// Regression (#41): a retrying session that stalled resolved its retrying alert "recovered"
/// ("the session is stalled now"). A real one: the provider answers 503 twice (opencode retries,
/// its status `retry`), then its third answer stops mid-stream (busy and silent). Ticked on a
/// virtual clock past the bounds: the retrying alert opens, then resolves "changed" saying the
/// session is stalled now, as the stalled alert opens; nothing says it recovered.
#[test]
fn a_retrying_session_that_stalls_resolves_changed_not_recovered() {
    let sim = Sim::shared();
    let id = start(sim, "retry_then_hang", None);
    wait_until("status retry", || {
        sim.get("/session/status")[&id]["type"] == "retry"
    });
    let home = Home::new();
    let db = home.join("wd.db").display().to_string();
    // the tick at `now` on the virtual clock, over a capture taken now: wd-alert's events and
    // transitions of this session
    let tick = |stream: String, now: i64| -> (Vec<Value>, Vec<String>) {
        let v = home
            .cmd("progress-detect")
            .args(["--now", &now.to_string()])
            .stdin(stream)
            .run();
        v.ok();
        let t = home
            .cmd("wd-store")
            .args(["--db", &db, "tick", "--now", &now.to_string()])
            .stdin(v.stdout())
            .run();
        t.ok();
        let a = home
            .cmd("wd-alert")
            .args(["--db", &db])
            .stdin(t.stdout())
            .run();
        a.ok();
        let said = a
            .stderr()
            .lines()
            .filter(|l| l.starts_with("oc-watchdog: dedup=") && l.contains(&id))
            .map(|l| l.split(" title=").next().unwrap().to_string())
            .collect();
        (a.records(), said)
    };
    let t0 = sim_now();
    // between two requests the status is retry for seconds (backoff); a read may land on a
    // request's short busy moment, so look until one reads retrying
    let retrying = (0..5)
        .map(|_| capture(&home, sim, &id))
        .find(|s| liveness_at(&home, s, t0, &id)["class"] == "retrying")
        .expect("never saw the session retrying");
    // past `retry_secs_max` (900 s) of retrying: a warning
    let (_, said) = tick(retrying, t0 + 905_000);
    assert_eq!(
        said,
        [format!(
            "oc-watchdog: dedup=retrying:{id} state=trigger severity=warning"
        )]
    );
    // the third request hangs mid-stream: busy and silent. The second request's short busy
    // moment reads busy too, and its 503 makes it retrying again (stop 48's CI read that), so
    // look until a capture reads stalled
    let t_hang = Instant::now();
    let stream = loop {
        wait_until("the hanging request", || {
            sim.get("/session/status")[&id]["type"] == "busy"
        });
        std::thread::sleep(Duration::from_millis(500));
        let s = capture(&home, sim, &id);
        let class = liveness_at(&home, &s, t0 + 960_000, &id)["class"].clone();
        if class == "stalled" {
            break s;
        }
        assert!(
            t_hang.elapsed() < Duration::from_secs(60),
            "never saw the hanging request stalled; last read {class}"
        );
    };
    let (events, said) = tick(stream, t0 + 960_000);
    assert_eq!(
        said,
        [
            format!("oc-watchdog: dedup=retrying:{id} state=resolve severity=info reason=changed"),
            format!("oc-watchdog: dedup=stalled:{id} state=trigger severity=warning"),
        ]
    );
    let resolve = events
        .iter()
        .find(|e| e["state"] == "resolve")
        .unwrap()
        .clone();
    assert_eq!(
        resolve["title"],
        "resolved (changed): opencode build session keeps retrying its provider"
    );
    let summary = resolve["summary"].as_str().unwrap();
    assert!(
        summary.starts_with(id.as_str())
            && summary.contains(": the session is stalled now: busy and silent for ")
            && summary.ends_with(" s (hard threshold 900 s)"),
        "{summary}"
    );
    assert!(!summary.contains("recover"), "{summary}");
    http("POST", &format!("{}/session/{id}/abort", sim.url), None);
    sim.wait_idle(&id, None);
}
