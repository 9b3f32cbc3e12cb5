//! `wd-store stop` and the `[stop]` policy for Claude Code (issue 39): the real `claude -p`
//! (the pinned version) looping through the scripted Anthropic-stream model, stopped through the
//! PreToolUse hook that `deploy/install --with-stop-plugin` merges into `~/.claude/settings.json`.
//! What the session did after the stop is read from Claude Code's own transcript.

use crate::support::agents::{make_project, AgentModel, CLAUDE_CODE_VERSION};
use crate::support::{Home, Run};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

const TEST: &str = "python3 tests/test_calc.py";

/// A user's own settings, with a hook of their own, written as a person would (two-space
/// indent, keys in their order): what install and uninstall must give back byte for byte.
const USERS: &str = "{\n  \"theme\": \"dark\",\n  \"hooks\": {\n    \"PreToolUse\": [\n      {\"matcher\": \"Bash\", \"hooks\": [{\"type\": \"command\", \"command\": \"true\"}]}\n    ]\n  },\n  \"cleanupPeriodDays\": 30\n}\n";

struct Rig {
    home: Home,
    model: AgentModel,
    kids: Vec<Child>,
}

impl Drop for Rig {
    fn drop(&mut self) {
        for k in &mut self.kids {
            let _ = k.kill();
            let _ = k.wait();
        }
    }
}

impl Rig {
    fn new() -> Rig {
        let home = Home::new();
        std::fs::write(
            home.join(".gitconfig"),
            "[user]\n\temail = sim@example.invalid\n\tname = sim\n",
        )
        .unwrap();
        std::fs::create_dir_all(home.join(".claude")).unwrap();
        std::fs::write(home.join(".claude/settings.json"), USERS).unwrap();
        let model = AgentModel::start();
        let bash = json!({"tool": "Bash", "args": {"command": TEST, "description": "run"}});
        model.script("cloop", &Value::Array(vec![bash; 300]));
        model.script("cdone", &json!([{"text": "Resumed and done."}]));
        Rig {
            home,
            model,
            kids: Vec::new(),
        }
    }

    fn install(&self, args: &[&str]) -> String {
        crate::support::deploy_install(self.home.path(), args)
    }

    fn install_with_hook(&self) {
        let bins = assert_cmd::cargo::cargo_bin("wd-store")
            .parent()
            .unwrap()
            .to_path_buf();
        let said = self.install(&["--from", bins.to_str().unwrap(), "--with-stop-plugin"]);
        assert!(said.contains("stop hook added to"), "{said}");
    }

    /// A looping `claude -p` in a new project; its transcript once it made `calls` tool calls.
    fn loop_in(&mut self, name: &str, calls: usize) -> (PathBuf, usize) {
        let proj = make_project(&self.home.join(name));
        let child = self
            .model
            .claude_cmd(self.home.path(), &proj, "cloop")
            .stdout(std::fs::File::create(self.home.join(&format!("{name}.out"))).unwrap())
            .stderr(std::fs::File::create(self.home.join(&format!("{name}.err"))).unwrap())
            .spawn()
            .expect("claude");
        self.kids.push(child);
        let t0 = Instant::now();
        loop {
            if let Some(t) = transcript_of(self.home.path(), &proj) {
                let n = tool_uses(&t).len();
                if n >= calls {
                    return (t, self.kids.len() - 1);
                }
            }
            assert!(t0.elapsed() < Duration::from_secs(90), "no loop in {name}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn wait_exit(&mut self, kid: usize) -> std::process::ExitStatus {
        let t0 = Instant::now();
        loop {
            if let Some(st) = self.kids[kid].try_wait().unwrap() {
                return st;
            }
            assert!(t0.elapsed() < Duration::from_secs(30), "claude -p went on");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// The main transcript of the session Claude Code runs in `proj`.
fn transcript_of(home: &Path, proj: &Path) -> Option<PathBuf> {
    let dir = home.join(".claude/projects");
    for d in std::fs::read_dir(dir).ok()?.flatten() {
        for f in std::fs::read_dir(d.path()).ok()?.flatten() {
            let p = f.path();
            if p.extension().is_some_and(|x| x == "jsonl")
                && std::fs::read_to_string(&p)
                    .is_ok_and(|t| t.contains(&format!("\"cwd\":\"{}\"", proj.display())))
            {
                return Some(p);
            }
        }
    }
    None
}

fn records(t: &Path) -> Vec<Value> {
    std::fs::read_to_string(t)
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// The ids of the tool calls in a transcript, in order.
fn tool_uses(t: &Path) -> Vec<String> {
    records(t)
        .iter()
        .filter(|r| r["type"] == "assistant")
        .flat_map(|r| {
            r["message"]["content"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .filter(|c| c["type"] == "tool_use")
        .map(|c| c["id"].as_str().unwrap().to_string())
        .collect()
}

/// The calls of a transcript that started at or after `t` (ms) but the one refused: those the
/// stop counts as made after its request (a call that started while `wd-store stop` looked the
/// session up, before its request was there, ran, on a loaded machine).
fn calls_from(tr: &Path, t: i64, refused: &str) -> i64 {
    records(tr)
        .iter()
        .filter(|r| r["type"] == "assistant")
        .filter(|r| {
            let at: jiff::Timestamp = r["timestamp"].as_str().unwrap().parse().unwrap();
            at.as_millisecond() >= t
        })
        .flat_map(|r| {
            r["message"]["content"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .filter(|c| c["type"] == "tool_use" && c["id"] != refused)
        .count() as i64
}

fn session_of(t: &Path) -> String {
    t.file_stem().unwrap().to_str().unwrap().to_string()
}

/// The checks of a carried-out stop, in the transcript: the call refused is the last one, its
/// result is the hook's refusal, and the hook ended the turn; every earlier call ran (the
/// failing test's `Exit code 1`: the hook let it through).
fn stopped_in_transcript(t: &Path, refused: &str) {
    let recs = records(t);
    let calls = tool_uses(t);
    assert_eq!(calls.last().map(String::as_str), Some(refused), "{calls:?}");
    let result = |id: &str| {
        recs.iter()
            .flat_map(|r| {
                r["message"]["content"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
            })
            .find(|c| c["type"] == "tool_result" && c["tool_use_id"] == id)
            .unwrap_or_else(|| panic!("no result of {id}"))
    };
    let r = result(refused);
    assert_eq!(r["is_error"], true);
    let text = r["content"].as_str().unwrap_or_default();
    assert!(text.starts_with("PreToolUse:Bash hook error: "), "{text}");
    for c in &calls[..calls.len() - 1] {
        let text = result(c)["content"].to_string();
        assert!(text.contains("Exit code 1"), "{c}: {text}");
    }
    let halted = recs
        .iter()
        .position(|r| r["attachment"]["type"] == "hook_stopped_continuation")
        .expect("the hook ended the turn");
    assert_eq!(recs[halted]["attachment"]["toolUseID"], refused);
    assert!(
        !recs[halted..].iter().any(|r| r["type"] == "assistant"),
        "the model was asked again after the stop"
    );
}

fn stop(rig: &Rig, session: &str) -> Run {
    rig.home
        .cmd("wd-store")
        .args(["stop", session, "--wait", "30s"])
        .run()
}

/// The operator's stop of a looping `claude -p`: refused with what to do while the hook is not
/// installed; once it is, the next call refused, the turn ended, `claude -p` exits 0 printing
/// an empty line, and the session resumes as the advice says. The hook let every call before run, even
/// with no stop directory; uninstall gives the user's settings back byte for byte.
#[test]
fn a_looping_claude_p_is_stopped_through_its_hook_and_resumes_as_its_advice_says() {
    let out = Command::new("claude").arg("--version").output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).starts_with(CLAUDE_CODE_VERSION));
    let mut rig = Rig::new();
    std::fs::create_dir_all(rig.home.join(".local/state/oc-watchdog")).unwrap();

    // no hook: refused, saying how to stop it by hand and how to install the hook
    let (t, kid) = rig.loop_in("nohook", 2);
    let r = stop(&rig, &session_of(&t));
    r.expect_code(2);
    let settings = rig.home.join(".claude/settings.json");
    assert!(
        r.stderr().contains(&format!(
            "can be stopped only through the watchdog's hook, which is not in {}: Ctrl-C in the terminal of its `claude -p`, Esc in its interactive session, or install the hook (deploy/install --with-stop-plugin)",
            settings.display()
        )),
        "{}",
        r.story()
    );
    rig.kids[kid].kill().unwrap();
    rig.kids[kid].wait().unwrap();

    rig.install_with_hook();
    let merged: Value = serde_json::from_slice(&std::fs::read(&settings).unwrap()).unwrap();
    let pre = merged["hooks"]["PreToolUse"].as_array().unwrap();
    assert_eq!(pre.len(), 2);
    assert_eq!(pre[0]["hooks"][0]["command"], "true");
    assert_eq!(
        pre[1]["hooks"][0]["command"],
        rig.home
            .join(".local/bin/wd-claude-hook")
            .display()
            .to_string()
    );
    assert_eq!(
        (
            merged["theme"].as_str(),
            merged["cleanupPeriodDays"].as_i64()
        ),
        (Some("dark"), Some(30))
    );
    // no stop directory at all: the hook lets every call run
    std::fs::remove_dir_all(rig.home.join(".local/state/oc-watchdog/stop")).unwrap();

    let (t, kid) = rig.loop_in("proj", 4);
    let session = session_of(&t);
    let t0 = Instant::now();
    let r = stop(&rig, &session);
    let took = t0.elapsed();
    r.ok();
    let o = &r.kind("stop")[0];
    assert_eq!(o["status"], "stopped", "{}", r.story());
    assert_eq!(o["via"], "hook");
    let refused = o["refused_call"].as_str().unwrap().to_string();
    assert!(refused.starts_with("toolu_"), "{refused}");
    assert!(
        r.stderr()
            .contains("its `claude -p` ends, exit 0, printing an empty line in text mode"),
        "{}",
        r.story()
    );
    assert_eq!(
        o["resume"],
        format!("`claude --resume {session}` (interactive) or `claude -p --resume {session} \"continue\"`, in its project")
    );
    let st = rig.wait_exit(kid);
    assert!(st.success(), "{st}");
    assert_eq!(
        std::fs::read_to_string(rig.home.join("proj.out")).unwrap(),
        "\n"
    );
    stopped_in_transcript(&t, &refused);
    assert_eq!(
        o["calls_after_request"],
        calls_from(&t, o["requested"].as_i64().unwrap(), &refused)
    );
    // the request is gone: the session's next turn runs
    let left: Vec<_> = std::fs::read_dir(rig.home.join(".local/state/oc-watchdog/stop"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(left.is_empty(), "{left:?}");
    eprintln!(
        "stop latency: {} ms, calls before: {}",
        took.as_millis(),
        tool_uses(&t).len() - 1
    );

    // once per turn
    let again = stop(&rig, &session);
    again.ok();
    assert_eq!(again.kind("stop")[0]["status"], "already");

    // resumed as advised (the -p form, in its project, with a message the model answers)
    let mut resume = rig
        .model
        .claude_cmd(rig.home.path(), &rig.home.join("proj"), "cdone");
    resume.args(["--resume", &session]);
    let out = resume.output().unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "Resumed and done."
    );

    rig.install(&["--uninstall"]);
    assert_eq!(std::fs::read_to_string(&settings).unwrap(), USERS);
}

/// The hook on its own, as Claude Code runs it: garbage or no request lets the call run (exit
/// 0, nothing said), with or without a state directory.
#[test]
fn the_hook_fails_open() {
    let home = Home::new();
    let input = json!({"session_id": "0b7c6f1e-1111-4000-8000-00000000abcd",
        "hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_use_id": "toolu_1",
        "tool_input": {"command": "ls"}, "cwd": "/tmp", "transcript_path": "/tmp/x.jsonl"})
    .to_string();
    for stdin in [input.as_str(), "", "\u{0}not json{"] {
        let r = home.cmd("wd-claude-hook").stdin(stdin).run();
        r.ok();
        assert_eq!(r.stdout(), "");
    }
    // a request there, but the directory others may write in: ignored
    let dir = home.join(".local/state/oc-watchdog/stop");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("0b7c6f1e-1111-4000-8000-00000000abcd.json"),
        json!({"id": "x", "session": "0b7c6f1e-1111-4000-8000-00000000abcd",
               "expires": i64::MAX, "why": "w"})
        .to_string(),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let r = home.cmd("wd-claude-hook").stdin(input.as_str()).run();
    r.ok();
    assert_eq!(r.stdout(), "");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let r = home.cmd("wd-claude-hook").stdin(input.as_str()).run();
    r.ok();
    let a: Value = serde_json::from_str(&r.stdout()).unwrap();
    assert_eq!(
        (
            a["continue"].as_bool(),
            a["hookSpecificOutput"]["permissionDecision"].as_str()
        ),
        (Some(false), Some("deny"))
    );
}

/// The `[stop]` policy stops a Claude Code loop once its calls since the trigger reach the cap,
/// through the hook, and the next tick resolves the loop as stopped.
#[test]
fn the_policy_stops_a_looping_claude_p_at_its_calls_cap() {
    let mut rig = Rig::new();
    rig.install_with_hook();
    std::fs::write(
        rig.home.join(".config/oc-watchdog/watchdog.toml"),
        "[stop]\nafter_calls = 3\nwait_secs = 30\n",
    )
    .unwrap();
    let (t, kid) = rig.loop_in("proj", 20);
    let session = session_of(&t);
    let first = tick(&rig);
    assert_eq!(open_loops(&rig, &session), 1, "{}", first.story());
    let n = tool_uses(&t).len();
    let t0 = Instant::now();
    while tool_uses(&t).len() < n + 4 {
        assert!(t0.elapsed() < Duration::from_secs(60));
        std::thread::sleep(Duration::from_millis(100));
    }
    let second = tick(&rig);
    assert!(
        second
            .stderr()
            .contains(&format!("stop session={session} episode=")),
        "{}",
        second.story()
    );
    let st = rig.wait_exit(kid);
    assert!(st.success());
    let db =
        rusqlite::Connection::open(rig.home.join(".local/state/oc-watchdog/watchdog.db")).unwrap();
    let (status, via, reason, after, requested): (String, String, String, i64, i64) = db
        .query_row(
            "SELECT status, via, reason, calls_after_request, t FROM stops WHERE session = ?1",
            [&session],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
        )
        .unwrap();
    assert_eq!(
        (status.as_str(), via.as_str(), reason.as_str()),
        ("stopped", "hook", "calls_cap")
    );
    let refused = tool_uses(&t).last().unwrap().clone();
    stopped_in_transcript(&t, &refused);
    assert_eq!(after, calls_from(&t, requested, &refused));
    tick(&rig);
    let (state, why): (String, Option<String>) = db
        .query_row(
            "SELECT state, reason FROM episodes WHERE root = ?1 AND kind = 'loop'",
            [&session],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(
        (state.as_str(), why.as_deref()),
        ("resolved", Some("stopped"))
    );
}

fn open_loops(rig: &Rig, session: &str) -> i64 {
    rusqlite::Connection::open(rig.home.join(".local/state/oc-watchdog/watchdog.db"))
        .unwrap()
        .query_row(
            "SELECT count(*) FROM episodes WHERE root = ?1 AND kind = 'loop' AND state = 'open'",
            [session],
            |r| r.get(0),
        )
        .unwrap()
}

/// One tick of the pipeline, as the tick script runs it.
fn tick(rig: &Rig) -> Run {
    let sessions = rig.home.cmd("oc-sessions").args(["--since", "1h"]).run();
    sessions.ok();
    let calls = rig.home.cmd("oc-calls").stdin(sessions.stdout()).run();
    calls.ok();
    let verdicts = rig.home.cmd("progress-detect").stdin(calls.stdout()).run();
    verdicts.ok();
    let tick = rig
        .home
        .cmd("wd-store")
        .args(["tick"])
        .stdin(verdicts.stdout())
        .run();
    tick.ok();
    let r = rig.home.cmd("wd-alert").stdin(tick.stdout()).run();
    r.ok();
    r
}

/// A subagent's loop stopped by its id (`agent-<id>`, as the reader names it). Claude Code
/// 2.1.332 runs the subagent in the background: the request is for its session, whose calls the
/// subagent's carry, so the subagent's next call is refused and its turn ends; the session gets
/// the subagent's end as a task notification, answers it with text and makes no call.
#[test]
fn a_looping_subagent_is_stopped_with_its_session() {
    let mut rig = Rig::new();
    rig.install_with_hook();
    let grep = json!({"tool": "Bash", "args": {"command": "grep -n mean src/calc.py", "description": "grep"}});
    rig.model.script(
        "lead",
        &json!([
            {"tool": "Agent", "args": {"description": "Search", "prompt": "SCRIPT:sloop find mean",
                                       "subagent_type": "general-purpose"}},
            {"text": "Delegated."}
        ]),
    );
    rig.model.script("sloop", &Value::Array(vec![grep; 300]));
    let proj = make_project(&rig.home.join("lead"));
    let child = rig
        .model
        .claude_cmd(rig.home.path(), &proj, "lead")
        .stdout(std::fs::File::create(rig.home.join("lead.out")).unwrap())
        .stderr(std::fs::File::create(rig.home.join("lead.err")).unwrap())
        .spawn()
        .unwrap();
    rig.kids.push(child);
    let t0 = Instant::now();
    let (main, sub) = loop {
        let found = transcript_of(rig.home.path(), &proj).and_then(|t| {
            let subs = t.with_extension("").join("subagents");
            let f = std::fs::read_dir(subs)
                .ok()?
                .flatten()
                .map(|e| e.path())
                .find(|p| p.extension().is_some_and(|x| x == "jsonl"))?;
            (tool_uses(&f).len() >= 4).then_some((t, f))
        });
        if let Some(f) = found {
            break f;
        }
        assert!(t0.elapsed() < Duration::from_secs(90), "no subagent loop");
        std::thread::sleep(Duration::from_millis(100));
    };
    let agent = sub.file_stem().unwrap().to_str().unwrap().to_string();
    assert!(agent.starts_with("agent-"), "{agent}");
    let main_calls = tool_uses(&main);
    assert_eq!(main_calls.len(), 1, "{main_calls:?}");
    // what the operator is shown: stop the subagent, resume its session (no session answers
    // to the subagent's id)
    let session = session_of(&main);
    let t0 = Instant::now();
    while tick(&rig).records().is_empty() {
        assert!(t0.elapsed() < Duration::from_secs(60), "no alert");
        std::thread::sleep(Duration::from_millis(200));
    }
    rig.home.cmd("wd-store").args(["report"]).run().ok();
    let page =
        std::fs::read_to_string(rig.home.join(".local/state/oc-watchdog/report.html")).unwrap();
    assert!(
        page.contains(&format!(
            "<code>wd-store stop {agent}</code> (its hook refuses"
        )) && page.contains(&format!(
            "it stays resumable: <code>claude --resume {session}</code> in its project"
        )),
        "the page's advice"
    );
    let r = stop(&rig, &agent);
    r.ok();
    let o = &r.kind("stop")[0];
    assert_eq!(
        (o["status"].as_str(), o["via"].as_str()),
        (Some("stopped"), Some("hook")),
        "{}",
        r.story()
    );
    let refused = o["refused_call"].as_str().unwrap();
    // resumed by its session's id, not the subagent's
    assert_eq!(o["session"], session.as_str());
    assert!(
        r.stderr().contains(&format!(
            "stopped Claude Code session {session} (for its subagent {agent}) through the hook"
        )),
        "{}",
        r.story()
    );
    assert!(o["resume"]
        .as_str()
        .unwrap()
        .starts_with(&format!("`claude --resume {session}`")));
    let st = rig.wait_exit(rig.kids.len() - 1);
    assert!(st.success());
    let sub_calls = tool_uses(&sub);
    assert_eq!(sub_calls.last().map(String::as_str), Some(refused));
    assert_eq!(
        o["calls_after_request"],
        calls_from(&sub, o["requested"].as_i64().unwrap(), refused)
    );
    assert!(records(&sub)
        .iter()
        .any(|x| x["attachment"]["type"] == "hook_stopped_continuation"));
    assert_eq!(tool_uses(&main), main_calls);
}
