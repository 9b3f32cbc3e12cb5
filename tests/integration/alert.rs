//! wd-alert: the lifecycle over a sequence of ticks, delivery to a real desktop notification
//! daemon on a real D-Bus session bus, webhook and PagerDuty payloads against a local listener,
//! and the second opinion against a stand-in speaking Ollama's /api/chat.

use crate::support::desktop::Desktop;
use crate::support::stub::{Reply, Stub};
use crate::support::{Home, Run};
use serde_json::{json, Value};

const T0: i64 = 1_796_000_000_000;
const MIN5: i64 = 300_000;

fn verdict(session: &str, root: &str, flagged: bool) -> String {
    looping(session, root, flagged, 44, "")
}

/// A verdict after `calls` calls (the last 3 before the loop landed), with a liveness class.
fn looping(session: &str, root: &str, flagged: bool, calls: u64, class: &str) -> String {
    let mut v = json!({"kind": "verdict", "session": session, "root": root, "agent": "build", "model": "sim/sim-model",
           "flagged": flagged, "reasons": if flagged { vec!["top", "dup"] } else { vec![] },
           "signals": {"dup": 0.8, "top": 31, "top_target": "read src/a.js", "slow": 30, "slow_call": "read src/a.js",
                       "coverage": 0.0, "coverage_file": null},
           "landed_in_window": false, "calls": calls, "calls_since_landed": calls - 3,
           "cost_since_landed": (calls - 3) as f64 / 100.0, "t": T0 + calls as i64 * 1000,
           "digest": ["read src/a.js", "bash make test [exit 2]"],
           "first_flag": if flagged { json!({"index": 12, "t": T0, "id": "prt_1"}) } else { Value::Null }});
    if !class.is_empty() {
        v["liveness"] = json!({"class": class, "evidence": "seen"});
    }
    v.to_string()
}

struct Rig {
    home: Home,
    cfg: String,
}

impl Rig {
    fn new(config: &str) -> Rig {
        let home = Home::new();
        let cfg = home.join("wd.toml");
        std::fs::write(&cfg, config).unwrap();
        Rig {
            cfg: cfg.display().to_string(),
            home,
        }
    }
    fn db(&self) -> String {
        self.home.join("wd.db").display().to_string()
    }
    /// One tick: the stream through `wd-store tick` into `wd-alert`, at time `now`.
    fn tick(&self, now: i64, lines: &[String], env: &[(&str, &str)]) -> (String, Run) {
        self.tick_from(now, &["http://127.0.0.1:4096"], lines, env)
    }
    /// One tick that read these sources.
    fn tick_from(
        &self,
        now: i64,
        sources: &[&str],
        lines: &[String],
        env: &[(&str, &str)],
    ) -> (String, Run) {
        let mut input = String::new();
        for s in sources {
            input += &json!({"kind": "source", "source": s, "sessions": 1}).to_string();
            input += "\n";
        }
        for l in lines {
            input += l;
            input += "\n";
        }
        let stored = self
            .home
            .cmd("wd-store")
            .args([
                "--db",
                &self.db(),
                "--config",
                &self.cfg,
                "--now",
                &now.to_string(),
                "tick",
            ])
            .stdin(input)
            .run();
        stored.ok();
        let passed = stored.stdout();
        let mut c = self
            .home
            .cmd("wd-alert")
            .args([
                "--db",
                &self.db(),
                "--config",
                &self.cfg,
                "--now",
                &now.to_string(),
            ])
            .stdin(passed.clone());
        for (k, v) in env {
            c = c.env(k, v);
        }
        (passed, c.run())
    }
    fn alert_again(&self, now: i64, input: &str) -> Run {
        self.home
            .cmd("wd-alert")
            .args([
                "--db",
                &self.db(),
                "--config",
                &self.cfg,
                "--now",
                &now.to_string(),
            ])
            .stdin(input)
            .run()
    }
    fn query<T: rusqlite::types::FromSql>(&self, sql: &str) -> Vec<T> {
        let c = rusqlite::Connection::open(self.db()).unwrap();
        let mut st = c.prepare(sql).unwrap();
        st.query_map([], |r| r.get(0))
            .unwrap()
            .map(|x| x.unwrap())
            .collect()
    }
}

fn states(r: &Run) -> Vec<(String, String)> {
    r.records()
        .iter()
        .map(|e| {
            (
                e["state"].as_str().unwrap().to_string(),
                e["severity"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn desktop_env(d: &Desktop) -> Vec<(&'static str, String)> {
    vec![
        ("DBUS_SESSION_BUS_ADDRESS", d.bus.clone()),
        ("DISPLAY", d.display.clone()),
    ]
}

fn loops(rig: &Rig) -> Vec<Value> {
    rig.home
        .cmd("wd-store")
        .args(["--db", &rig.db(), "loops"])
        .run()
        .kind("loop")
}

#[test]
fn a_loop_that_goes_on_escalates_on_its_third_flagged_tick_and_resolves_with_progress() {
    let d = Desktop::shared();
    let rig = Rig::new("[[channels]]\nname = \"desk\"\ntype = \"desktop\"\n");
    let env = desktop_env(d);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let root = format!("ses_life{}", std::process::id());
    let at = |calls: u64| looping(&root, &root, true, calls, "active");
    let (_, r) = rig.tick(T0, &[at(44)], &env);
    r.ok();
    assert_eq!(states(&r), [("trigger".into(), "warning".into())]);
    let ev = &r.records()[0];
    assert_eq!(ev["dedup_key"], format!("loop:{root}"));
    assert_eq!(ev["title"], "opencode loop: build repeats read src/a.js");
    assert_eq!(ev["details"]["calls_since_landed"], 41);
    assert_eq!(
        ev["figures"],
        json!({"calls": 41, "cost": 0.41, "duration_ms": 44_000, "flagged_ticks": 1})
    );
    assert!(r.stderr().contains(&format!(
        "oc-watchdog: dedup=loop:{root} state=trigger severity=warning title=\"opencode loop: build repeats read src/a.js\""
    )), "{}", r.story());
    // the operator's view of it
    let l = &loops(&rig)[0];
    assert_eq!(l["severity"], "warning");
    assert_eq!(l["agent"], "build");
    assert_eq!(l["top_target"], "read src/a.js");
    assert_eq!(l["calls"], 41);
    assert_eq!(l["cost"], 0.41);
    assert_eq!(l["last_decision"], "triggered");
    assert_eq!(l["last_sent"], "desk:trigger");
    // the second flagged tick with new calls: counted, nothing sent
    let (_, r) = rig.tick(T0 + MIN5, &[at(56)], &env);
    assert_eq!(states(&r), Vec::<(String, String)>::new());
    assert_eq!(loops(&rig)[0]["flagged_ticks"], 2);
    assert_eq!(loops(&rig)[0]["last_decision"], "counted");
    // the third escalates, once
    let (_, r) = rig.tick(T0 + 2 * MIN5, &[at(68)], &env);
    assert_eq!(states(&r), [("escalate".into(), "critical".into())]);
    assert_eq!(r.records()[0]["reason"], "still_looping");
    assert_eq!(r.records()[0]["details"]["flagged_ticks"], 3);
    assert!(r.records()[0]["summary"]
        .as_str()
        .unwrap()
        .starts_with("still looping after 3 flagged ticks: "));
    let (_, r) = rig.tick(T0 + 3 * MIN5, &[at(80)], &env);
    assert_eq!(states(&r), Vec::<(String, String)>::new());
    // a change lands (the call before last): nothing in the tree is flagged any more
    let mut landed: Value =
        serde_json::from_str(&looping(&root, &root, false, 82, "active")).unwrap();
    landed["calls_since_landed"] = json!(1);
    let (input, r) = rig.tick(T0 + 4 * MIN5, &[landed.to_string()], &env);
    assert_eq!(states(&r), [("resolve".into(), "info".into())]);
    let ev = &r.records()[0];
    assert_eq!(ev["reason"], "progress");
    assert_eq!(ev["figures"]["calls"], 77);
    // the same tick input again sends nothing
    let again = rig.alert_again(T0 + 4 * MIN5 + 1000, &input);
    again.ok();
    assert_eq!(again.stdout(), "");
    assert!(
        again.stderr().contains("was already processed"),
        "{}",
        again.story()
    );
    // what the desktop got: three notifications, urgency normal, critical, low
    let seen = d.wait_for(&root, 3);
    let mine: Vec<_> = seen.iter().filter(|s| s.body.contains(&root)).collect();
    assert_eq!(mine.len(), 3, "{seen:?}");
    assert_eq!(
        mine.iter().map(|s| s.urgency).collect::<Vec<_>>(),
        [Some(1), Some(2), Some(0)]
    );
    assert_eq!(mine[0].app, "oc-watchdog");
    assert_eq!(
        mine[0].summary,
        "opencode loop: build repeats read src/a.js"
    );
    assert!(mine[0].body.contains("agent build"), "{:?}", mine[0]);
    assert!(
        mine[0].body.contains("Look closer: wd-store loops"),
        "{:?}",
        mine[0]
    );
    assert_eq!(
        mine[2].summary,
        "resolved (progress): opencode loop: build repeats read src/a.js"
    );
    assert!(
        mine[2].body.contains(&format!(
            "{root}: a change landed: no session of the tree is flagged any more; the loop burned 77 calls and $0.77 over 1 min, 4 flagged tick(s)"
        )),
        "{:?}",
        mine[2]
    );
    // dunst itself shows the episode's last word: the resolve took the place of the trigger's
    // popup (replaces_id), so what dunst holds is the resolve, and the trigger only when the
    // replacement came too late to find it on screen
    let held = d.dunst_summaries();
    assert!(
        held.iter()
            .any(|s| s == "resolved (progress): opencode loop: build repeats read src/a.js"),
        "{held:?}"
    );
    let sent: Vec<String> = rig.query("SELECT status FROM deliveries ORDER BY event");
    assert_eq!(sent, ["sent", "sent", "sent"]);
}

#[test]
fn a_loop_that_ends_resolves_stopped_never_escalates_and_a_new_loop_is_a_new_episode() {
    let rig = Rig::new("[alert]\nescalate_after_ticks = 2\n");
    let a = |calls: u64, class: &str| looping("ses_st", "ses_st", true, calls, class);
    let (_, r) = rig.tick(T0, &[a(44, "active")], &[]);
    assert_eq!(states(&r), [("trigger".into(), "warning".into())]);
    // inside a long tool: no call, busy: neither counted nor resolved, however long
    for k in 1..=3 {
        let (_, r) = rig.tick(T0 + k * MIN5, &[a(44, "long_tool")], &[]);
        assert_eq!(states(&r), Vec::<(String, String)>::new(), "tick {k}");
    }
    let l = &loops(&rig)[0];
    assert_eq!(l["flagged_ticks"], 1);
    assert_eq!(l["last_decision"], "held_busy");
    // the tool ended and nothing else came: idle, no call since the last tick
    let (_, r) = rig.tick(T0 + 4 * MIN5, &[a(44, "idle")], &[]);
    assert_eq!(states(&r), [("resolve".into(), "info".into())]);
    let ev = &r.records()[0];
    assert_eq!(ev["reason"], "stopped");
    assert_eq!(
        ev["figures"],
        json!({"calls": 41, "cost": 0.41, "duration_ms": 44_000, "flagged_ticks": 1})
    );
    assert_eq!(
        ev["summary"],
        "ses_st: the loop stopped: every flagged session is idle and made no call since the last tick; \
         the loop burned 41 calls and $0.41 over 44 s, 1 flagged tick(s)"
    );
    assert_eq!(
        ev["title"],
        "resolved (stopped): opencode loop: build repeats read src/a.js"
    );
    // still flagged, still idle: the same loop, no new episode
    let (_, r) = rig.tick(T0 + 5 * MIN5, &[a(44, "idle")], &[]);
    assert_eq!(states(&r), Vec::<(String, String)>::new());
    // it loops again: a new episode, with its own figures (16 calls past the 41 the first one
    // counted; nothing landed in between); "over 0 s": this verdict carries no evidence, so the
    // first new call known is its last
    let (_, r) = rig.tick(T0 + 6 * MIN5, &[a(60, "active")], &[]);
    assert_eq!(states(&r), [("trigger".into(), "warning".into())]);
    assert_eq!(r.records()[0]["figures"]["calls"], 16);
    assert_eq!(r.records()[0]["figures"]["cost"], 0.16);
    assert!(
        r.records()[0]["summary"]
            .as_str()
            .unwrap()
            .contains("16 calls and $0.16 over 0 s since it started looping again"),
        "{}",
        r.story()
    );
    let h = rig
        .home
        .cmd("wd-store")
        .args([
            "--db",
            &rig.db(),
            "--now",
            &(T0 + 6 * MIN5).to_string(),
            "alerts",
            "--since",
            "7d",
        ])
        .run();
    let eps = h.kind("episode");
    assert_eq!(eps.len(), 2, "{}", h.story());
    assert_eq!(eps[0]["state"], "open");
    assert_eq!(eps[0]["calls"], 16);
    assert_eq!(eps[1]["state"], "resolved");
    assert_eq!(eps[1]["reason"], "stopped");
    assert_eq!(eps[1]["peak_severity"], "warning");
    assert_eq!(eps[1]["calls"], 41);
    assert_eq!(eps[1]["cost"], 0.41);
    assert_eq!(eps[1]["duration_ms"], 44_000);
    assert_eq!(eps[1]["burned"], "41 calls, $0.41, 44 s");
    assert_ne!(eps[0]["episode"], eps[1]["episode"]);
}

#[test]
fn two_verdicts_for_one_session_in_a_tick_give_one_trigger() {
    let rig = Rig::new("");
    let stalled = json!({"kind": "verdict", "session": "ses_2x", "root": "ses_2x", "agent": "build",
        "flagged": false, "calls": 3,
        "liveness": {"class": "stalled", "alert": "warning", "evidence": "busy and silent for 950 s"}})
    .to_string();
    let (_, r) = rig.tick(
        T0,
        &[
            stalled.clone(),
            stalled,
            verdict("ses_2y", "ses_2y", true),
            verdict("ses_2y", "ses_2y", true),
        ],
        &[],
    );
    let keys: Vec<String> = r
        .records()
        .iter()
        .map(|e| e["dedup_key"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(keys, ["loop:ses_2y", "stalled:ses_2x"]);
    let rows: Vec<String> =
        rig.query("SELECT dedup_key || ':' || evidence FROM episodes WHERE kind = 'stalled'");
    assert_eq!(rows, ["stalled:ses_2x:busy and silent for 950 s"]);
}

#[test]
fn a_root_gone_from_readable_opencode_resolves_but_a_blind_tick_does_not() {
    let rig = Rig::new("");
    let (_, r) = rig.tick(T0, &[verdict("ses_kid", "ses_gone", true)], &[]);
    assert_eq!(states(&r), [("trigger".into(), "warning".into())]);
    assert_eq!(r.records()[0]["dedup_key"], "loop:ses_gone");
    // opencode unreadable: no all-clear, a "watchdog is blind" warning instead
    let blind = r#"{"kind":"blind","source":"http://127.0.0.1:4096","reason":"GET /session did not return a list"}"#;
    let (_, r) = rig.tick(T0 + MIN5, &[blind.to_string()], &[]);
    let evs = r.records();
    assert_eq!(evs.len(), 1);
    assert_eq!(evs[0]["dedup_key"], "watchdog-blind");
    assert_eq!(
        evs[0]["title"],
        "watchdog is blind: cannot read an agent's sessions"
    );
    assert!(evs[0]["summary"]
        .as_str()
        .unwrap()
        .contains("http://127.0.0.1:4096: GET /session did not return a list"));
    // readable again, and the tree is gone
    let (_, r) = rig.tick(T0 + 2 * MIN5, &[], &[]);
    let mut got: Vec<(String, String)> = r
        .records()
        .iter()
        .map(|e| {
            (
                e["dedup_key"].as_str().unwrap().to_string(),
                e["state"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    got.sort();
    assert_eq!(
        got,
        [
            ("loop:ses_gone".into(), "resolve".into()),
            ("watchdog-blind".into(), "resolve".into())
        ]
    );
    let why = r
        .records()
        .iter()
        .find(|e| e["dedup_key"] == "loop:ses_gone")
        .unwrap()["details"]["why"]
        .clone();
    assert_eq!(
        why,
        "the root session is no longer in the sources that listed it"
    );
}

#[test]
fn webhook_and_pagerduty_get_the_same_event_in_their_shapes() {
    let stub = Stub::start();
    stub.route("POST /hook", Reply::Json(200, "{}".into()))
        .route(
            "POST /v2/enqueue",
            Reply::Json(202, r#"{"status":"success"}"#.into()),
        );
    let rig = Rig::new(&format!(
        "[[channels]]\nname = \"hook\"\ntype = \"webhook\"\nurl = \"{u}/hook\"\ntoken_env = \"HOOK_TOKEN\"\n\n\
         [[channels]]\nname = \"pd\"\ntype = \"pagerduty\"\nrouting_key_env = \"PD_KEY\"\nevents_url = \"{u}/v2/enqueue\"\n",
        u = stub.url
    ));
    let env = [("HOOK_TOKEN", "tok123"), ("PD_KEY", "R0UT1NG")];
    rig.tick(T0, &[verdict("ses_w", "ses_w", true)], &env)
        .1
        .ok();
    rig.tick(T0 + MIN5, &[verdict("ses_w", "ses_w", false)], &env)
        .1
        .ok();
    let reqs = stub.requests();
    let hooks: Vec<Value> = reqs
        .iter()
        .filter(|r| r.path == "/hook")
        .map(|r| serde_json::from_str(&r.body).unwrap())
        .collect();
    let pds: Vec<Value> = reqs
        .iter()
        .filter(|r| r.path == "/v2/enqueue")
        .map(|r| serde_json::from_str(&r.body).unwrap())
        .collect();
    assert_eq!(hooks.len(), 2);
    assert_eq!(hooks[0]["dedup_key"], "loop:ses_w");
    assert_eq!(hooks[0]["state"], "trigger");
    assert_eq!(hooks[0]["severity"], "warning");
    assert_eq!(hooks[0]["details"]["signals"]["top"], 31);
    assert_eq!(hooks[1]["state"], "resolve");
    let hook_req = reqs.iter().find(|r| r.path == "/hook").unwrap();
    assert_eq!(hook_req.headers["authorization"], "Bearer tok123");
    assert_eq!(pds.len(), 2);
    assert_eq!(pds[0]["routing_key"], "R0UT1NG");
    assert_eq!(pds[0]["event_action"], "trigger");
    assert_eq!(pds[0]["dedup_key"], "loop:ses_w");
    assert_eq!(pds[0]["payload"]["severity"], "warning");
    assert_eq!(pds[0]["payload"]["source"], "oc-watchdog");
    assert_eq!(
        pds[0]["payload"]["custom_details"]["calls_since_landed"],
        41
    );
    assert_eq!(
        pds[1],
        json!({"routing_key": "R0UT1NG", "event_action": "resolve", "dedup_key": "loop:ses_w"})
    );
}

#[test]
fn one_broken_channel_does_not_stop_the_others() {
    let stub = Stub::start();
    stub.route("POST /hook", Reply::Json(200, "{}".into()));
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let rig = Rig::new(&format!(
        "[[channels]]\nname = \"dead\"\ntype = \"webhook\"\nurl = \"http://127.0.0.1:{dead}/x\"\n\n\
         [[channels]]\nname = \"live\"\ntype = \"webhook\"\nurl = \"{}/hook\"\n",
        stub.url
    ));
    let (_, r) = rig.tick(T0, &[verdict("ses_b", "ses_b", true)], &[]);
    r.ok();
    assert!(
        r.stderr().contains(
            "oc-watchdog: channel=dead dedup=loop:ses_b state=trigger delivery failed: POST"
        ),
        "{}",
        r.story()
    );
    assert_eq!(stub.requests().len(), 1);
    let rows: Vec<String> =
        rig.query("SELECT channel || ':' || status FROM deliveries ORDER BY channel");
    assert_eq!(rows, ["dead:failed", "live:sent"]);
    let m = rig
        .home
        .cmd("wd-store")
        .args(["--db", &rig.db(), "metrics"])
        .run();
    assert!(
        m.stdout()
            .contains("ocwatchdog_channel_delivery_failures_total{channel=\"dead\"} 1"),
        "{}",
        m.stdout()
    );
}

#[test]
fn a_channel_disabled_at_run_time_gets_nothing_from_the_next_tick() {
    let stub = Stub::start();
    stub.route("POST /hook", Reply::Json(200, "{}".into()));
    let rig = Rig::new(&format!(
        "[[channels]]\nname = \"hook\"\ntype = \"webhook\"\nurl = \"{}/hook\"\n",
        stub.url
    ));
    rig.home
        .cmd("wd-store")
        .args([
            "--db",
            &rig.db(),
            "--config",
            &rig.cfg,
            "channels",
            "set",
            "hook",
            "--enabled",
            "false",
        ])
        .run()
        .ok();
    let (_, r) = rig.tick(T0, &[verdict("ses_d", "ses_d", true)], &[]);
    assert_eq!(states(&r), [("trigger".into(), "warning".into())]);
    assert_eq!(stub.requests().len(), 0);
    let rows: Vec<String> = rig.query("SELECT status || ':' || detail FROM deliveries");
    assert_eq!(rows, ["skipped:channel disabled"]);
    // a warning is below a channel set to critical; a resolve of something never sent stays home
    rig.home
        .cmd("wd-store")
        .args([
            "--db",
            &rig.db(),
            "--config",
            &rig.cfg,
            "channels",
            "set",
            "hook",
            "--enabled",
            "true",
            "--min-severity",
            "critical",
        ])
        .run()
        .ok();
    rig.tick(T0 + MIN5, &[verdict("ses_e", "ses_e", true)], &[])
        .1
        .ok();
    assert_eq!(stub.requests().len(), 0);
}

fn ollama_rig(stub: &Stub, timeout: u64) -> Rig {
    Rig::new(&format!(
        "[second_opinion]\nenabled = true\nurl = \"{}\"\nmodel = \"tiny\"\ntimeout_secs = {timeout}\nmax_in_flight = 3\n",
        stub.url
    ))
}

fn ollama_says(text: &str) -> String {
    json!({"model": "tiny", "created_at": "2026-11-30T00:00:00Z", "message": {"role": "assistant", "content": text}, "done": true}).to_string()
}

#[test]
fn a_yes_from_the_local_model_raises_severity_and_is_recorded() {
    let stub = Stub::start();
    stub.route(
        "POST /api/chat",
        Reply::Json(
            200,
            ollama_says("Yes. It re-reads src/a.js without editing."),
        ),
    );
    let rig = ollama_rig(&stub, 5);
    let (_, r) = rig.tick(T0, &[verdict("ses_y", "ses_y", true)], &[]);
    assert_eq!(states(&r), [("trigger".into(), "critical".into())]);
    assert_eq!(r.records()[0]["details"]["opinion"]["answer"], "yes");
    let req: Value = serde_json::from_str(&stub.requests()[0].body).unwrap();
    assert_eq!(req["model"], "tiny");
    assert_eq!(req["stream"], false);
    let digest = req["messages"][1]["content"].as_str().unwrap();
    assert!(digest.contains("top_target: read src/a.js"), "{digest}");
    assert!(digest.contains("bash make test [exit 2]"), "{digest}");
    let v = rig
        .home
        .cmd("wd-store")
        .args(["--db", &rig.db(), "verdicts", "--session", "ses_y"])
        .run();
    let op: Value =
        serde_json::from_str(v.kind("verdict_row")[0]["opinion"].as_str().unwrap()).unwrap();
    assert_eq!(op["line"], "Yes. It re-reads src/a.js without editing.");
}

#[test]
fn a_hanging_or_nonsensical_model_never_vetoes_and_never_holds_the_tick() {
    let stub = Stub::start();
    stub.route("POST /api/chat", Reply::Hang);
    let rig = ollama_rig(&stub, 1);
    let t = std::time::Instant::now();
    let (_, r) = rig.tick(T0, &[verdict("ses_h", "ses_h", true)], &[]);
    assert!(
        t.elapsed() < std::time::Duration::from_secs(6),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(states(&r), [("trigger".into(), "warning".into())]);
    assert_eq!(r.records()[0]["details"]["opinion"]["answer"], "error");
    let stub2 = Stub::start();
    stub2.route(
        "POST /api/chat",
        Reply::Json(200, ollama_says("Purple monkey dishwasher.")),
    );
    let rig = ollama_rig(&stub2, 5);
    let (_, r) = rig.tick(T0, &[verdict("ses_n", "ses_n", true)], &[]);
    assert_eq!(states(&r), [("trigger".into(), "warning".into())]);
    assert_eq!(r.records()[0]["details"]["opinion"]["answer"], "unclear");
}

#[test]
fn at_most_three_questions_are_in_flight() {
    let stub = Stub::start();
    // long enough that a chunk's three questions overlap even on a loaded machine (600 ms did
    // not always: peak 2 at load 8)
    stub.route(
        "POST /api/chat",
        Reply::Delay(2000, 200, ollama_says("no, it is working")),
    );
    let rig = ollama_rig(&stub, 5);
    let vs: Vec<String> = (0..7)
        .map(|i| verdict(&format!("ses_q{i}"), &format!("ses_q{i}"), true))
        .collect();
    let (_, r) = rig.tick(T0, &vs, &[]);
    assert_eq!(r.records().len(), 7);
    assert_eq!(stub.requests().len(), 7);
    assert_eq!(stub.inflight.lock().unwrap().1, 3);
}

#[test]
fn test_alert_goes_through_enabled_channels() {
    let stub = Stub::start();
    stub.route("POST /hook", Reply::Json(200, "{}".into()));
    let rig = Rig::new(&format!(
        "[[channels]]\nname = \"hook\"\ntype = \"webhook\"\nurl = \"{}/hook\"\n",
        stub.url
    ));
    let r = rig
        .home
        .cmd("wd-alert")
        .args([
            "--db",
            &rig.db(),
            "--config",
            &rig.cfg,
            "--test",
            "--severity",
            "critical",
        ])
        .run();
    r.ok();
    let body: Value = serde_json::from_str(&stub.requests()[0].body).unwrap();
    assert_eq!(body["title"], "oc-watchdog test alert");
    assert_eq!(body["severity"], "critical");
    assert!(
        r.stderr()
            .contains("wd-alert: channel hook: sent (HTTP 200)"),
        "{}",
        r.story()
    );
    let r = rig
        .home
        .cmd("wd-alert")
        .args([
            "--db",
            &rig.db(),
            "--config",
            &rig.cfg,
            "--test",
            "--channel",
            "nope",
        ])
        .run();
    r.expect_code(2);
    assert_eq!(
        r.stderr().trim(),
        "wd-alert: no channel \"nope\" in the config"
    );
}

#[test]
fn unknown_channel_type_fails_config_load_naming_it() {
    let rig = Rig::new("[[channels]]\nname = \"x\"\ntype = \"sms\"\n");
    let r = rig
        .home
        .cmd("wd-alert")
        .args(["--db", &rig.db(), "--config", &rig.cfg])
        .stdin("")
        .run();
    r.expect_code(2);
    let e = r.stderr();
    assert!(
        e.starts_with(&format!(
            "wd-alert: config {}:3: channels[0].type: unknown variant `sms`",
            rig.cfg
        )),
        "{e}"
    );
}

#[test]
fn a_resolve_that_could_not_be_delivered_or_was_cut_off_by_a_crash_is_never_lost() {
    let stub = Stub::start();
    stub.route("POST /hook", Reply::Json(200, "{}".into()));
    let rig = Rig::new(&format!(
        "[[channels]]\nname = \"hook\"\ntype = \"webhook\"\nurl = \"{}/hook\"\ntimeout_secs = 1\n",
        stub.url
    ));
    rig.tick(T0, &[verdict("ses_r", "ses_r", true)], &[]).1.ok();
    // the receiver is down when the loop stops: the resolve fails, is recorded, not raised
    stub.route(
        "POST /hook",
        Reply::Json(503, "{\"error\":\"down\"}".into()),
    );
    let (_, r) = rig.tick(T0 + MIN5, &[verdict("ses_r", "ses_r", false)], &[]);
    r.ok();
    assert_eq!(states(&r), [("resolve".into(), "info".into())]);
    let rows: Vec<String> = rig.query("SELECT status FROM deliveries ORDER BY event");
    assert_eq!(rows, ["sent", "failed"]);
    // back up: the next run delivers the resolve it still owes
    stub.route("POST /hook", Reply::Json(200, "{}".into()));
    rig.tick(T0 + 2 * MIN5, &[verdict("ses_r", "ses_r", false)], &[])
        .1
        .ok();
    let bodies: Vec<Value> = stub
        .requests()
        .iter()
        .map(|r| serde_json::from_str(&r.body).unwrap())
        .collect();
    let states: Vec<&str> = bodies
        .iter()
        .map(|b| b["state"].as_str().unwrap())
        .collect();
    assert_eq!(
        states,
        ["trigger", "resolve", "resolve"],
        "one failed attempt, then delivered"
    );
    let rows: Vec<String> = rig.query("SELECT status FROM deliveries ORDER BY event");
    assert_eq!(rows, ["sent", "sent"]);

    // a crash between recording and sending: the run is killed while a channel hangs
    stub.route("POST /hook", Reply::Hang);
    let mut input =
        String::from("{\"kind\":\"source\",\"source\":\"http://127.0.0.1:4096\",\"sessions\":1}\n");
    input += &verdict("ses_c", "ses_c", true);
    input += "\n";
    let stored = rig
        .home
        .cmd("wd-store")
        .args([
            "--db",
            &rig.db(),
            "--config",
            &rig.cfg,
            "--now",
            &(T0 + 3 * MIN5).to_string(),
            "tick",
        ])
        .stdin(input)
        .run();
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("wd-alert"))
        .args([
            "--db",
            &rig.db(),
            "--config",
            &rig.cfg,
            "--now",
            &(T0 + 3 * MIN5).to_string(),
        ])
        .env("XDG_CONFIG_HOME", rig.home.join(".config"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stored.stdout().as_bytes())
        .unwrap();
    let t0 = std::time::Instant::now();
    while stub
        .requests()
        .iter()
        .filter(|r| r.body.contains("ses_c"))
        .count()
        == 0
    {
        assert!(t0.elapsed() < std::time::Duration::from_secs(10));
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let pending: Vec<String> = rig.query("SELECT status FROM deliveries d JOIN events e ON e.id = d.event WHERE e.dedup_key = 'loop:ses_c'");
    assert_eq!(
        pending,
        ["pending"],
        "decided and recorded before the send began"
    );
    // the next run sends what is owed: at worst one repeat, with the same dedup key
    stub.route("POST /hook", Reply::Json(200, "{}".into()));
    rig.tick(T0 + 4 * MIN5, &[verdict("ses_c", "ses_c", true)], &[])
        .1
        .ok();
    let sent: Vec<String> = rig.query("SELECT status FROM deliveries d JOIN events e ON e.id = d.event WHERE e.dedup_key = 'loop:ses_c'");
    assert_eq!(sent, ["sent"]);
    let triggers = stub
        .requests()
        .iter()
        .filter(|r| r.body.contains("\"dedup_key\":\"loop:ses_c\""))
        .count();
    assert_eq!(triggers, 2, "the cut-off attempt and its one repeat");
}

/// Regression (#30, point 3): a Notify call that failed (no bus, a daemon's error) left the
/// trigger `failed`, and that loop never reached the desktop.
#[test]
fn a_desktop_trigger_whose_notify_call_failed_is_shown_the_next_run() {
    let d = Desktop::shared();
    // (escalating late: the runs below are retries, not the loop going on)
    let rig = Rig::new(
        "[alert]\nescalate_after_ticks = 9\n[[channels]]\nname = \"desk\"\ntype = \"desktop\"\n",
    );
    let root = format!("ses_nobus{}", std::process::id());
    let gone = "unix:path=/nonexistent/oc-watchdog-bus";
    let (_, r) = rig.tick(
        T0,
        &[looping(&root, &root, true, 44, "")],
        &[("DBUS_SESSION_BUS_ADDRESS", gone), ("DISPLAY", &d.display)],
    );
    r.ok();
    assert_eq!(states(&r), [("trigger".into(), "warning".into())]);
    let rows = || -> Vec<String> {
        rig.query("SELECT d.status || ' ' || d.attempts FROM deliveries d JOIN events e ON e.id = d.event")
    };
    assert_eq!(rows(), ["pending 1"], "{}", r.story());
    assert!(
        r.stderr().contains(&format!(
            "channel=desk dedup=loop:{root} state=trigger delivery failed (tried again next run): desktop notification:"
        )),
        "{}",
        r.story()
    );
    // a second later (the follow mode's next run) it is not tried again: it backs off 10 s
    let (_, r) = rig.tick(
        T0 + 1_000,
        &[looping(&root, &root, true, 45, "")],
        &[("DBUS_SESSION_BUS_ADDRESS", gone), ("DISPLAY", &d.display)],
    );
    r.ok();
    assert_eq!(rows(), ["pending 1"], "{}", r.story());
    assert!(!r.stderr().contains("delivery failed"), "{}", r.story());
    let (_, r) = rig.tick(
        T0 + 11_000,
        &[looping(&root, &root, true, 46, "")],
        &[("DBUS_SESSION_BUS_ADDRESS", gone), ("DISPLAY", &d.display)],
    );
    r.ok();
    assert_eq!(rows(), ["pending 2"], "{}", r.story());
    // the bus is back: the loop goes on, nothing new is decided, and the owed trigger is shown
    let env = desktop_env(d);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let (_, r) = rig.tick(T0 + MIN5, &[looping(&root, &root, true, 56, "")], &env);
    r.ok();
    assert_eq!(r.records().len(), 0, "{}", r.story());
    assert_eq!(rows(), ["sent 3"], "{}", r.story());
    assert_eq!(d.wait_for(&format!("session {root},"), 1).len(), 1);
}

/// Issue 42, clock steps: a delivery that failed is tried again after its back-off, measured
/// from its last try; after the wall clock stepped back an hour, that try is an hour ahead and
/// the back-off was waited out on the new clock, an hour instead of 10 s.
#[test]
fn a_failed_delivery_is_tried_again_after_a_step_back_of_the_clock() {
    let d = Desktop::shared();
    let rig = Rig::new(
        "[alert]\nescalate_after_ticks = 9\n[[channels]]\nname = \"desk\"\ntype = \"desktop\"\n",
    );
    let root = format!("ses_step{}", std::process::id());
    let gone = "unix:path=/nonexistent/oc-watchdog-bus";
    let rows = || -> Vec<String> {
        rig.query("SELECT d.status || ' ' || d.attempts FROM deliveries d JOIN events e ON e.id = d.event")
    };
    rig.tick(
        T0,
        &[looping(&root, &root, true, 44, "")],
        &[("DBUS_SESSION_BUS_ADDRESS", gone), ("DISPLAY", &d.display)],
    )
    .1
    .ok();
    assert_eq!(rows(), ["pending 1"]);
    // 15 s later by the machine, the bus back, but the wall clock stepped back an hour between
    let env = desktop_env(d);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let (_, r) = rig.tick(
        T0 + 15_000 - 3_600_000,
        &[looping(&root, &root, true, 45, "")],
        &env,
    );
    r.ok();
    assert_eq!(rows(), ["sent 2"], "{}", r.story());
    assert_eq!(d.wait_for(&format!("session {root},"), 1).len(), 1);
}

/// Regression (#30, point 3): an agent name and a session title reached the webhook's JSON
/// with their NUL, terminal escape and bidi override, and 400 characters long.
#[test]
fn a_webhook_payload_shows_controls_visibly_and_caps_long_names() {
    let stub = Stub::start();
    stub.route("POST /hook", Reply::Json(200, "{}".into()));
    let rig = Rig::new(&format!(
        "[[channels]]\nname = \"hook\"\ntype = \"webhook\"\nurl = \"{}/hook\"\n",
        stub.url
    ));
    let mut v: Value = serde_json::from_str(&verdict("ses_raw", "ses_raw", true)).unwrap();
    v["agent"] = json!(format!("ag\u{0}ent\u{1b}[31m{}", "x".repeat(400)));
    v["title"] = json!("safe\u{202e}txt.exe");
    rig.tick(T0, &[v.to_string()], &[]).1.ok();
    let reqs = stub.requests();
    assert_eq!(reqs.len(), 1);
    let body: Value = serde_json::from_str(&reqs[0].body).unwrap();
    let agent = body["agent"].as_str().unwrap();
    assert!(agent.starts_with("ag<U+0000>ent<U+001B>[31mxxx"), "{agent}");
    assert_eq!(agent.chars().count(), 120);
    assert!(agent.ends_with("x…"));
    assert_eq!(body["details"]["title"], "safe<U+202E>txt.exe");
    assert_eq!(
        body["details"]["agent"].as_str().unwrap().chars().count(),
        300
    );
    let raw = &reqs[0].body;
    assert!(
        !raw.contains("\\u0000") && !raw.contains('\u{202e}'),
        "{raw}"
    );
    let title = body["title"].as_str().unwrap();
    assert!(title.chars().count() <= 120, "{title}");
    assert!(!title.contains('\u{1b}'), "{title}");
}

/// How many click helpers (`wd-store ... notify-on-action`) of the database `db` run.
fn helpers(db: &str) -> usize {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| std::fs::read(e.ok()?.path().join("cmdline")).ok())
        .filter(|c| {
            let words: Vec<&[u8]> = c.split(|b| *b == 0).collect();
            words.contains(&b"notify-on-action".as_slice()) && words.contains(&db.as_bytes())
        })
        .count()
}

#[test]
fn a_bus_that_accepts_but_never_answers_keeps_what_is_owed_pending_and_starts_no_click_helper() {
    // a real bus whose notification daemon owns the name but is stopped (SIGSTOP): calls are
    // accepted and routed, and never answered. The run asks GetServerInformation first (at most
    // a second) and, unanswered, tries nothing: every trigger stays pending for the next run
    // (it used to spend the channel's timeout on the oldest and lose it as failed)
    let d = Desktop::private();
    let stub = Stub::start();
    stub.route("POST /hook", Reply::Json(200, "{}".into()));
    let rig = Rig::new(&format!(
        "[[channels]]\nname = \"desk\"\ntype = \"desktop\"\ntimeout_secs = 5\n\n\
         [[channels]]\nname = \"hook\"\ntype = \"webhook\"\nurl = \"{}/hook\"\n",
        stub.url
    ));
    let env = desktop_env(&d);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let loops10 = |calls: u64| -> Vec<String> {
        (0..10)
            .map(|i| {
                let s = format!("ses_hang{i}");
                looping(&s, &s, true, calls, "")
            })
            .collect()
    };
    d.freeze();
    let t = std::time::Instant::now();
    let (_, r) = rig.tick(T0, &loops10(44), &env);
    let took = t.elapsed();
    eprintln!("10 alerts, a bus that never answers: wd-alert took {took:.2?}");
    r.ok();
    assert_eq!(r.records().len(), 10, "{}", r.story());
    assert!(
        took < std::time::Duration::from_secs(4),
        "the probe's second, not the channel's 5 s: {took:?}"
    );
    let outcomes = |channel: &str| -> Vec<String> {
        rig.query(&format!(
            "SELECT e.dedup_key || ' ' || d.status || ' ' || d.attempts || coalesce(' ' || nullif(d.detail, ''), '')
             FROM deliveries d JOIN events e ON e.id = d.event WHERE d.channel = '{channel}' ORDER BY e.id"
        ))
    };
    let want: Vec<String> = (0..10)
        .map(|i| format!("loop:ses_hang{i} pending 0"))
        .collect();
    assert_eq!(outcomes("desk"), want, "{}", r.story());
    // the other channel got every send in the same run
    let hook: Vec<String> = (0..10)
        .map(|i| format!("loop:ses_hang{i} sent 1 HTTP 200"))
        .collect();
    assert_eq!(outcomes("hook"), hook);
    assert_eq!(
        r.stderr()
            .matches(
                "oc-watchdog: channel=desk not tried this run, what it owes stays pending: \
                 the notification server did not answer GetServerInformation within 1.0s"
            )
            .count(),
        1,
        "{}",
        r.story()
    );
    assert_eq!(helpers(&rig.db()), 0, "no click helper was started");

    // the daemon answers again: the next run delivers all ten (the loops went on, so nothing
    // superseded them), each from a click helper that takes over from the one before: one
    // helper waits for clicks, not ten
    d.thaw();
    let t = std::time::Instant::now();
    let (_, r) = rig.tick(T0 + MIN5, &loops10(56), &env);
    eprintln!(
        "the next run, the daemon answering: wd-alert took {:.2?}",
        t.elapsed()
    );
    r.ok();
    assert_eq!(r.records().len(), 0, "{}", r.story());
    for (i, row) in outcomes("desk").iter().enumerate() {
        assert!(
            row.starts_with(&format!("loop:ses_hang{i} sent 1 notification ")),
            "{row}"
        );
    }
    assert_eq!(stub.requests().len(), 10, "the webhook owed nothing");
    for i in 0..10 {
        let s = format!("session ses_hang{i},");
        assert_eq!(d.wait_for(&s, 1).len(), 1, "{s} on the bus");
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(helpers(&rig.db()), 1, "one click helper waits");
    let lock = std::fs::read_to_string(format!("{}.click", rig.db())).unwrap();
    assert!(
        std::fs::read(format!("/proc/{}/cmdline", lock.trim())).is_ok(),
        "the lock names the helper that waits: {lock}"
    );
}

#[test]
fn a_desktop_budget_spent_by_a_burst_leaves_the_rest_owed_not_failed() {
    // 40 loops at once and a desktop channel with 1 s a run: a real dunst shows what fits in
    // the second, and the rest is owed to the next run, said in one line. A delivery started
    // with the budget's last milliseconds failed as "no answer within 0.0s" (seen in the
    // follow bench's burst of 107 triggers), and the notification may still have shown
    let d = Desktop::private();
    let rig = Rig::new("[[channels]]\nname = \"desk\"\ntype = \"desktop\"\ntimeout_secs = 1\n");
    let env = desktop_env(&d);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let loops = |calls: u64| -> Vec<String> {
        (0..40)
            .map(|i| {
                let s = format!("ses_burst{i:02}");
                looping(&s, &s, true, calls, "")
            })
            .collect()
    };
    let statuses = || -> Vec<String> {
        rig.query("SELECT d.status || ' ' || d.attempts FROM deliveries d ORDER BY d.event")
    };
    // the loops stand still after the trigger (no new calls: no escalation, no new event), so
    // each later run only delivers what is owed
    let calls = 44;
    let mut runs = 0;
    let mut owed_lines = 0;
    loop {
        let (_, r) = rig.tick(T0 + runs * MIN5, &loops(calls), &env);
        r.ok();
        runs += 1;
        owed_lines += r
            .stderr()
            .matches(" deliveries owed to the next run")
            .count();
        let st = statuses();
        assert!(
            st.iter().all(|s| s == "sent 1" || s == "pending 0"),
            "run {runs}: {st:?}"
        );
        if st.iter().all(|s| s == "sent 1") {
            break;
        }
        assert!(
            r.stderr().contains(
                " deliveries owed to the next run: this run's 1 s for the channel are spent"
            ),
            "run {runs} left some owed and said so: {}",
            r.stderr()
        );
        assert!(runs < 20, "40 popups in {runs} runs of 1 s: {st:?}");
    }
    assert_eq!(statuses().len(), 40);
    for i in 0..40 {
        let s = format!("session ses_burst{i:02},");
        assert_eq!(d.wait_for(&s, 1).len(), 1, "{s} shown once");
    }
    eprintln!(
        "40 triggers, 1 s a run: shown over {runs} runs, {owed_lines} lines said what was owed"
    );
}

#[test]
fn an_escalation_and_a_loop_back_after_its_shown_resolve_go_out_inside_the_rate_limit() {
    // ticks a minute apart, the desktop channel's default rate limit (300 s): the escalation
    // and the resolve are news and go out, and so does a new episode's trigger once the
    // operator was told it resolved (an operator's journey: a loop resolved, then looped on for
    // 2 min 40 s with its new trigger held back, until an escalation about an alert never shown).
    // A stack of its own: the report's click test clicks whatever is on top of the shared one
    let d = &Desktop::private();
    let rig = Rig::new(
        "[alert]\nescalate_after_ticks = 2\n\n[[channels]]\nname = \"desk\"\ntype = \"desktop\"\n",
    );
    let env = desktop_env(d);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let root = format!("ses_rl{}", std::process::id());
    let at = |calls: u64, class: &str| looping(&root, &root, true, calls, class);
    const MIN: i64 = 60_000;
    let (_, r) = rig.tick(T0, &[at(44, "active")], &env);
    assert_eq!(states(&r), [("trigger".into(), "warning".into())]);
    let (_, r) = rig.tick(T0 + MIN, &[at(56, "active")], &env);
    assert_eq!(states(&r), [("escalate".into(), "critical".into())]);
    let (_, r) = rig.tick(T0 + 2 * MIN, &[at(56, "idle")], &env);
    assert_eq!(states(&r), [("resolve".into(), "info".into())]);
    assert_eq!(r.records()[0]["reason"], "stopped");
    let (_, r) = rig.tick(T0 + 3 * MIN, &[at(70, "active")], &env);
    assert_eq!(states(&r), [("trigger".into(), "warning".into())]);
    // and it stops
    let (_, r) = rig.tick(T0 + 4 * MIN, &[at(70, "idle")], &env);
    assert_eq!(states(&r), [("resolve".into(), "info".into())]);
    let rows: Vec<String> = rig.query(
        "SELECT e.episode || ' ' || e.state || ' ' || d.status || coalesce(' ' || nullif(d.detail, ''), '')
         FROM deliveries d JOIN events e ON e.id = d.event ORDER BY e.id",
    );
    let ep: Vec<i64> = rig.query("SELECT id FROM episodes ORDER BY id");
    let (a, b) = (ep[0], ep[1]);
    assert!(
        rows[0].starts_with(&format!("{a} trigger sent notification ")),
        "{rows:?}"
    );
    assert!(
        rows[1].starts_with(&format!("{a} escalate sent notification ")),
        "{rows:?}"
    );
    assert!(
        rows[2].starts_with(&format!("{a} resolve sent notification ")),
        "{rows:?}"
    );
    assert!(
        rows[3].starts_with(&format!("{b} trigger sent notification ")),
        "{rows:?}"
    );
    assert!(
        rows[4].starts_with(&format!("{b} resolve sent notification ")),
        "{rows:?}"
    );
    assert_eq!(rows.len(), 5);
    // what the bus carried for this root: normal, critical, low, then the loop back: normal, low
    let seen = d.wait_for(&root, 5);
    assert_eq!(
        seen.iter().map(|s| s.urgency).collect::<Vec<_>>(),
        [Some(1), Some(2), Some(0), Some(1), Some(0)],
        "{seen:?}"
    );
    assert!(
        seen[1].body.starts_with(&format!(
            "still looping after 2 flagged ticks: session {root}, agent build"
        )),
        "{:?}",
        seen[1]
    );
}

#[test]
fn an_open_loops_duration_runs_until_now_not_to_its_last_call() {
    // issue 29: an `opencode run` hung after its last call; eight minutes later the open
    // episode still said "duration 1 min"
    let rig = Rig::new("");
    let root = "ses_hung";
    let (_, r) = rig.tick(T0, &[looping(root, root, true, 44, "active")], &[]);
    assert_eq!(states(&r), [("trigger".into(), "warning".into())]);
    // the loop began at T0 and its last call was at T0 + 44 s
    let at = |now: i64, what: &[&str]| -> Vec<Value> {
        let db = rig.db();
        let mut args = vec!["--db", &db, "--now"];
        let now = now.to_string();
        args.push(&now);
        args.extend_from_slice(what);
        let r = rig.home.cmd("wd-store").args(&args).run();
        r.ok();
        r.records()
    };
    let eight = T0 + 8 * 60_000;
    let l = &at(eight, &["loops"])[0];
    assert_eq!(l["duration_ms"], 8 * 60_000, "{l}");
    assert_eq!(l["burned"], "41 calls, $0.41, 8 min");
    let a = &at(eight, &["alerts"])[0];
    assert_eq!(a["duration_ms"], 8 * 60_000, "{a}");
    // the page's episodes table says so too
    let r = rig
        .home
        .cmd("wd-store")
        .args([
            "--db",
            &rig.db(),
            "--now",
            &eight.to_string(),
            "report",
            "--out",
            "-",
        ])
        .run();
    r.ok();
    let page = r.stdout();
    let ep = &page[page.find("id=\"episodes\"").unwrap()..];
    let row = &ep[ep.find(root).unwrap()..];
    let row = &row[..row.find("</tr>").unwrap()];
    assert!(row.contains("<td>8 min</td>"), "{row}");
    // resolved, its duration is what it looped: first call to last
    let (_, r) = rig.tick(eight, &[looping(root, root, true, 44, "idle")], &[]);
    assert_eq!(states(&r), [("resolve".into(), "info".into())]);
    let a = &at(eight + 60 * 60_000, &["alerts"])[0];
    assert_eq!(a["duration_ms"], 44_000, "{a}");
}

#[test]
fn loops_and_alerts_tables_fit_100_columns_name_the_project_and_title_and_status_fits_its_reader() {
    // issue 29: `wd-store loops` was 19 columns and over 250 characters a line, and said
    // neither which project nor which session; `status` was JSONL on a terminal, in UTC
    let rig = Rig::new("");
    let root = "ses_0123456789abcdefABCDEFGHIJ";
    let mut v: Value = serde_json::from_str(&looping(root, root, true, 44, "active")).unwrap();
    v["title"] = json!("Fix the flaky payment retry test in the billing service");
    v["directory"] = json!(rig.home.join("work/billing-service").display().to_string());
    let (_, r) = rig.tick(T0, &[v.to_string()], &[]);
    assert_eq!(states(&r), [("trigger".into(), "warning".into())]);
    let wd = |args: &[&str]| -> String {
        let db = rig.db();
        let now = (T0 + 8 * 60_000).to_string();
        let mut all = vec!["--db", &db, "--now", &now];
        all.extend_from_slice(args);
        let r = rig
            .home
            .cmd("wd-store")
            .env("TZ", "Europe/Berlin")
            .args(&all)
            .run();
        r.ok();
        r.stdout()
    };
    let table = wd(&["loops", "--format", "table"]);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 2, "{table}");
    for l in &lines {
        assert!(l.chars().count() <= 100, "{} wide: {l}", l.chars().count());
    }
    // not a terminal: 100 columns, `opened` left out, `burned` and the project cut before
    // the title (issue 40: the title was cut to "Fix the")
    assert_eq!(
        lines[0],
        "status   session                         burned            project       session_title"
    );
    assert_eq!(
        lines[1],
        format!("warning  {root}  41 calls, $0.41…  …ing-service  Fix the flaky payment retr…")
    );
    // local time (T0 is 2026-11-30 00:53:20 UTC), the zone in the header, where there is room
    let rig_wide = |cols: &str| -> String {
        let r = rig
            .home
            .cmd("wd-store")
            .env("TZ", "Europe/Berlin")
            .env("COLUMNS", cols)
            .args([
                "--db",
                &rig.db(),
                "--now",
                &(T0 + 8 * 60_000).to_string(),
                "loops",
                "--format",
                "table",
            ])
            .run();
        r.ok();
        r.stdout()
    };
    let at120 = rig_wide("120");
    assert!(
        at120.starts_with(
            "status   session                         opened CET   burned            project       session_title\n"
        ),
        "{at120}"
    );
    assert!(
        at120.contains(&format!(
            "warning  {root}  11-30 01:53  41 calls, $0.41…  …ing-service  Fix the flaky payment retry test …\n"
        )),
        "{at120}"
    );
    // JSONL keeps every column, the project as written
    let rec: Value = serde_json::from_str(wd(&["loops"]).lines().next().unwrap()).unwrap();
    assert_eq!(rec["project"], "~/work/billing-service");
    assert_eq!(
        rec["session_title"],
        "Fix the flaky payment retry test in the billing service"
    );
    assert_eq!(rec["session"], root);
    // --wide: all of it
    let wide = wd(&["loops", "--format", "table", "--wide"]);
    assert!(wide.lines().next().unwrap().contains("dedup_key"), "{wide}");
    assert!(
        wide.contains(
            "~/work/billing-service  Fix the flaky payment retry test in the billing service"
        ),
        "{wide}"
    );
    let alerts = wd(&["alerts", "--format", "table"]);
    for l in alerts.lines() {
        assert!(l.chars().count() <= 100, "{} wide: {l}", l.chars().count());
    }
    assert!(alerts.contains(root), "{alerts}");
    // status: JSONL in a pipe; a table on a terminal (under script(1)), local time and zone
    let piped = wd(&["status"]);
    let rec: Value = serde_json::from_str(piped.trim()).unwrap();
    assert_eq!(rec["kind"], "status");
    let o = std::process::Command::new("script")
        .args(["-qec"])
        .arg(format!(
            "{} --db {} status",
            assert_cmd::cargo::cargo_bin("wd-store").display(),
            rig.db()
        ))
        .arg("/dev/null")
        .env("TZ", "Europe/Berlin")
        .env("HOME", rig.home.path())
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&o.stdout).replace('\r', "");
    // a key/value block (issue 40: one row of 135 columns)
    assert!(
        shown.starts_with(
            "last_tick CET   2026-11-30 01:53:20\nmode            timer\noutcome         flagged\n"
        ),
        "{shown}"
    );
    // the page: the loop's article starts with what to do, then names the title and project
    let page = wd(&["report", "--out", "-"]);
    let art = &page[page.find(&format!("<article id=\"{root}\"")).unwrap()..];
    let art = &art[..art.find("</article>").unwrap()];
    let after_heading = &art[art.find("</h3>").unwrap() + 5..];
    assert!(
        after_heading.starts_with(&format!(
            "<div class=\"todo\"><p><b>Stop it:</b> Esc twice in its TUI, Ctrl-C in the terminal of its <code>opencode run</code>, or <code>wd-store stop {root}</code>"
        )),
        "{art}"
    );
    assert!(
        art.contains("<code>wd-store block-model sim/sim-model</code>"),
        "{art}"
    );
    assert!(art.contains(&format!("<a href=\"#{root}\">")), "{art}");
    assert!(
        art.contains("<tr><td>session title</td><td>Fix the flaky payment retry test in the billing service</td></tr><tr><td>project</td><td><code>~/work/billing-service</code></td></tr>"),
        "{art}"
    );
}

/// What dunst holds: (displayed, waiting, history) by `dunstctl count`.
fn dunst_counts(d: &Desktop) -> (u32, u32, u32) {
    let n = |what: &str| -> u32 {
        let o = std::process::Command::new("dunstctl")
            .args(["count", what])
            .env("DBUS_SESSION_BUS_ADDRESS", &d.bus)
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).trim().parse().unwrap()
    };
    (n("displayed"), n("waiting"), n("history"))
}

#[test]
fn an_episodes_escalation_and_resolve_replace_its_popup_so_one_is_on_screen() {
    // issue 29: the red "still looping" popup never times out; the resolve used to come as a
    // second popup beside it. Now the episode keeps the id dunst gave its first popup, and the
    // escalation and the resolve are shown in its place
    let d = &Desktop::private();
    let rig = Rig::new(
        "[alert]\nescalate_after_ticks = 2\n\n[[channels]]\nname = \"desk\"\ntype = \"desktop\"\n",
    );
    let env = desktop_env(d);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let root = format!("ses_one{}", std::process::id());
    let at = |calls: u64, class: &str| looping(&root, &root, true, calls, class);
    const MIN: i64 = 60_000;
    let settle = || std::thread::sleep(std::time::Duration::from_millis(300));
    let (_, r) = rig.tick(T0, &[at(44, "active")], &env);
    assert_eq!(states(&r), [("trigger".into(), "warning".into())]);
    settle();
    assert_eq!(dunst_counts(d), (1, 0, 0), "the trigger's popup");
    let (_, r) = rig.tick(T0 + MIN, &[at(56, "active")], &env);
    assert_eq!(states(&r), [("escalate".into(), "critical".into())]);
    settle();
    assert_eq!(dunst_counts(d), (1, 0, 0), "the escalation took its place");
    let (_, r) = rig.tick(T0 + 2 * MIN, &[at(56, "idle")], &env);
    assert_eq!(states(&r), [("resolve".into(), "info".into())]);
    settle();
    assert_eq!(dunst_counts(d), (1, 0, 0), "the resolve took its place");
    // one id for the three deliveries: the one dunst gave the trigger
    let rows: Vec<String> = rig.query(
        "SELECT e.state || ' ' || d.status || ' ' || d.detail FROM deliveries d JOIN events e ON e.id = d.event ORDER BY e.id",
    );
    let id = rows[0].rsplit(' ').next().unwrap().to_string();
    assert_eq!(
        rows,
        [
            format!("trigger sent notification {id}"),
            format!("escalate sent notification {id}"),
            format!("resolve sent notification {id}"),
        ]
    );
    // the bus carried three popups, critical the second; what stays is the resolve, and it is
    // not critical any more (dunst times it out); nothing else of the episode was ever on screen
    let seen = d.wait_for(&root, 3);
    assert_eq!(
        seen.iter().map(|s| s.urgency).collect::<Vec<_>>(),
        [Some(1), Some(2), Some(0)],
        "{seen:?}"
    );
    // dunst shows actions: open the page on all three, stop the session while it loops
    let actions = |s: &crate::support::desktop::Seen| -> Vec<String> {
        s.strings[4..]
            .iter()
            .take_while(|a| *a != "urgency")
            .cloned()
            .collect()
    };
    let open = ["default", "Open the watchdog page"];
    let stop = ["stop", "Stop the session"];
    assert_eq!(actions(&seen[0]), [&open[..], &stop[..]].concat());
    assert_eq!(actions(&seen[1]), [&open[..], &stop[..]].concat());
    assert_eq!(actions(&seen[2]), open);
    assert_eq!(helpers(&rig.db()), 1, "the resolve's helper took over");
    assert_eq!(d.dunst_summaries(), [seen[2].summary.clone()]);
    assert!(seen[2].summary.starts_with("resolved"), "{:?}", seen[2]);
}

#[test]
fn a_deleted_root_is_gone_whether_a_server_the_database_or_both_listed_it() {
    let rig = Rig::new("");
    let srv = "http://127.0.0.1:4123";
    let db = "/home/u/.local/share/opencode/opencode.db";
    let from = |s: &str, source: &str, sources: &[&str]| -> String {
        let mut v: Value = serde_json::from_str(&looping(s, s, true, 44, "active")).unwrap();
        v["source"] = json!(source);
        if !sources.is_empty() {
            v["sources"] = json!(sources);
        }
        v.to_string()
    };
    let (_, r) = rig.tick_from(
        T0,
        &[srv, db],
        &[
            // an `opencode run` while it runs: its server and the database list it
            from("ses_both", srv, &[srv, db]),
            from("ses_db", db, &[]),
            // a server on another machine: only it lists this one
            from("ses_srv", srv, &[]),
        ],
        &[],
    );
    assert_eq!(r.records().len(), 3, "{}", r.story());
    let sources: Vec<String> =
        rig.query("SELECT root || ' ' || coalesce(sources, '-') FROM episodes ORDER BY root");
    assert_eq!(
        sources,
        [
            format!("ses_both [\"{srv}\",\"{db}\"]"),
            format!("ses_db [\"{db}\"]"),
            format!("ses_srv [\"{srv}\"]"),
        ]
    );
    // the run ended (its server is gone) and all three were deleted: the database, read, no
    // longer has the two it listed; the server-only one is not called gone unseen
    let (_, r) = rig.tick_from(T0 + MIN5, &[db], &[], &[]);
    let gone: Vec<(String, String)> = r
        .records()
        .iter()
        .map(|e| {
            (
                e["root"].as_str().unwrap().to_string(),
                e["reason"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        gone,
        [
            ("ses_both".into(), "gone".into()),
            ("ses_db".into(), "gone".into())
        ],
        "{}",
        r.story()
    );
    // its server answers again, without it: gone
    let (_, r) = rig.tick_from(T0 + 2 * MIN5, &[srv, db], &[], &[]);
    assert_eq!(states(&r), [("resolve".into(), "info".into())]);
    assert_eq!(r.records()[0]["root"], "ses_srv");
    assert_eq!(r.records()[0]["reason"], "gone");
}

/// A stalled session `wd-alert` may nudge, read from `source`.
fn stalled_from(session: &str, source: &str) -> String {
    let mut v: Value =
        serde_json::from_str(&looping(session, session, false, 20, "stalled")).unwrap();
    v["liveness"]["alert"] = json!("warning");
    v["source"] = json!(source);
    v.to_string()
}

/// The refusal named a database for every source that is not a server; an export (or a
/// session with no source) is said to be one now.
#[test]
fn a_failed_nudge_names_the_kind_of_source_it_was_read_from() {
    let rig = Rig::new("[liveness]\nnudge = true\n");
    let db = rig.home.join("opencode.db").display().to_string();
    let lines = [
        stalled_from("ses_db", &db),
        stalled_from("ses_ex", "export:run.json"),
    ];
    let (_, r) = rig.tick_from(T0, &[&db, "export:run.json"], &lines, &[]);
    r.ok();
    let said: Vec<String> =
        rig.query("SELECT session || ': ' || detail FROM actions ORDER BY session");
    assert_eq!(
        said,
        [
            "ses_db: the session was read from a database: no server to send to",
            "ses_ex: the session was read from an export: no server to send to",
        ],
        "{}",
        r.story()
    );
    assert!(
        r.stderr().contains("nudge session=ses_ex action=sha1:")
            && r.stderr().contains(
                "status=failed the session was read from an export: no server to send to"
            ),
        "{}",
        r.story()
    );
}

#[test]
fn every_open_alert_kind_is_read_again_by_the_next_tick_not_only_loops() {
    // an interrupted session listed by `oc-sessions` only through `--also` was resolved "gone"
    let rig = Rig::new("");
    let stalled = json!({"kind": "verdict", "session": "ses_st", "root": "ses_st", "agent": "build",
        "flagged": false, "calls": 3,
        "liveness": {"class": "stalled", "alert": "warning", "evidence": "busy and silent for 950 s"}})
    .to_string();
    let blind = r#"{"kind":"blind","source":"/x/opencode.db","reason":"locked"}"#.to_string();
    rig.tick(
        T0,
        &[verdict("ses_kid", "ses_lp", true), stalled, blind],
        &[],
    );
    let r = rig
        .home
        .cmd("wd-store")
        .args(["--db", &rig.db(), "open-roots"])
        .run();
    r.ok();
    assert_eq!(r.stdout(), "ses_lp ses_st\n");
}

/// The text between `start` (included) and the first `end` after it.
fn between<'a>(text: &'a str, start: &str, end: &str) -> &'a str {
    let at = text
        .find(start)
        .unwrap_or_else(|| panic!("no {start:?} in {text}"));
    let rest = &text[at..];
    &rest[..rest
        .find(end)
        .unwrap_or_else(|| panic!("no {end:?} in {rest}"))]
}

fn unescape_html(s: &str) -> String {
    s.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&amp;", "&")
}

#[test]
fn a_session_or_model_id_with_shell_syntax_ran_when_its_offered_command_was_pasted() {
    // issue 42: the popup's `wd-store stop {session}; ... wd-store block-model {model}` and the
    // page's "Look closer" `wd-store verdicts --session {id}` were unquoted: pasted as offered,
    // a session imported as `ses_x$(touch ...)` or a model id with `;` ran what they held
    let rig = Rig::new("");
    let dir = rig.home.join("pasted");
    std::fs::create_dir_all(&dir).unwrap();
    let d = dir.display();
    let root = format!("ses_x$(touch {d}/by-session)");
    // the last part runs in fish under POSIX-only quoting, where `\'` inside quotes is a quote
    let model = format!(
        "evil/m;touch {d}/by-model;$(touch {d}/by-model-subst)`touch {d}/bq`\\';touch {d}/by-fish;'"
    );
    let mut v: Value = serde_json::from_str(&looping(&root, &root, true, 44, "active")).unwrap();
    v["model"] = json!(model);
    v["title"] = json!(format!(
        "fix it $(touch {d}/by-title) && 'quoted' \\' back\\\\"
    ));
    let (_, r) = rig.tick(T0 + 44_000, &[v.to_string()], &[]);
    r.ok();
    let events = r.records();
    let trigger = events
        .iter()
        .find(|e| e["state"] == "trigger")
        .unwrap_or_else(|| panic!("no trigger: {}", r.story()));
    let ev: oc_watchdog::event::Event = serde_json::from_value(trigger.clone()).unwrap();
    // the popup's body: each command it offers, cut out of its prose
    let body = oc_watchdog::channels::desktop::body(&ev);
    let mut offered = vec![
        between(&body, "wd-store stop ", "; keep the model away").to_string(),
        between(&body, "wd-store block-model ", " (not while it is").to_string(),
    ];
    // the page: every command in a <code> and each line of the "Look closer" box
    let page = rig
        .home
        .cmd("wd-store")
        .args(["--db", &rig.db(), "--now", &(T0 + 44_000).to_string()])
        .args(["report", "--out", "-"])
        .run();
    page.ok();
    let page = page.stdout();
    let mut rest = page.as_str();
    while let Some(at) = rest.find("<code>wd-store ") {
        rest = &rest[at + "<code>".len()..];
        offered.push(unescape_html(&rest[..rest.find("</code>").unwrap()]));
    }
    let closer = between(&page, "<summary>Look closer</summary><pre>", "</pre>");
    for l in unescape_html(&closer["<summary>Look closer</summary><pre>".len()..]).lines() {
        offered.push(l.to_string());
    }
    let verbs: Vec<&str> = offered
        .iter()
        .map(|c| c.split(' ').nth(1).unwrap_or(""))
        .collect();
    for verb in ["stop", "block-model", "verdicts"] {
        assert!(
            verbs.contains(&verb),
            "no `wd-store {verb}` offered: {offered:#?}"
        );
    }
    // each pasted into sh, with a stand-in wd-store that prints the words it was given
    let bin = rig.home.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let stand_in = bin.join("wd-store");
    std::fs::write(&stand_in, "#!/bin/sh\nprintf '%s\\n' \"$@\"\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&stand_in, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!("{}:/usr/bin:/bin", bin.display());
    // sh, bash, and fish (tests/setup installs it), whose single quotes differ: `\'` and `\\`
    let shells: Vec<&str> = ["sh", "bash", "fish"]
        .into_iter()
        .filter(|s| {
            std::process::Command::new(s)
                .args(["-c", "true"])
                .status()
                .is_ok()
        })
        .collect();
    assert!(shells.contains(&"fish"), "fish (tests/setup installs it)");
    for (cmd, shell) in offered
        .iter()
        .flat_map(|c| shells.iter().map(move |s| (c, *s)))
    {
        let o = std::process::Command::new(shell)
            .args(["-c", cmd])
            .env("PATH", &path)
            .env("HOME", rig.home.path())
            .output()
            .unwrap();
        assert!(o.status.success(), "{shell}: {cmd}: {o:?}");
        let words = String::from_utf8_lossy(&o.stdout).into_owned();
        // the ids reach wd-store whole, as one word each
        if cmd.starts_with("wd-store stop ") || cmd.starts_with("wd-store verdicts ") {
            assert!(
                words.lines().any(|w| w == root),
                "{shell}: {cmd} gave {words}"
            );
        }
        if cmd.starts_with("wd-store block-model ") && !cmd.contains("PROVIDER/MODEL") {
            assert!(
                words.lines().any(|w| w == model),
                "{shell}: {cmd} gave {words}"
            );
        }
    }
    let made: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(made.is_empty(), "pasting {offered:#?} ran {made:?}");
}

#[test]
fn a_trigger_stays_on_screen_until_dismissed_and_an_all_clear_goes_after_10_s() {
    // issue 41: the watchdog left the expiry to the server, and under dunst's defaults a
    // trigger (and a stop, a "needs a person") was gone after about 10 s, with nobody told.
    // What needs a person now asks to stay (expire_timeout 0); an all-clear asks for 10 s
    let d = &Desktop::private();
    let rig = Rig::new("[[channels]]\nname = \"desk\"\ntype = \"desktop\"\n");
    let env = desktop_env(d);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let (a, b) = (
        format!("ses_stays{}", std::process::id()),
        format!("ses_goes{}", std::process::id()),
    );
    let (_, r) = rig.tick(
        T0,
        &[
            looping(&a, &a, true, 44, "active"),
            looping(&b, &b, true, 44, "active"),
        ],
        &env,
    );
    assert_eq!(states(&r).len(), 2, "{}", r.story());
    let (_, r) = rig.tick(
        T0 + 60_000,
        &[
            looping(&a, &a, true, 50, "active"),
            looping(&b, &b, true, 44, "idle"),
        ],
        &env,
    );
    assert_eq!(states(&r), [("resolve".into(), "info".into())]);
    let resolved = std::time::Instant::now();
    // what the Notify calls asked for
    let asked = |s: &str| -> Vec<(String, Option<i32>)> {
        d.wait_for(s, 1)
            .iter()
            .map(|n| (n.summary.split(':').next().unwrap().to_string(), n.expire))
            .collect()
    };
    assert_eq!(asked(&a), [("opencode loop".to_string(), Some(0))]);
    assert_eq!(
        asked(&b),
        [
            ("opencode loop".to_string(), Some(0)),
            ("resolved (stopped)".to_string(), Some(10_000))
        ]
    );
    // and what dunst did with them: 11 s on, the trigger is still shown, the all-clear went
    // into its history
    std::thread::sleep(std::time::Duration::from_secs(11).saturating_sub(resolved.elapsed()));
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert_eq!(dunst_counts(d), (1, 0, 1), "(displayed, waiting, history)");
    let history = std::process::Command::new("dunstctl")
        .arg("history")
        .env("DBUS_SESSION_BUS_ADDRESS", &d.bus)
        .output()
        .unwrap();
    let h: Value = serde_json::from_slice(&history.stdout).unwrap();
    let gone: Vec<&str> = h["data"][0]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["summary"]["data"].as_str().unwrap())
        .collect();
    assert_eq!(gone.len(), 1, "{h}");
    assert!(gone[0].starts_with("resolved (stopped): "), "{h}");
}

#[test]
fn a_resolve_says_which_session_it_resolves_by_title_and_project() {
    // issue 41: a resolve named the session by its id alone; which loop of which project had
    // ended was for the operator to look up
    let rig = Rig::new("");
    let root = "ses_0123456789abcdefPLACE";
    let at = |class: &str| {
        let mut v: Value = serde_json::from_str(&looping(root, root, true, 44, class)).unwrap();
        v["title"] = json!("Fix the flaky payment retry test");
        v["directory"] = json!(rig.home.join("work/billing-service").display().to_string());
        v.to_string()
    };
    let (_, r) = rig.tick(T0, &[at("active")], &[]);
    assert_eq!(states(&r), [("trigger".into(), "warning".into())]);
    let (_, r) = rig.tick(T0 + MIN5, &[at("idle")], &[]);
    assert_eq!(states(&r), [("resolve".into(), "info".into())]);
    let summary = r.records()[0]["summary"].as_str().unwrap().to_string();
    assert!(
        summary.starts_with(&format!(
            "{root} \"Fix the flaky payment retry test\" in ~/work/billing-service: the loop stopped: "
        )),
        "{summary}"
    );
}

/// Issue 39: the keys became agent-neutral (`loop:<root>`, was `opencode-loop:<root>`) and the
/// empty tick's outcome `no_agent` (was `no_opencode`). A database made by the previous build
/// (schema 11, `fixtures/schema11-open-loop.sql`), with a loop open and announced to PagerDuty,
/// is upgraded in place: the loop stays open under its new key, the next tick neither triggers
/// it again nor loses it, it escalates and resolves as before, and PagerDuty gets both under the
/// key it opened the incident with. A loop that starts after the upgrade has the new key.
#[test]
fn an_open_loop_from_a_schema_11_database_stays_open_under_its_new_key_and_pagerduty_keeps_its_incident(
) {
    let stub = Stub::start();
    stub.route(
        "POST /v2/enqueue",
        Reply::Json(202, r#"{"status":"success"}"#.into()),
    );
    let rig = Rig::new(&format!(
        "[[channels]]\nname = \"pd\"\ntype = \"pagerduty\"\nrouting_key_env = \"PD_KEY\"\nevents_url = \"{}/v2/enqueue\"\n",
        stub.url
    ));
    let env = [("PD_KEY", "R0UT1NG")];
    let dump =
        std::fs::read_to_string(crate::support::repo().join("fixtures/schema11-open-loop.sql"))
            .unwrap();
    rusqlite::Connection::open(rig.db())
        .unwrap()
        .execute_batch(&dump)
        .unwrap();
    let episodes = |rig: &Rig| -> Vec<String> {
        rig.query(
            "SELECT dedup_key || ' ' || coalesce((SELECT key FROM announced_keys WHERE episode = id), '-') || ' ' || state || ' ' || flagged_ticks
                    || ' ' || severity || ' ' || coalesce(reason, '-') FROM episodes ORDER BY id",
        )
    };
    let events = |rig: &Rig| -> Vec<String> {
        rig.query(
            "SELECT dedup_key || ' ' || state || ' ' || json_extract(body, '$.dedup_key') FROM events ORDER BY id",
        )
    };
    // as the previous build left it
    assert_eq!(
        rig.query::<String>("SELECT dedup_key || ' ' || state FROM episodes"),
        ["opencode-loop:ses_up open"]
    );
    assert_eq!(
        rig.query::<String>("SELECT outcome FROM ticks ORDER BY id"),
        ["no_opencode", "flagged"]
    );

    // the next tick flags it again: counted, nothing sent, nothing new opened
    let (_, r) = rig.tick(
        T0 + 2 * MIN5,
        &[looping("ses_up", "ses_up", true, 50, "")],
        &env,
    );
    r.ok();
    assert_eq!(states(&r), []);
    assert_eq!(
        episodes(&rig),
        ["loop:ses_up opencode-loop:ses_up open 2 warning -"]
    );
    assert_eq!(events(&rig), ["loop:ses_up trigger loop:ses_up"]);
    assert_eq!(
        rig.query::<String>("SELECT outcome FROM ticks ORDER BY id"),
        ["no_agent", "flagged", "flagged"]
    );
    assert_eq!(
        rig.query::<String>("SELECT dedup_key || ' ' || last_decision FROM episodes"),
        ["loop:ses_up counted"]
    );
    let l = loops(&rig);
    assert_eq!(l.len(), 1, "{l:?}");
    assert_eq!(l[0]["dedup_key"], "loop:ses_up");

    // it goes on: escalates, then resolves with progress
    let (_, r) = rig.tick(
        T0 + 3 * MIN5,
        &[looping("ses_up", "ses_up", true, 56, "")],
        &env,
    );
    assert_eq!(
        states(&r),
        [("escalate".to_string(), "critical".to_string())]
    );
    assert_eq!(r.records()[0]["dedup_key"], "loop:ses_up");
    let (_, r) = rig.tick(T0 + 4 * MIN5, &[verdict("ses_up", "ses_up", false)], &env);
    assert_eq!(states(&r), [("resolve".to_string(), "info".to_string())]);
    assert_eq!(
        episodes(&rig),
        ["loop:ses_up opencode-loop:ses_up resolved 3 info progress"]
    );

    // a loop that starts after the upgrade is announced under its new key
    let (_, r) = rig.tick(T0 + 5 * MIN5, &[verdict("ses_new", "ses_new", true)], &env);
    assert_eq!(states(&r), [("trigger".to_string(), "warning".to_string())]);
    assert_eq!(r.records()[0]["dedup_key"], "loop:ses_new");

    // PagerDuty saw one incident per loop: the old one escalated and resolved under the key it
    // was opened with (its trigger was sent by the previous build)
    let pds: Vec<(String, String, String)> = stub
        .requests()
        .iter()
        .map(|r| serde_json::from_str::<Value>(&r.body).unwrap())
        .map(|b| {
            let s = |k: &str| b[k].as_str().unwrap_or("-").to_string();
            (
                s("event_action"),
                s("dedup_key"),
                b["payload"]["severity"].as_str().unwrap_or("-").to_string(),
            )
        })
        .collect();
    let want = [
        ("trigger", "opencode-loop:ses_up", "critical"),
        ("resolve", "opencode-loop:ses_up", "-"),
        ("trigger", "loop:ses_new", "warning"),
    ]
    .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()));
    assert_eq!(pds, want);
}
