//! The privacy promise end to end: generated secrets of every family, in commands a real
//! opencode session runs through its bash tool, never reach oc-calls' output, the verdicts, the
//! watchdog database, the journal, or any channel's payload (webhook, PagerDuty, Alertmanager,
//! the desktop over a real D-Bus session bus).

use crate::support::desktop::Desktop;
use crate::support::ocsim::Sim;
use crate::support::secrets::{self, Case};
use crate::support::stub::{Reply, Stub};
use crate::support::Home;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{json, Value};

/// Every cell of every table, as text.
fn dump(db: &std::path::Path) -> String {
    let c = rusqlite::Connection::open(db).unwrap();
    let tables: Vec<String> = c
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table'")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let mut out = String::new();
    for t in tables {
        let mut st = c.prepare(&format!("SELECT * FROM \"{t}\"")).unwrap();
        let n = st.column_count();
        let mut rows = st.query([]).unwrap();
        while let Some(r) = rows.next().unwrap() {
            for i in 0..n {
                match r.get_ref(i).unwrap() {
                    rusqlite::types::ValueRef::Text(b) | rusqlite::types::ValueRef::Blob(b) => {
                        out.push_str(&String::from_utf8_lossy(b));
                    }
                    other => out.push_str(&format!("{other:?}")),
                }
                out.push('\t');
            }
            out.push('\n');
        }
    }
    out
}

/// One session: each generated command once, then the first one over and over (a loop the
/// detector flags and the channels alert on). Commands run inside `if false; then ... fi`, so
/// bash reads them whole (heredocs and all) and runs none of them.
fn script(cases: &[Case]) -> Value {
    let bash = |c: &Case| {
        json!({"tool": "bash", "args": {"command": format!("if false; then\n{}\nfi", c.command),
                                         "description": "generated", "timeout": 5000}})
    };
    let mut steps: Vec<Value> = cases.iter().map(bash).collect();
    steps.extend(std::iter::repeat_with(|| bash(&cases[0])).take(6));
    steps.push(json!({"text": "Done."}));
    Value::Array(steps)
}

#[test]
fn generated_secrets_never_reach_calls_verdicts_database_journal_or_channels() {
    let desk = Desktop::shared();
    let sim = Sim::shared();
    let stub = Stub::start();
    stub.route("POST /hook", Reply::Json(200, "{}".into()))
        .route(
            "POST /v2/enqueue",
            Reply::Json(202, r#"{"status":"success"}"#.into()),
        )
        .route("POST /api/v2/alerts", Reply::Json(200, "{}".into()));
    let home = Home::new();
    let cfg = home.join("watchdog.toml");
    std::fs::write(
        &cfg,
        format!(
            "[detector]\ntop_min = 5\nmin_calls = 10\n\n\
             [[channels]]\nname = \"hook\"\ntype = \"webhook\"\nurl = \"{u}/hook\"\n\n\
             [[channels]]\nname = \"pd\"\ntype = \"pagerduty\"\nrouting_key_env = \"PD_KEY\"\nevents_url = \"{u}/v2/enqueue\"\n\n\
             [[channels]]\nname = \"am\"\ntype = \"alertmanager\"\nurls = [\"{u}\"]\n\n\
             [[channels]]\nname = \"desktop\"\ntype = \"desktop\"\nrate_limit_secs = 0\n",
            u = stub.url
        ),
    )
    .unwrap();
    let db = home.join("w.db");
    let (cfg_s, db_s) = (cfg.to_str().unwrap(), db.to_str().unwrap());

    // a property over whole sessions: few cases, each a real session and a real tick
    let mut runner = TestRunner::new(Config {
        cases: 3,
        max_shrink_iters: 0,
        failure_persistence: None,
        ..Config::default()
    });
    let round = std::sync::atomic::AtomicUsize::new(0);
    runner
        .run(&prop::collection::vec(secrets::command(), 14), |cases| {
            let n = round.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let name = format!("privacy_{}_{n}", std::process::id());
            sim.add_script(&name, &script(&cases));
            let ran = sim.run(&name);
            let calls = home
                .cmd("oc-calls")
                .args(["--server", &sim.url, &ran.id])
                .run();
            calls.ok();
            let detect = home
                .cmd("progress-detect")
                .args(["--config", cfg_s])
                .stdin(calls.stdout())
                .run();
            detect.ok();
            let verdict = detect.kind("verdict");
            assert_eq!(verdict.len(), 1, "{}", detect.story());
            assert_eq!(verdict[0]["flagged"], true, "{}", detect.story());
            let tick = home
                .cmd("wd-store")
                .args(["--db", db_s, "--config", cfg_s, "tick"])
                .stdin(detect.stdout())
                .run();
            tick.ok();
            let alert = home
                .cmd("wd-alert")
                .args(["--db", db_s, "--config", cfg_s])
                .env("PD_KEY", "R0UT1NG")
                .env("DBUS_SESSION_BUS_ADDRESS", &desk.bus)
                .env("DISPLAY", &desk.display)
                .stdin(tick.stdout())
                .run();
            alert.ok();
            let loops = home
                .cmd("wd-store")
                .args(["--db", db_s, "--config", cfg_s, "loops"])
                .run();
            loops.ok();
            // the loop reached every channel, its command masked
            let hooks: Vec<_> = stub
                .requests()
                .into_iter()
                .filter(|r| r.body.contains(&ran.id))
                .collect();
            assert!(hooks.iter().any(|r| r.path == "/hook"), "{}", alert.story());
            assert!(hooks.iter().any(|r| r.path == "/v2/enqueue"));
            assert!(hooks.iter().any(|r| r.path == "/api/v2/alerts"));
            let seen = desk.wait_for(&ran.id, 1);
            let title = &seen[0].summary;
            assert!(
                title.starts_with("opencode loop: build repeats "),
                "{title}"
            );

            let mut texts = vec![
                ("oc-calls", calls.stdout() + &calls.stderr()),
                ("progress-detect", detect.stdout() + &detect.stderr()),
                ("wd-store tick", tick.stdout() + &tick.stderr()),
                (
                    "wd-alert and its journal lines",
                    alert.stdout() + &alert.stderr(),
                ),
                ("wd-store loops", loops.stdout()),
                ("the database", dump(&db)),
            ];
            for r in stub.requests() {
                texts.push(("a channel request", format!("{:?} {}", r.headers, r.body)));
            }
            for s in desk.seen() {
                texts.push((
                    "a desktop notification",
                    format!("{} {}", s.summary, s.body),
                ));
            }
            for c in &cases {
                for (place, text) in &texts {
                    let leaks = c.leaks_of(text, 8);
                    prop_assert!(
                        leaks.is_empty(),
                        "{} secret of {:?} reached {place}: {leaks:?}",
                        c.family,
                        c.command
                    );
                }
            }
            Ok(())
        })
        .unwrap();
}

/// Issue 30, point 2: the second round's families in every field that leaves the readers, over
/// HTTP and from the database alike: a session title, a write's filePath, the grep tool's
/// patterns, and bash commands, in a real opencode session.
#[test]
fn round_two_secrets_never_leave_in_titles_paths_patterns_or_commands() {
    let sim = Sim::shared();
    let commands = [
        (
            "curl -su svc:Clust3rPw! https://api.example.com/x",
            "Clust3rPw!",
        ),
        (
            "sed -i 's/changeme/Wint3r2024!/' config/app.ini",
            "Wint3r2024!",
        ),
        (
            "cat > ~/.netrc <<EOF\nmachine api.example.com login bob password N3trcPw1\nEOF",
            "N3trcPw1",
        ),
        (
            "python -c 'import requests; requests.get(u, auth=(\"svc\", \"PyAuth77\"))'",
            "PyAuth77",
        ),
        (
            "echo -n GhSecret42x | gh secret set DEPLOY_TOKEN",
            "GhSecret42x",
        ),
        (
            "aws ssm put-parameter --name /app/db --value SsmVal42x",
            "SsmVal42x",
        ),
        ("grep -rn 'P@ssw0rd#7' config/", "P@ssw0rd#7"),
    ];
    let token = "ghp_R2x8Kq0vTz7LmN4bW9cY1dF5hJ3sA6eU0iO2";
    let mut steps = vec![
        json!({"tool": "write", "args": {"filePath": format!("{{ROOT}}/{token}/notes.txt"),
                                         "content": "x\n"}}),
        json!({"tool": "grep", "args": {"pattern": "Spring2024!", "include": "*.ini"}}),
        json!({"tool": "grep", "args": {"pattern": "password\\s*=\\s*\"RegexPw42\""}}),
    ];
    for (c, _) in &commands {
        steps.push(
            json!({"tool": "bash", "args": {"command": format!("if false; then\n{c}\nfi"),
                                                   "description": "round two", "timeout": 5000}}),
        );
    }
    steps.push(json!({"text": "Done."}));
    let name = format!("privacy_round_two_{}", std::process::id());
    sim.add_script(&name, &Value::Array(steps));
    let ran = sim.run_with(
        &name,
        crate::support::ocsim::Opts {
            title: Some("Rotate DB password to Spring2024!".into()),
            ..Default::default()
        },
    );
    let home = Home::new();
    let db = sim.db_path();
    let db_s = db.to_str().unwrap();
    let routes = [
        (
            "oc-sessions over HTTP",
            home.cmd("oc-sessions")
                .args(["--server", &sim.url, "--no-db", "--no-discover"])
                .run(),
        ),
        (
            "oc-sessions from the database",
            home.cmd("oc-sessions")
                .args(["--db", db_s, "--no-discover"])
                .run(),
        ),
        (
            "oc-calls over HTTP",
            home.cmd("oc-calls")
                .args(["--server", &sim.url, &ran.id])
                .run(),
        ),
        (
            "oc-calls from the database",
            home.cmd("oc-calls").args(["--db", db_s, &ran.id]).run(),
        ),
    ];
    let mut secrets: Vec<&str> = commands.iter().map(|(_, s)| *s).collect();
    secrets.extend(["Spring2024!", "RegexPw42", token]);
    for (route, r) in &routes {
        r.ok();
        let text = r.stdout() + &r.stderr();
        for s in &secrets {
            assert!(!text.contains(s), "{s} reached {route}:\n{}", r.story());
        }
        let session = r
            .kind("session")
            .into_iter()
            .find(|s| s["id"] == ran.id.as_str())
            .unwrap_or_else(|| panic!("{route}: no session {}\n{}", ran.id, r.story()));
        assert_eq!(session["title"], "Rotate DB password to ***", "{route}");
        if route.starts_with("oc-calls") {
            let calls = r.kind("call");
            assert_eq!(calls.len(), 3 + commands.len(), "{route}\n{}", r.story());
            let path = calls[0]["args"]["filePath"].as_str().unwrap();
            assert!(path.ends_with("/***/notes.txt"), "{route}: {path}");
            assert_eq!(calls[1]["args"]["pattern"], "***");
            assert_eq!(calls[1]["args"]["include"], "*.ini");
            assert_eq!(calls[2]["args"]["pattern"], "password\\s*=\\s*\"***\"");
            assert_eq!(
                calls[3]["args"]["command"],
                "if false; then\ncurl -su svc:*** https://api.example.com/x\nfi"
            );
            assert_eq!(
                calls[7]["args"]["command"],
                "if false; then\necho -n *** | gh secret set DEPLOY_TOKEN\nfi"
            );
        }
    }
}

#[test]
fn a_bare_user_password_in_a_session_title_reached_every_output() {
    // issue 42: `Login as admin:AdminTitlePw` left the readers as it was
    let sim = Sim::shared();
    let ran = sim.run_with(
        "reread",
        crate::support::ocsim::Opts {
            title: Some("Login as admin:AdminTitlePw".into()),
            ..Default::default()
        },
    );
    let home = Home::new();
    let db = sim.db_path();
    let db_s = db.to_str().unwrap();
    for (route, r) in [
        (
            "oc-sessions over HTTP",
            home.cmd("oc-sessions")
                .args(["--server", &sim.url, "--no-db", "--no-discover"])
                .run(),
        ),
        (
            "oc-sessions from the database",
            home.cmd("oc-sessions")
                .args(["--db", db_s, "--no-discover"])
                .run(),
        ),
        (
            "oc-calls from the database",
            home.cmd("oc-calls").args(["--db", db_s, &ran.id]).run(),
        ),
    ] {
        r.ok();
        assert!(
            !(r.stdout() + &r.stderr()).contains("AdminTitlePw"),
            "{route}:\n{}",
            r.story()
        );
        let session = r
            .kind("session")
            .into_iter()
            .find(|s| s["id"] == ran.id.as_str())
            .unwrap_or_else(|| panic!("{route}: no session {}\n{}", ran.id, r.story()));
        assert_eq!(session["title"], "Login as admin:***", "{route}");
    }
}
