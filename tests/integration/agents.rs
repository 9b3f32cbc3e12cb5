//! Sessions of other agents, sent as their transcripts, backtested: `oc-calls --export PATH |
//! progress-detect` on what real Claude Code and Codex CLI sessions (the pinned versions, driven
//! offline by the scripted fake model, every tool call really run) left on disk.

use crate::support::agents::{make_project, AgentModel, CLAUDE_CODE_VERSION, CODEX_VERSION};
use crate::support::Home;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

/// The failing test, run again and again: what a looping agent does.
const TEST: &str = "python3 tests/test_calc.py";

fn version(prog: &str) -> String {
    let out = std::process::Command::new(prog)
        .arg("--version")
        .output()
        .unwrap_or_else(|e| panic!("{prog} --version: {e} (tests/setup installs it)"));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// An agent's HOME, with a git identity for the commits its scripts make.
fn agent_home(dir: &Path) -> std::path::PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(
        dir.join(".gitconfig"),
        "[user]\n\temail = sim@example.invalid\n\tname = sim\n",
    )
    .unwrap();
    dir.to_path_buf()
}

#[test]
fn claude_code_and_codex_transcripts_in_a_folder_are_backtested_the_loops_flagged_and_the_healthy_sessions_not(
) {
    assert!(version("claude").starts_with(CLAUDE_CODE_VERSION));
    assert!(version("codex").contains(CODEX_VERSION));
    let home = Home::new();
    let sent = home.join("sent");
    let (ch, xh) = (
        agent_home(&sent.join("claude-home")),
        agent_home(&sent.join("codex-home")),
    );
    let proj = |name: &str| make_project(&home.join(name));
    let (cloop, cwork, xloop, xwork) = (proj("cloop"), proj("cwork"), proj("xloop"), proj("xwork"));
    let model = AgentModel::start();
    let bash = |c: &str| json!({"tool": "Bash", "args": {"command": c, "description": "run"}});
    let exec = |c: &str| json!({"tool": "exec_command", "args": {"cmd": c}});
    model.script("cloop", &Value::Array(vec![bash(TEST); 16]));
    let calc = cwork.join("src/calc.py").display().to_string();
    model.script(
        "cwork",
        &json!([
            {"tool": "Read", "args": {"file_path": calc}},
            bash(TEST),
            {"tool": "Edit", "args": {"file_path": calc, "old_string": "    return sum(xs) / len(xs)",
                                      "new_string": "    return sum(xs) / len(xs) if xs else 0"}},
            bash(TEST),
            bash("git add -A && git commit -qm 'fix mean'"),
            {"tool": "Agent", "args": {"description": "Search", "prompt": "SCRIPT:cchild find mean",
                                       "subagent_type": "Explore"}},
            {"text": "Fixed and committed."}
        ]),
    );
    model.script(
        "cchild",
        &json!([bash("grep -n mean src/calc.py"), {"text": "mean is in src/calc.py"}]),
    );
    model.script("xloop", &Value::Array(vec![exec(TEST); 16]));
    model.script(
        "xwork",
        &json!([
            exec("cat src/calc.py"),
            exec(TEST),
            {"tool": "apply_patch", "args": "*** Begin Patch\n*** Update File: src/calc.py\n@@\n def mean(xs):\n-    return sum(xs) / len(xs)\n+    return sum(xs) / len(xs) if xs else 0\n*** End Patch\n"},
            exec(TEST),
            exec("git add -A && git commit -qm 'fix mean'"),
            {"text": "Fixed and committed."}
        ]),
    );
    model.claude(&ch, &cloop, "cloop");
    model.claude(&ch, &cwork, "cwork");
    model.codex(&xh, &xloop, "xloop");
    model.codex(&xh, &xwork, "xwork");

    // one folder holding both agents' homes, read at every depth
    let r = home
        .cmd("oc-calls")
        .args(["--export", sent.to_str().unwrap()])
        .run();
    r.ok();
    let sessions = r.kind("session");
    let of = |dir: &Path, program: &str, sub: bool| -> Value {
        sessions
            .iter()
            .find(|s| {
                s["directory"] == dir.to_str().unwrap()
                    && s["program"] == program
                    && s["parent"].is_null() != sub
            })
            .unwrap_or_else(|| panic!("no {program} session in {}\n{}", dir.display(), r.story()))
            .clone()
    };
    let (sc_loop, sc_work, sc_sub) = (
        of(&cloop, "claude-code", false),
        of(&cwork, "claude-code", false),
        of(&cwork, "claude-code", true),
    );
    let (sx_loop, sx_work) = (of(&xloop, "codex", false), of(&xwork, "codex", false));
    assert_eq!(sessions.len(), 5, "{}", r.story());
    assert_eq!(sc_sub["parent"], sc_work["id"]);
    assert_eq!(sc_sub["agent"], "Explore");
    assert_eq!(sx_work["model"], "sim/gpt-5.5");
    let calls = r.kind("call");
    let calls_of = |s: &Value| -> Vec<Value> {
        calls
            .iter()
            .filter(|c| c["session"] == s["id"])
            .map(|c| {
                json!([
                    c["tool"],
                    c["args"]["command"]
                        .as_str()
                        .or(c["args"]["filePath"].as_str()),
                    c["status"],
                    c["landed"],
                    c["exit"]
                ])
            })
            .collect()
    };
    assert_eq!(
        calls_of(&sc_work),
        [
            json!(["read", calc, "completed", false, null]),
            json!(["bash", TEST, "completed", false, 1]),
            json!(["edit", calc, "completed", true, null]),
            json!(["bash", TEST, "completed", false, 0]),
            json!([
                "bash",
                "git add -A && git commit -qm 'fix mean'",
                "completed",
                true,
                0
            ]),
            json!(["task", null, "completed", false, null]),
        ],
        "{}",
        r.story()
    );
    assert_eq!(
        calls_of(&sx_work),
        [
            json!(["bash", "cat src/calc.py", "completed", false, 0]),
            json!(["bash", TEST, "completed", false, 1]),
            json!([
                "edit",
                xwork.join("src/calc.py").to_str().unwrap(),
                "completed",
                true,
                null
            ]),
            json!(["bash", TEST, "completed", false, 0]),
            json!([
                "bash",
                "git add -A && git commit -qm 'fix mean'",
                "completed",
                true,
                0
            ]),
        ],
        "{}",
        r.story()
    );
    assert_eq!(
        calls_of(&sc_sub),
        [json!([
            "bash",
            "grep -n mean src/calc.py",
            "completed",
            false,
            0
        ])]
    );
    // sixteen runs of one failing test: one output hash, though Codex's chunk ids and wall times
    // differ every run
    for s in [&sc_loop, &sx_loop] {
        let outs: std::collections::BTreeSet<&str> = calls
            .iter()
            .filter(|c| c["session"] == s["id"])
            .map(|c| c["out"].as_str().unwrap())
            .collect();
        assert_eq!(outs.len(), 1, "{}: {outs:?}", s["program"]);
    }
    // what the agents printed and read never leaves oc-calls
    for secret in [
        "ZeroDivisionError",
        "division by zero",
        "mean of empty list",
        "Fixed and",
    ] {
        assert!(!r.stdout().contains(secret), "{secret} in the records");
    }

    let v = home.cmd("progress-detect").stdin(r.stdout()).run();
    v.ok();
    let verdicts: BTreeMap<String, Value> = v
        .kind("verdict")
        .into_iter()
        .map(|v| (v["session"].as_str().unwrap().to_string(), v))
        .collect();
    let verdict = |s: &Value| verdicts[s["id"].as_str().unwrap()].clone();
    for s in [&sc_loop, &sx_loop] {
        let v = verdict(s);
        assert_eq!(v["flagged"], true, "{}: {v}", s["program"]);
        assert_eq!(v["calls"], 16);
        assert_eq!(v["signals"]["top_target"], format!("bash {TEST}"));
    }
    for s in [&sc_work, &sc_sub, &sx_work] {
        let v = verdict(s);
        assert_eq!(v["flagged"], false, "{}: {v}", s["program"]);
    }
    assert_eq!(verdict(&sc_sub)["root"], sc_work["id"]);

    // one transcript named alone brings its subagents beside it; a rollout read from stdin
    let file = |s: &Value| {
        s["source"]
            .as_str()
            .unwrap()
            .strip_prefix("export:")
            .unwrap()
            .to_string()
    };
    let r = home
        .cmd("oc-calls")
        .args(["--export", &file(&sc_work)])
        .run();
    r.ok();
    let ids: Vec<Value> = r
        .kind("session")
        .into_iter()
        .map(|s| s["id"].clone())
        .collect();
    assert_eq!(ids, [sc_work["id"].clone(), sc_sub["id"].clone()]);
    let r = home
        .cmd("oc-calls")
        .args(["--export", "-"])
        .stdin(std::fs::read(file(&sx_loop)).unwrap())
        .run();
    r.ok();
    assert_eq!(r.kind("session")[0]["source"], "export:-");
    assert_eq!(r.kind("call").len(), 16);
}

#[test]
fn a_folder_without_transcripts_is_blind_and_a_file_neither_agent_wrote_is_skipped_saying_so() {
    let home = Home::new();
    let dir = home.join("sent");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("notes.jsonl"), "{\"a\":1}\n").unwrap();
    let r = home
        .cmd("oc-calls")
        .args(["--export", dir.to_str().unwrap()])
        .run();
    r.expect_code(2);
    assert_eq!(
        r.kind("blind"),
        [
            json!({"kind": "blind", "source": format!("export:{}", dir.display()),
                "reason": format!("no Claude Code transcript or Codex rollout in {}", dir.display())})
        ]
    );
    assert_eq!(
        r.stderr(),
        format!(
            "oc-calls: {}: neither a Claude Code transcript nor a Codex rollout: skipped\n",
            dir.join("notes.jsonl").display()
        )
    );
}

/// A subagent that loops is judged as a session of its own, under the session whose Agent call
/// started it: its verdict's root is that session, which the alert is raised on.
#[test]
fn a_claude_code_subagents_loop_is_flagged_with_its_parent_as_root() {
    let home = Home::new();
    let ch = agent_home(&home.join("claude-home"));
    let proj = make_project(&home.join("proj"));
    let model = AgentModel::start();
    let grep = json!({"tool": "Bash", "args": {"command": "grep -n mean src/calc.py", "description": "grep"}});
    model.script(
        "lead",
        &json!([
            {"tool": "Agent", "args": {"description": "Search", "prompt": "SCRIPT:searcher find mean",
                                       "subagent_type": "general-purpose"}},
            {"text": "Delegated."}
        ]),
    );
    model.script("searcher", &Value::Array(vec![grep; 16]));
    model.claude(&ch, &proj, "lead");
    let r = home
        .cmd("oc-calls")
        .args(["--export", ch.to_str().unwrap()])
        .run();
    r.ok();
    let sessions = r.kind("session");
    assert_eq!(sessions.len(), 2, "{}", r.story());
    let (lead, sub) = (&sessions[0], &sessions[1]);
    assert_eq!(sub["parent"], lead["id"]);
    assert_eq!(sub["agent"], "general-purpose");
    let v = home.cmd("progress-detect").stdin(r.stdout()).run();
    v.ok();
    let verdicts = v.kind("verdict");
    let of = |s: &Value| {
        verdicts
            .iter()
            .find(|v| v["session"] == s["id"])
            .unwrap()
            .clone()
    };
    let (vl, vs) = (of(lead), of(sub));
    assert_eq!(vl["flagged"], false, "{vl}");
    assert_eq!(vs["flagged"], true, "{vs}");
    assert_eq!(vs["root"], lead["id"]);
    assert_eq!(vs["calls"], 16);
    assert_eq!(vs["signals"]["top_target"], "bash grep -n mean src/calc.py");
}

/// The scripts of a looping and a healthy session for each agent, run to their ends in `home`
/// (their HOME), each in a project of its own: `(cloop, cwork, xloop, xwork)`.
fn loops_and_healthy_sessions(
    model: &AgentModel,
    home: &Path,
    proj: impl Fn(&str) -> std::path::PathBuf,
) -> [std::path::PathBuf; 4] {
    let (cloop, cwork, xloop, xwork) = (proj("cloop"), proj("cwork"), proj("xloop"), proj("xwork"));
    let bash = |c: &str| json!({"tool": "Bash", "args": {"command": c, "description": "run"}});
    let exec = |c: &str| json!({"tool": "exec_command", "args": {"cmd": c}});
    model.script("cloop", &Value::Array(vec![bash(TEST); 16]));
    let calc = cwork.join("src/calc.py").display().to_string();
    model.script(
        "cwork",
        &json!([
            {"tool": "Read", "args": {"file_path": calc}},
            bash(TEST),
            {"tool": "Edit", "args": {"file_path": calc, "old_string": "    return sum(xs) / len(xs)",
                                      "new_string": "    return sum(xs) / len(xs) if xs else 0"}},
            bash(TEST),
            bash("git add -A && git commit -qm 'fix mean'"),
            {"text": "Fixed and committed."}
        ]),
    );
    model.script("xloop", &Value::Array(vec![exec(TEST); 16]));
    model.script(
        "xwork",
        &json!([
            exec("cat src/calc.py"),
            exec(TEST),
            {"tool": "apply_patch", "args": "*** Begin Patch\n*** Update File: src/calc.py\n@@\n def mean(xs):\n-    return sum(xs) / len(xs)\n+    return sum(xs) / len(xs) if xs else 0\n*** End Patch\n"},
            exec(TEST),
            exec("git add -A && git commit -qm 'fix mean'"),
            {"text": "Fixed and committed."}
        ]),
    );
    model.claude(home, &cloop, "cloop");
    model.claude(home, &cwork, "cwork");
    model.codex(home, &xloop, "xloop");
    model.codex(home, &xwork, "xwork");
    [cloop, cwork, xloop, xwork]
}

/// What a user gets who runs Claude Code and Codex and installs nothing else: the plain
/// pipeline, with no --export and no config, finds both agents' sessions in HOME, says so in
/// its `source` records, flags the two loops naming the agent program, and not the healthy two;
/// the alert's title names the program.
#[test]
fn claude_code_and_codex_sessions_in_home_are_watched_with_no_configuration_and_loops_name_their_program(
) {
    let home = Home::new();
    agent_home(home.path());
    let model = AgentModel::start();
    let [cloop, cwork, xloop, xwork] =
        loops_and_healthy_sessions(&model, home.path(), |n| make_project(&home.join(n)));

    let s = home.cmd("oc-sessions").run();
    s.ok();
    assert_eq!(s.kind("blind"), Vec::<Value>::new(), "{}", s.story());
    let (claude_dir, codex_dir) = (home.join(".claude"), home.join(".codex"));
    assert_eq!(
        s.kind("source"),
        [
            json!({"kind": "source", "source": format!("claude-code:{}", claude_dir.display()),
                   "reader": "claude-code", "found": ["default"], "version": null,
                   "sessions": 2, "transcripts": 2}),
            json!({"kind": "source", "source": format!("codex:{}", codex_dir.display()),
                   "reader": "codex", "found": ["default"], "version": null,
                   "sessions": 2, "rollouts": 2}),
        ],
        "{}",
        s.story()
    );
    let sessions = s.kind("session");
    assert_eq!(sessions.len(), 4, "{}", s.story());
    let of = |dir: &Path| -> Value {
        sessions
            .iter()
            .find(|x| x["directory"] == dir.to_str().unwrap())
            .unwrap_or_else(|| panic!("no session in {}\n{}", dir.display(), s.story()))
            .clone()
    };
    let (sc_loop, sc_work, sx_loop, sx_work) = (of(&cloop), of(&cwork), of(&xloop), of(&xwork));
    for (x, program) in [
        (&sc_loop, "claude-code"),
        (&sc_work, "claude-code"),
        (&sx_loop, "codex"),
        (&sx_work, "codex"),
    ] {
        assert_eq!(x["program"], program, "{x}");
        // every run ended: no process runs them
        assert_eq!(x["status"], "idle", "{x}");
        assert_eq!(x["parent"], Value::Null);
    }
    assert_eq!(
        sc_loop["source"],
        format!("claude-code:{}", claude_dir.display())
    );
    assert_eq!(sx_loop["source"], format!("codex:{}", codex_dir.display()));
    assert_eq!(sx_work["model"], "sim/gpt-5.5");

    let c = home.cmd("oc-calls").stdin(s.stdout()).run();
    c.ok();
    let calls = c.kind("call");
    let count = |x: &Value| calls.iter().filter(|k| k["session"] == x["id"]).count();
    assert_eq!(
        [
            count(&sc_loop),
            count(&sc_work),
            count(&sx_loop),
            count(&sx_work)
        ],
        [16, 5, 16, 5],
        "{}",
        c.story()
    );
    let landed: Vec<bool> = calls
        .iter()
        .filter(|k| k["session"] == sx_work["id"])
        .map(|k| k["landed"].as_bool().unwrap())
        .collect();
    assert_eq!(landed, [false, false, true, false, true]);
    assert_eq!(c.kind("activity").len(), 4);
    assert!(c
        .kind("activity")
        .iter()
        .all(|a| a["in_flight"] == false && a["running"] == json!([])));

    // as the tick runs it: wd-store calls keeps the latest calls for the page
    let staged = home.cmd("wd-store").args(["calls"]).stdin(c.stdout()).run();
    staged.ok();
    assert_eq!(staged.stdout(), c.stdout());
    let v = home.cmd("progress-detect").stdin(staged.stdout()).run();
    v.ok();
    let verdicts = v.kind("verdict");
    let verdict = |x: &Value| -> Value {
        verdicts
            .iter()
            .find(|v| v["session"] == x["id"])
            .unwrap()
            .clone()
    };
    for (x, program) in [(&sc_loop, "claude-code"), (&sx_loop, "codex")] {
        let vd = verdict(x);
        assert_eq!(vd["flagged"], true, "{vd}");
        assert_eq!(vd["program"], program);
        assert_eq!(vd["calls"], 16);
        assert_eq!(vd["signals"]["top_target"], format!("bash {TEST}"));
    }
    for (x, program) in [(&sc_work, "claude-code"), (&sx_work, "codex")] {
        let vd = verdict(x);
        assert_eq!(vd["flagged"], false, "{vd}");
        assert_eq!(vd["program"], program);
        assert_eq!(vd["calls"], 5);
    }

    // the alerts name the program, and are raised on these sessions
    let t = home.cmd("wd-store").args(["tick"]).stdin(v.stdout()).run();
    t.ok();
    let a = home.cmd("wd-alert").stdin(t.stdout()).run();
    let titles: Vec<String> = a
        .stderr()
        .lines()
        .filter(|l| l.starts_with("oc-watchdog: dedup="))
        .map(|l| {
            l.split(" severity=").next().unwrap().to_string()
                + " "
                + l.split(" title=").nth(1).unwrap()
        })
        .collect();
    let mut want = vec![
        format!(
            "oc-watchdog: dedup=loop:{} state=trigger \"Claude Code loop: agent repeats bash {TEST}\"",
            sc_loop["id"].as_str().unwrap()
        ),
        format!(
            "oc-watchdog: dedup=loop:{} state=trigger \"Codex loop: agent repeats bash {TEST}\"",
            sx_loop["id"].as_str().unwrap()
        ),
    ];
    let mut got = titles.clone();
    got.sort();
    want.sort();
    assert_eq!(got, want, "{}", a.story());
    // the operator's page names the program and the project of each loop
    home.cmd("wd-store").args(["report"]).run().ok();
    let page = std::fs::read_to_string(home.join(".local/state/oc-watchdog/report.html")).unwrap();
    for (program, proj) in [("Claude Code", &cloop), ("Codex", &xloop)] {
        assert!(
            page.contains(&format!("{program} loop: agent repeats bash {TEST}")),
            "{program} not on the page"
        );
        assert!(page.contains(proj.file_name().unwrap().to_str().unwrap()));
    }
    // what to do says how to stop each where it runs, and offers no opencode command
    assert!(page.contains("<b>Stop it:</b> Ctrl-C in the terminal of its <code>claude -p</code>, Esc in its interactive session"));
    assert!(page.contains(
        "<b>Stop it:</b> Ctrl-C in the terminal of its <code>codex exec</code>, Esc in its TUI"
    ));
    let id = sc_loop["id"].as_str().unwrap();
    assert!(!page.contains(&format!("wd-store stop {id}")), "{id}");
    // wd-store stop reaches a Codex thread: offered beside the keys, with what its user sees
    // and how to resume
    let id = sx_loop["id"].as_str().unwrap();
    assert!(page.contains(&format!(
        "Esc in its TUI, or <code>wd-store stop {id}</code>; the turn ends as with those keys (<code>codex exec</code> prints &quot;turn interrupted&quot; and exits with status 1, the TUI shows &quot;Conversation interrupted&quot;). Resume with <code>codex exec resume {id} "
    )), "{id}");
    assert!(!page.contains("block-model sim/gpt-5.5") && !page.contains("block-model claude-opus"));
    // an agent that names none is not "agent agent"
    let events: Vec<Value> = a
        .stdout()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let claude = events
        .iter()
        .find(|e| e["details"]["program"] == "claude-code")
        .unwrap_or_else(|| panic!("{}", a.stdout()));
    let summary = claude["summary"].as_str().unwrap();
    assert!(
        summary.starts_with(&format!("session {} in ", sc_loop["id"].as_str().unwrap()))
            && !summary.contains("agent agent"),
        "{summary}"
    );
}

/// An agent that is not installed costs nothing and says nothing; one turned off in the config
/// is not read.
/// An agent installed after the follow service started: Claude Code's first `claude -p` makes
/// `~/.claude`, and its session is listed at the next poll, not at the next full read. It was
/// found only by a full read (60 s by default): a benchmark's first two loops reached the
/// desktop after 53 s, some 200 calls after their flag.
#[test]
fn an_agent_whose_directory_appears_after_the_follow_started_is_read_at_the_next_poll() {
    use std::io::BufRead;
    let home = Home::new();
    agent_home(home.path());
    let cfg = home.join(".config/oc-watchdog/watchdog.toml");
    std::fs::create_dir_all(cfg.parent().unwrap()).unwrap();
    // a full read ten minutes apart: only a poll can find it within the test
    std::fs::write(&cfg, "[follow]\npoll_ms = 200\nfull_every_secs = 600\n").unwrap();
    assert!(!home.join(".claude").exists());
    let err = std::fs::File::create(home.join("stderr.txt")).unwrap();
    let mut sessions = home
        .cmd("oc-sessions")
        .args(["--follow", "--no-discover", "--no-db"])
        .spawn_from(std::process::Stdio::null(), err);
    let (tx, rx) = std::sync::mpsc::channel::<Value>();
    let out = sessions.stdout.take().unwrap();
    std::thread::spawn(move || {
        for l in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(serde_json::from_str(&l).unwrap()).is_err() {
                break;
            }
        }
    });
    // its first full read is done: a sweep
    loop {
        let r = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("a first sweep");
        if r["kind"] == "sweep" {
            break;
        }
    }
    let model = AgentModel::start();
    model.script(
        "appears",
        &json!([{"tool": "Bash", "args": {"command": "true", "description": "run"}}, {"text": "Done."}]),
    );
    let proj = make_project(&home.join("proj"));
    model.claude(home.path(), &proj, "appears");
    let ran = std::time::Instant::now();
    let listed = loop {
        match rx.recv_timeout(Duration::from_secs(20)) {
            Ok(r) if r["kind"] == "session" && r["program"] == "claude-code" => break r,
            Ok(_) => {}
            Err(_) => break Value::Null,
        }
    };
    let _ = sessions.kill();
    let _ = sessions.wait();
    assert_eq!(listed["directory"], proj.display().to_string(), "{listed}");
    eprintln!(
        "listed {:.1} s after the run ended",
        ran.elapsed().as_secs_f64()
    );
    assert!(ran.elapsed() < Duration::from_secs(20));
}

#[test]
fn a_home_with_neither_agent_gives_nothing_and_an_agent_turned_off_is_not_read() {
    let home = Home::new();
    let s = home.cmd("oc-sessions").run();
    s.ok();
    assert_eq!(s.stdout(), "");
    assert_eq!(s.stderr(), "");
    let c = home.cmd("oc-calls").stdin(s.stdout()).run();
    c.ok();
    assert_eq!(c.stdout(), "");

    // both present, one off: only the other's source record (an empty one: no sessions yet)
    std::fs::create_dir_all(home.join(".claude/projects")).unwrap();
    std::fs::create_dir_all(home.join(".codex/sessions")).unwrap();
    let conf = home.join("watchdog.toml");
    std::fs::write(&conf, "[agents]\nclaude_code = false\n").unwrap();
    let s = home
        .cmd("oc-sessions")
        .args(["--config", conf.to_str().unwrap()])
        .run();
    s.ok();
    assert_eq!(
        s.records(),
        [
            json!({"kind": "source", "source": format!("codex:{}", home.join(".codex").display()),
                "reader": "codex", "found": ["default"], "version": null, "sessions": 0,
                "rollouts": 0})
        ]
    );
    // a transcript that is not JSON is a blind record naming it, never a silent all-clear
    let bad = home.join(".claude/projects/-p/0b7c6f1e-0000-4000-8000-000000000000.jsonl");
    std::fs::create_dir_all(bad.parent().unwrap()).unwrap();
    std::fs::write(&bad, "not json\n{\"type\":\"user\"}\n").unwrap();
    let s = home.cmd("oc-sessions").run();
    s.expect_code(2);
    assert_eq!(
        s.kind("blind"),
        [
            json!({"kind": "blind", "source": format!("claude-code:{}", home.join(".claude").display()),
                "reason": format!("{}:1: not JSON: expected ident at line 1 column 2", bad.display())}),
            json!({"kind": "blind", "source": format!("claude-code:{}", home.join(".claude").display()),
                "reason": format!("{}: no record names its session", bad.display())})
        ]
    );
}

/// Polls `oc-sessions` until the session in `dir` is listed with `status`; gives it back.
fn listed_as(home: &Home, dir: &Path, status: &str) -> Value {
    let t0 = std::time::Instant::now();
    loop {
        let s = home.cmd("oc-sessions").run();
        if let Some(x) = s
            .kind("session")
            .into_iter()
            .find(|x| x["directory"] == dir.to_str().unwrap() && x["status"] == status)
        {
            return x;
        }
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(60),
            "no {status} session in {}\n{}",
            dir.display(),
            s.story()
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

/// A process group this test started, killed at once (SIGKILL: nothing is cleaned up) when
/// asked or when the test ends.
struct Group(std::process::Child, bool);

impl Group {
    fn kill(&mut self) {
        let st = std::process::Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.0.id())])
            .status()
            .unwrap();
        assert!(st.success());
        self.0.wait().unwrap();
        self.1 = true;
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        if !self.1 {
            self.kill();
        }
    }
}

/// A session runs while its process does: Claude Code's `sessions/<pid>.json` with a live pid of
/// that start time, Codex's thread lock held open by a live process. Killed, each leaves its
/// file behind, and the session is then idle, its unanswered call failed, nothing in flight.
#[test]
fn a_running_agent_session_is_busy_and_after_sigkill_its_stale_file_or_lock_is_not_running() {
    use std::os::unix::process::CommandExt;
    let home = Home::new();
    agent_home(home.path());
    let model = AgentModel::start();
    let (cproj, xproj) = (
        make_project(&home.join("cslow")),
        make_project(&home.join("xslow")),
    );
    // Claude Code refuses a bare `sleep`; the tool's process outlives the agent killed (Claude
    // Code starts it in a session of its own), so it ends by itself soon after the test
    let sleep = "python3 -c 'import time; time.sleep(30)'";
    model.script(
        "cslow",
        &json!([{"tool": "Bash", "args": {"command": sleep, "description": "wait"}}]),
    );
    model.script(
        "xslow",
        &json!([{"tool": "exec_command", "args": {"cmd": sleep}}]),
    );
    for (proj, script, program) in [(&cproj, "cslow", "claude-code"), (&xproj, "xslow", "codex")] {
        let mut cmd = if program == "codex" {
            model.codex_cmd(home.path(), proj, script)
        } else {
            model.claude_cmd(home.path(), proj, script)
        };
        let mut child = Group(
            cmd.stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .process_group(0)
                .spawn()
                .unwrap(),
            false,
        );
        // listed busy, with the call in flight running, while the process runs
        let t0 = std::time::Instant::now();
        let (busy, c) = loop {
            let busy = listed_as(&home, proj, "busy");
            let c = home.cmd("oc-calls").stdin(format!("{busy}\n")).run();
            c.ok();
            if c.kind("call").iter().any(|k| k["args"]["command"] == sleep) {
                break (busy, c);
            }
            assert!(
                t0.elapsed() < std::time::Duration::from_secs(60),
                "{}",
                c.story()
            );
            std::thread::sleep(std::time::Duration::from_millis(200));
        };
        assert_eq!(busy["program"], program);
        let calls = c.kind("call");
        assert_eq!(calls.len(), 1, "{}", c.story());
        assert_eq!(calls[0]["status"], "running", "{}", c.story());
        assert_eq!(c.kind("activity")[0]["in_flight"], true);
        child.kill();

        // the file the killed process left is there, and names no running session
        let left: Vec<_> = if program == "codex" {
            std::fs::read_dir(home.join(".codex/thread-writer-locks"))
        } else {
            std::fs::read_dir(home.join(".claude/sessions"))
        }
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        // Codex's own `.coordination.lock` beside the threads' is not one
        .filter(|n| !n.starts_with('.') && (n.ends_with(".lock") || n.ends_with(".json")))
        .collect();
        assert_eq!(left.len(), 1, "{program}: {left:?}");
        let idle = listed_as(&home, proj, "idle");
        assert_eq!(idle["id"], busy["id"]);
        let s = home.cmd("oc-sessions").run();
        let c = home.cmd("oc-calls").stdin(s.stdout()).run();
        c.ok();
        let last = c
            .kind("call")
            .into_iter()
            .rfind(|k| k["session"] == idle["id"])
            .unwrap();
        assert_eq!(last["status"], "error", "{}", c.story());
        let act = c
            .kind("activity")
            .into_iter()
            .find(|a| a["session"] == idle["id"])
            .unwrap();
        assert_eq!(act["in_flight"], false);
        assert_eq!(act["running"], json!([]));
    }
}

/// Follow mode reads the other agents too: `oc-sessions --follow | oc-calls --follow |
/// progress-detect --follow` flags a looping `claude -p` and a looping `codex exec` while each
/// still runs (a loop of 14 calls a second apart: the verdict comes before the last call), and
/// the session reads idle once the process ended. Without it, a user running the follow service
/// (whose timer ticks exit at once) had no watchdog for either agent.
#[test]
fn follow_mode_flags_a_claude_code_and_a_codex_loop_while_they_run() {
    use std::io::BufRead;
    use std::sync::{Arc, Mutex};
    let home = Home::new();
    agent_home(home.path());
    let cfg = home.join(".config/oc-watchdog/watchdog.toml");
    std::fs::create_dir_all(cfg.parent().unwrap()).unwrap();
    std::fs::write(&cfg, "[follow]\npoll_ms = 200\nfull_every_secs = 60\n").unwrap();
    // each agent's directory exists before the follow starts (as on a machine where it is
    // installed): the first full read finds it
    std::fs::create_dir_all(home.join(".claude/projects")).unwrap();
    std::fs::create_dir_all(home.join(".codex/sessions")).unwrap();
    let model = AgentModel::start();
    let slow = format!("sleep 1; {TEST}");
    model.script(
        "cfollow",
        &Value::Array(vec![
            json!({"tool": "Bash", "args": {"command": slow, "description": "run"}});
            14
        ]),
    );
    model.script(
        "xfollow",
        &Value::Array(vec![
            json!({"tool": "exec_command", "args": {"cmd": slow}});
            14
        ]),
    );
    let err = home.join("stderr.txt");
    let file = || {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&err)
            .unwrap()
    };
    let mut sessions = home
        .cmd("oc-sessions")
        .args(["--follow", "--no-discover", "--no-db"])
        .spawn_from(std::process::Stdio::null(), file());
    let mut calls = home.cmd("oc-calls").args(["--follow"]).spawn_from(
        std::process::Stdio::from(sessions.stdout.take().unwrap()),
        file(),
    );
    let mut detect = home.cmd("progress-detect").args(["--follow"]).spawn_from(
        std::process::Stdio::from(calls.stdout.take().unwrap()),
        file(),
    );
    let lines: Arc<Mutex<Vec<Value>>> = Arc::default();
    let sink = lines.clone();
    let out = detect.stdout.take().unwrap();
    std::thread::spawn(move || {
        for l in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            sink.lock().unwrap().push(serde_json::from_str(&l).unwrap());
        }
    });
    let verdict = |program: &str, pred: &dyn Fn(&Value) -> bool| {
        lines
            .lock()
            .unwrap()
            .iter()
            .rev()
            .find(|v| v["kind"] == "verdict" && v["program"] == program && pred(v))
            .cloned()
    };
    for (script, program) in [("cfollow", "claude-code"), ("xfollow", "codex")] {
        let proj = make_project(&home.join(script));
        let mut agent = if program == "codex" {
            model.codex_cmd(home.path(), &proj, script)
        } else {
            model.claude_cmd(home.path(), &proj, script)
        }
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
        let t0 = std::time::Instant::now();
        let flagged = loop {
            if let Some(v) = verdict(program, &|v| v["flagged"] == true) {
                break v;
            }
            assert!(
                agent.try_wait().unwrap().is_none(),
                "{program}: ended before any verdict flagged it\n{}\n{}",
                lines
                    .lock()
                    .unwrap()
                    .iter()
                    .map(Value::to_string)
                    .collect::<Vec<_>>()
                    .join("\n"),
                std::fs::read_to_string(&err).unwrap_or_default()
            );
            assert!(t0.elapsed() < std::time::Duration::from_secs(120));
            std::thread::sleep(std::time::Duration::from_millis(100));
        };
        // told while the loop still ran: the agent had calls left to make
        assert!(agent.try_wait().unwrap().is_none(), "{program}");
        assert!(flagged["calls"].as_u64().unwrap() < 14, "{flagged}");
        assert_eq!(flagged["signals"]["top_target"], format!("bash {slow}"));
        assert!(agent.wait().unwrap().success());
        // its end is read: the session is idle with all 14 calls
        let t1 = std::time::Instant::now();
        while verdict(program, &|v| {
            v["calls"] == 14 && v["liveness"]["status"] == "idle"
        })
        .is_none()
        {
            assert!(
                t1.elapsed() < std::time::Duration::from_secs(60),
                "{program}: its end not read\n{}",
                std::fs::read_to_string(&err).unwrap_or_default()
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
    for mut c in [sessions, calls, detect] {
        let _ = c.kill();
        let _ = c.wait();
    }
    assert_eq!(std::fs::read_to_string(&err).unwrap_or_default(), "");
}

/// Issue 41, done: with `[alert] notify_done = true`, a real `claude -p` and a real `codex exec`
/// that finished their work are each one done notice naming the program, the project and what
/// the turn landed; the two that looped are none (their loops are the news).
#[test]
fn a_finished_claude_p_and_codex_exec_are_done_notices_and_their_loops_are_not() {
    let home = Home::new();
    agent_home(home.path());
    let conf = home.join(".config/oc-watchdog");
    std::fs::create_dir_all(&conf).unwrap();
    std::fs::write(conf.join("watchdog.toml"), "[alert]\nnotify_done = true\n").unwrap();
    let model = AgentModel::start();
    let [cloop, cwork, xloop, xwork] =
        loops_and_healthy_sessions(&model, home.path(), |n| make_project(&home.join(n)));
    // one tick, as deploy/oc-watchdog-tick runs it
    let mut out = String::new();
    let mut r = None;
    for (bin, args) in [
        ("oc-sessions", vec![]),
        ("oc-calls", vec![]),
        ("wd-store", vec!["calls"]),
        ("progress-detect", vec![]),
        ("wd-store", vec!["tick"]),
        ("wd-alert", vec![]),
    ] {
        let run = home.cmd(bin).args(args).stdin(out.clone()).run();
        run.ok();
        out = run.stdout();
        r = Some(run);
    }
    let r = r.unwrap();
    let events: Vec<Value> = r
        .stdout()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let done: Vec<(String, String)> = events
        .iter()
        .filter(|e| e["alert"] == "done")
        .map(|e| {
            (
                e["title"].as_str().unwrap().to_string(),
                e["summary"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let in_proj = |e: &(String, String), p: &Path| {
        e.1.contains(&format!(
            " in ~/{}:",
            p.file_name().unwrap().to_str().unwrap()
        ))
    };
    assert_eq!(done.len(), 2, "{}", r.story());
    // what each turn landed: the edit and the commit
    let landed = ": its turn ended; it landed 2 changes: edit src/calc.py, bash git add -A && git commit -qm 'fix mean'";
    for (p, title, place) in [
        (
            &cwork,
            "Claude Code session finished its work",
            " in ~/cwork",
        ),
        (
            &xwork,
            "Codex session finished its work",
            " \"SCRIPT:xwork fix the tests\" in ~/xwork",
        ),
    ] {
        let told = done
            .iter()
            .find(|e| in_proj(e, p))
            .unwrap_or_else(|| panic!("{done:?}"));
        assert_eq!(told.0, title);
        assert!(told.1.ends_with(&format!("{place}{landed}")), "{}", told.1);
    }
    for p in [&cloop, &xloop] {
        assert!(
            !done.iter().any(|e| in_proj(e, p)),
            "{} told done",
            p.display()
        );
    }
}
