//! `wd-store stop` and the `[stop]` policy for Codex CLI threads (issue 39), against the real
//! codex 0.171.0 driven by the scripted OpenAI Responses stream, every call really run: a
//! looping `codex exec` stopped by SIGINT to exactly its native process; a thread running inside
//! the app-server daemon (started through its control socket, as the TUI starts one) stopped by
//! `turn/interrupt`; a stale lock never signalled. What the agent did after the stop is read
//! from its own rollout.

use crate::support::agents::{make_project, AgentModel, CODEX_SUBAGENT_MODEL, CODEX_VERSION};
use crate::support::{Home, Run};
use serde_json::{json, Value};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// The failing test, run again and again: what a looping agent does.
const TEST: &str = "python3 tests/test_calc.py";

/// A HOME shared by Codex and the watchdog, a git identity for the agent, the model, a project.
struct Rig {
    home: Home,
    model: AgentModel,
    proj: PathBuf,
}

impl Rig {
    fn new(script: &str, calls: usize) -> Rig {
        let v = std::process::Command::new("codex")
            .arg("--version")
            .output()
            .expect("codex (tests/setup installs it)");
        assert!(String::from_utf8_lossy(&v.stdout).contains(CODEX_VERSION));
        let home = Home::new();
        std::fs::write(
            home.join(".gitconfig"),
            "[user]\n\temail = sim@example.invalid\n\tname = sim\n",
        )
        .unwrap();
        let model = AgentModel::start();
        model.script(
            script,
            &Value::Array(vec![
                json!({"tool": "exec_command", "args": {"cmd": TEST}});
                calls
            ]),
        );
        let proj = make_project(&home.join("proj"));
        Rig { home, model, proj }
    }

    /// `codex exec` of the script, in a process group of its own (killed when the test ends).
    fn exec(&self, script: &str) -> Group {
        Group(
            self.model
                .codex_cmd(self.home.path(), &self.proj, script)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .process_group(0)
                .spawn()
                .unwrap(),
        )
    }

    /// The thread of the project's latest rollout, once one has `n` calls: its id and rollout.
    fn thread_with_calls(&self, n: usize) -> (String, PathBuf) {
        let t0 = Instant::now();
        loop {
            if let Some(f) = rollouts(&self.home.join(".codex/sessions")).pop() {
                if calls_in(&f).len() >= n {
                    let name = f.file_stem().unwrap().to_str().unwrap();
                    return (name[name.len() - 36..].to_string(), f);
                }
            }
            assert!(
                t0.elapsed() < Duration::from_secs(90),
                "no rollout with {n} calls"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn wait_calls(&self, rollout: &Path, n: usize) {
        let t0 = Instant::now();
        while calls_in(rollout).len() < n {
            assert!(
                t0.elapsed() < Duration::from_secs(90),
                "fewer than {n} calls"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// One tick of the pipeline, as the tick script runs it.
    fn tick(&self) -> Run {
        let s = self.home.cmd("oc-sessions").args(["--since", "1h"]).run();
        s.ok();
        let c = self.home.cmd("oc-calls").stdin(s.stdout()).run();
        c.ok();
        let v = self.home.cmd("progress-detect").stdin(c.stdout()).run();
        v.ok();
        let t = self
            .home
            .cmd("wd-store")
            .args(["tick"])
            .stdin(v.stdout())
            .run();
        t.ok();
        let a = self.home.cmd("wd-alert").stdin(t.stdout()).run();
        a.ok();
        a
    }

    fn stops(&self) -> i64 {
        let c = rusqlite::Connection::open(self.home.join(".local/state/oc-watchdog/watchdog.db"))
            .unwrap();
        c.query_row("SELECT count(*) FROM stops", [], |r| r.get(0))
            .unwrap_or(0)
    }
}

/// A process group this test started, killed (SIGKILL) when asked or when the test ends.
struct Group(Child);

impl Group {
    fn kill(&mut self) {
        let _ = std::process::Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.0.id())])
            .status();
        let _ = self.0.wait();
    }

    /// Its exit code, waited for a bounded time.
    fn exit(&mut self) -> Option<i32> {
        let t0 = Instant::now();
        loop {
            if let Some(st) = self.0.try_wait().unwrap() {
                return st.code();
            }
            assert!(t0.elapsed() < Duration::from_secs(20), "it did not exit");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        if self.0.try_wait().ok().flatten().is_none() {
            self.kill();
        }
    }
}

/// The rollouts under `dir`, oldest first by name (their names begin with their time).
fn rollouts(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                todo.push(p);
            } else if p.extension().is_some_and(|x| x == "jsonl") {
                out.push(p);
            }
        }
    }
    out.sort_by_key(|p| p.file_name().unwrap().to_owned());
    out
}

fn records(rollout: &Path) -> Vec<Value> {
    std::fs::read_to_string(rollout)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn ms(v: &Value) -> i64 {
    let t: jiff::Timestamp = v["timestamp"].as_str().unwrap().parse().unwrap();
    t.as_millisecond()
}

/// When each tool call of the rollout started.
fn calls_in(rollout: &Path) -> Vec<i64> {
    records(rollout)
        .iter()
        .filter(|r| r["type"] == "response_item" && r["payload"]["type"] == "function_call")
        .map(ms)
        .collect()
}

/// The rollout's turn events, in order (`task_started`, `turn_aborted`, `task_complete`).
fn turn_events(rollout: &Path) -> Vec<String> {
    records(rollout)
        .iter()
        .filter(|r| r["type"] == "event_msg")
        .filter_map(|r| r["payload"]["type"].as_str())
        .filter(|t| matches!(*t, "task_started" | "turn_aborted" | "task_complete"))
        .map(String::from)
        .collect()
}

/// The one `stop` record of a carried-out stop, checked the same for every way.
#[track_caller]
fn stopped(r: &Run, id: &str, via: &str, rollout: &Path) -> Value {
    r.ok();
    let recs = r.kind("stop");
    assert_eq!(recs.len(), 1, "{}", r.story());
    let o = recs[0].clone();
    assert_eq!(
        (
            o["session"].as_str(),
            o["status"].as_str(),
            o["via"].as_str()
        ),
        (Some(id), Some("stopped"), Some(via)),
        "{}",
        r.story()
    );
    let (requested, at) = (
        o["requested"].as_i64().unwrap(),
        o["stopped"].as_i64().unwrap(),
    );
    eprintln!(
        "stop figures: codex {via}: {} call(s) from the request to the stop, {} ms",
        o["calls_after_request"],
        at - requested
    );
    // the turn ended as its user's Ctrl-C or Esc ends it, and no call started after the stop
    assert_eq!(
        turn_events(rollout).last().map(String::as_str),
        Some("turn_aborted")
    );
    let late: Vec<i64> = calls_in(rollout).into_iter().filter(|&t| t > at).collect();
    assert_eq!(late, Vec::<i64>::new(), "calls after the stop");
    o
}

/// A looping `codex exec`, flagged, stopped by `wd-store stop`: SIGINT to the native process
/// only (the node wrapper in front of it is left to exit with it), the turn aborted with no
/// call after, exit status 1, the loop resolved "stopped" saying how to resume; the advised
/// `codex exec resume ID "continue"` then takes the thread up again to its end.
#[test]
fn a_looping_codex_exec_is_stopped_by_sigint_to_its_own_process_and_resumes_as_advised() {
    let rig = Rig::new("xloop", 40);
    let mut agent = rig.exec("xloop");
    let (id, rollout) = rig.thread_with_calls(10);
    let t = rig.tick();
    assert!(
        t.stderr()
            .contains(&format!("dedup=loop:{id} state=trigger")),
        "{}",
        t.story()
    );
    let r = rig.home.cmd("wd-store").args(["stop", &id]).run();
    let o = stopped(&r, &id, "sigint", &rollout);
    assert_eq!(o["episode"], "episode:1");
    assert_ne!(o["pid"], agent.0.id(), "the node wrapper was signalled");
    assert_eq!(
        o["user_sees"],
        "codex exec prints \"turn interrupted\" and exits with status 1, as on Ctrl-C"
    );
    let resume = format!("codex exec resume {id} \"continue\"");
    assert_eq!(
        o["resume"],
        format!("`{resume}` in its project, or `codex resume {id}` (the TUI)")
    );
    assert!(
        r.stderr().starts_with(&format!(
            "wd-store: stopped Codex thread {id} by SIGINT to its codex exec (process {}), ",
            o["pid"]
        )),
        "{}",
        r.story()
    );
    assert_eq!(agent.exit(), Some(1));

    // the next tick resolves the loop as stopped, saying who, how and how to resume
    let t = rig.tick();
    let resolve = t
        .stderr()
        .lines()
        .find(|l| l.contains(&format!("dedup=loop:{id} state=resolve")))
        .unwrap_or_else(|| panic!("{}", t.story()))
        .to_string();
    assert!(resolve.contains("reason=stopped"), "{resolve}");
    let alerts = rig
        .home
        .cmd("wd-store")
        .args(["alerts", "--since", "1h"])
        .run();
    let ep = &alerts.kind("episode")[0];
    assert_eq!(
        ep["stop"],
        format!(
            "session {id} stopped by the operator (wd-store stop) via sigint, {} call(s) after the request; resume with `{resume}` in its project, or `codex resume {id}` (the TUI)",
            o["calls_after_request"]
        ),
        "{ep}"
    );
    // asked again for the same turn: nothing done
    let again = rig.home.cmd("wd-store").args(["stop", &id]).run();
    again.ok();
    assert_eq!(
        again.kind("stop")[0]["status"],
        "already",
        "{}",
        again.story()
    );

    // the advice, run as printed, takes the thread up again and runs it to its end
    let words = shell_words(&resume);
    let out = rig
        .model
        .codex_with(rig.home.path(), &rig.proj)
        .args(&words[1..])
        .output()
        .unwrap();
    assert!(out.status.success(), "{resume}: {out:?}");
    assert_eq!(
        turn_events(&rollout),
        [
            "task_started",
            "turn_aborted",
            "task_started",
            "task_complete"
        ]
    );
    assert_eq!(calls_in(&rollout).len(), 40);
    // and, its turn over, there is nothing to stop
    let idle = rig.home.cmd("wd-store").args(["stop", &id]).run();
    idle.expect_code(2);
    assert_eq!(
        idle.stderr(),
        format!("wd-store: stop: Codex thread {id} runs in no process: no live process holds its lock, its last turn has ended, nothing to stop\n")
    );
}

/// A command as a shell reads it (the advice quotes only with double quotes and no escapes).
fn shell_words(cmd: &str) -> Vec<String> {
    let mut out = Vec::new();
    let (mut cur, mut quoted, mut any) = (String::new(), false, false);
    for c in cmd.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                any = true;
            }
            ' ' if !quoted => {
                if any || !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
                any = false;
            }
            c => cur.push(c),
        }
    }
    if any || !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// The `[stop]` policy stops a looping `codex exec` once its calls since the trigger pass the
/// cap, and the episode resolves as stopped by the watchdog.
#[test]
fn the_policy_stops_a_looping_codex_exec_past_its_calls_cap() {
    let rig = Rig::new("xcap", 60);
    let conf = rig.home.join(".config/oc-watchdog/watchdog.toml");
    std::fs::create_dir_all(conf.parent().unwrap()).unwrap();
    std::fs::write(&conf, "[stop]\nafter_calls = 3\n").unwrap();
    let mut agent = rig.exec("xcap");
    let (id, rollout) = rig.thread_with_calls(10);
    let t = rig.tick();
    assert!(
        t.stderr()
            .contains(&format!("dedup=loop:{id} state=trigger")),
        "{}",
        t.story()
    );
    let n = calls_in(&rollout).len();
    rig.wait_calls(&rollout, n + 4);
    let t = rig.tick();
    let said = t
        .stderr()
        .lines()
        .find(|l| l.starts_with(&format!("oc-watchdog: stop session={id} ")))
        .unwrap_or_else(|| panic!("{}", t.story()))
        .to_string();
    assert!(
        said.starts_with(&format!(
            "oc-watchdog: stop session={id} episode=1 reason=calls_cap status=stopped: stopped Codex thread {id} by SIGINT to its codex exec"
        )),
        "{said}"
    );
    assert_eq!(agent.exit(), Some(1));
    assert_eq!(
        turn_events(&rollout).last().map(String::as_str),
        Some("turn_aborted")
    );
    let c =
        rusqlite::Connection::open(rig.home.join(".local/state/oc-watchdog/watchdog.db")).unwrap();
    let (status, via, stopped): (String, String, i64) = c
        .query_row(
            "SELECT status, via, stopped FROM stops WHERE session = ?1",
            [&id],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    assert_eq!((status.as_str(), via.as_str()), ("stopped", "sigint"));
    assert_eq!(
        calls_in(&rollout).iter().filter(|&&t| t > stopped).count(),
        0
    );
    let (state, reason): (String, String) = c
        .query_row(
            "SELECT state, reason FROM episodes WHERE root = ?1",
            [&id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!((state.as_str(), reason.as_str()), ("resolved", "stopped"));
}

/// A lock a SIGKILLed `codex exec` left behind names no process to stop, and a process that
/// holds a thread's lock but is no `codex exec` (here a python one, as a pid reused by another
/// program would be) is never signalled; nothing is recorded.
#[test]
fn a_stale_lock_or_a_lock_held_by_another_program_is_never_signalled() {
    let rig = Rig::new("xkill", 40);
    let mut agent = rig.exec("xkill");
    let (id, _) = rig.thread_with_calls(3);
    agent.kill();
    let lock = rig
        .home
        .join(&format!(".codex/thread-writer-locks/{id}.lock"));
    assert!(lock.exists(), "SIGKILL left no lock");
    let r = rig.home.cmd("wd-store").args(["stop", &id]).run();
    r.expect_code(2);
    assert_eq!(
        r.stderr(),
        format!("wd-store: stop: Codex thread {id} runs in no process: no live process holds its lock (its last turn never ended: the process was killed), nothing to stop\n")
    );
    let mut other = Group(
        std::process::Command::new("python3")
            .args([
                "-c",
                "import sys, time; f = open(sys.argv[1]); print('held', flush=True); time.sleep(60)",
            ])
            .arg(&lock)
            .stdout(Stdio::piped())
            .process_group(0)
            .spawn()
            .unwrap(),
    );
    let mut line = String::new();
    use std::io::BufRead;
    std::io::BufReader::new(other.0.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line, "held\n");
    let argv0 = std::fs::read(format!("/proc/{}/cmdline", other.0.id())).unwrap();
    let argv0 = String::from_utf8_lossy(argv0.split(|&b| b == 0).next().unwrap()).into_owned();
    let r = rig.home.cmd("wd-store").args(["stop", &id]).run();
    r.expect_code(2);
    assert_eq!(
        r.stderr(),
        format!("wd-store: stop: Codex thread {id} runs in process {} ({argv0}), neither a `codex exec` nor Codex's app-server daemon: nothing signalled; Ctrl-C in the terminal of its `codex exec`, Esc in its TUI\n", other.0.id())
    );
    assert!(
        other.0.try_wait().unwrap().is_none(),
        "python was signalled"
    );
    assert_eq!(rig.stops(), 0);
}

/// Codex's app-server daemon, stopped when the test ends.
struct Daemon<'a>(&'a Rig);

impl Drop for Daemon<'_> {
    fn drop(&mut self) {
        let _ = self
            .0
            .model
            .codex_with(self.0.home.path(), &self.0.proj)
            .args(["app-server", "daemon", "stop"])
            .output();
        // `daemon stop` leaves the daemon's `pid-update-loop` behind (seen with 0.171.0): end
        // what runs from this HOME's daemon package, by pid
        let package = self.0.home.join(".codex/packages/");
        for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
                continue;
            };
            let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
            if cmd.starts_with(package.to_str().unwrap().as_bytes()) {
                let _ = std::process::Command::new("kill")
                    .args(["-KILL", &pid.to_string()])
                    .status();
            }
        }
    }
}

/// A thread running inside Codex's app-server daemon, as the TUI's do (started here through the
/// daemon's control socket by a client, as the TUI starts one): `wd-store stop` interrupts its
/// turn over the socket; the client sees the turn completed as interrupted, the rollout shows no
/// call after.
#[test]
fn a_thread_in_the_app_server_daemon_is_stopped_by_turn_interrupt() {
    use oc_watchdog::stop::codex::AppServer;
    let rig = Rig::new("xtui", 60);
    let st = rig
        .model
        .codex_with(rig.home.path(), &rig.proj)
        .args(["app-server", "daemon", "start"])
        .output()
        .unwrap();
    let _daemon = Daemon(&rig);
    assert!(st.status.success(), "daemon start: {st:?}");
    let sock = rig
        .home
        .join(".codex/app-server-control/app-server-control.sock");
    let mut client = AppServer::connect(&sock, Instant::now() + Duration::from_secs(20)).unwrap();
    let started = client
        .call(
            "thread/start",
            json!({"cwd": rig.proj, "approvalPolicy": "never", "sandbox": "danger-full-access"}),
        )
        .unwrap();
    let id = started["thread"]["id"].as_str().unwrap().to_string();
    client
        .call(
            "turn/start",
            json!({"threadId": id, "input": [{"type": "text", "text": "SCRIPT:xtui fix the tests"}]}),
        )
        .unwrap();
    // the client follows its thread, as the TUI does
    let (tx, rx) = std::sync::mpsc::channel::<Value>();
    let follow = std::thread::spawn(move || loop {
        client.until(Instant::now() + Duration::from_secs(30));
        match client.read("notifications") {
            Ok(v) => {
                if tx.send(v).is_err() {
                    return;
                }
            }
            Err(_) => return,
        }
    });
    let (found, rollout) = rig.thread_with_calls(6);
    assert_eq!(found, id);
    let r = rig.home.cmd("wd-store").args(["stop", &id]).run();
    let o = stopped(&r, &id, "app-server", &rollout);
    assert_eq!(
        o["resume"],
        format!("a new message in its TUI, which stays open, or `codex resume {id}`")
    );
    let pid: Value = serde_json::from_str(
        &std::fs::read_to_string(rig.home.join(".codex/app-server-daemon/daemon.pid")).unwrap(),
    )
    .unwrap();
    assert_eq!(o["pid"], pid["pid"], "not the daemon");
    let t0 = Instant::now();
    let completed = loop {
        let v = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("no turn/completed");
        if v["method"] == "turn/completed" {
            break v;
        }
        assert!(t0.elapsed() < Duration::from_secs(10));
    };
    assert_eq!(completed["params"]["turn"]["status"], "interrupted");
    assert_eq!(completed["params"]["threadId"], id.as_str());
    drop(rx);
    drop(follow);
}

/// A rollout's thread and the thread it is a subagent of (its `session_meta`).
fn thread_of(rollout: &Path) -> (String, Option<String>) {
    let meta = records(rollout)
        .into_iter()
        .find(|r| r["type"] == "session_meta")
        .unwrap_or_else(|| panic!("{}: no session_meta", rollout.display()));
    let p = &meta["payload"];
    (
        p["id"].as_str().unwrap().to_string(),
        p["source"]["subagent"]["thread_spawn"]["parent_thread_id"]
            .as_str()
            .map(String::from),
    )
}

/// A lead thread and the subagent it spawned, in one `codex exec`, with their rollouts.
struct Tree {
    lead: String,
    lead_rollout: PathBuf,
    sub: String,
    sub_rollout: PathBuf,
}

/// `codex exec` of a lead that spawns a subagent running the rig's script `xsub` and waits for
/// it (`spawn_agent`, `wait_agent`), once the subagent has made 12 calls.
fn lead_and_subagent(rig: &Rig) -> (Group, Tree) {
    rig.model.script(
        "xlead",
        &json!([
            {"tool": "spawn_agent", "namespace": "multi_agent_v1",
             "args": {"message": "SCRIPT:xsub run the tests"}},
            {"tool": "wait_agent", "namespace": "multi_agent_v1",
             "args": {"targets": ["{SPAWNED}"], "timeout_ms": 600_000}},
            {"text": "The subagent is done."}
        ]),
    );
    let agent = Group(
        rig.model
            .codex_with(rig.home.path(), &rig.proj)
            .args([
                "exec",
                "--json",
                "-m",
                CODEX_SUBAGENT_MODEL,
                "SCRIPT:xlead fix the tests",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap(),
    );
    let (sub, sub_rollout) = rig.thread_with_calls(12);
    let (found, lead) = thread_of(&sub_rollout);
    assert_eq!(found, sub);
    let lead = lead.expect("the looping thread is no subagent");
    let lead_rollout = rollouts(&rig.home.join(".codex/sessions"))
        .into_iter()
        .find(|f| thread_of(f).0 == lead)
        .expect("no rollout of the lead");
    // the lead made its two calls: it spawned the subagent and waits for it
    let lead_calls: Vec<(String, String)> = records(&lead_rollout)
        .iter()
        .filter(|r| r["payload"]["type"] == "function_call")
        .map(|r| {
            (
                r["payload"]["namespace"].as_str().unwrap_or("").to_string(),
                r["payload"]["name"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        lead_calls,
        [
            ("multi_agent_v1".to_string(), "spawn_agent".to_string()),
            ("multi_agent_v1".to_string(), "wait_agent".to_string())
        ]
    );

    (
        agent,
        Tree {
            lead,
            lead_rollout,
            sub,
            sub_rollout,
        },
    )
}

/// A Codex subagent's loop, through the real `codex exec`: the lead spawns a subagent
/// (`spawn_agent`) that runs the failing test again and again, and waits for it (`wait_agent`).
/// The tick flags the subagent with the lead as its root and alerts on the lead; `wd-store stop`
/// of the subagent the alert names sends SIGINT to the one `codex exec` that runs both threads,
/// which ends both turns: the stop is the lead's, neither rollout has a call after it, and the
/// advice resumes the lead.
#[test]
fn a_looping_codex_subagent_alerts_on_its_lead_and_is_stopped_with_it() {
    let rig = Rig::new("xsub", 300);
    let (
        mut agent,
        Tree {
            lead,
            lead_rollout,
            sub,
            sub_rollout,
        },
    ) = lead_and_subagent(&rig);
    let nickname = records(&sub_rollout)[0]["payload"]["agent_nickname"]
        .as_str()
        .unwrap()
        .to_string();

    // the subagent is listed under its lead, both busy in the one codex exec
    let s = rig.home.cmd("oc-sessions").args(["--since", "1h"]).run();
    s.ok();
    let listed: Vec<(Value, Value, Value)> = s
        .kind("session")
        .iter()
        .map(|x| (x["id"].clone(), x["parent"].clone(), x["status"].clone()))
        .collect();
    assert!(
        listed.contains(&(json!(sub), json!(lead), json!("busy")))
            && listed.contains(&(json!(lead), Value::Null, json!("busy"))),
        "{}",
        s.story()
    );
    // the tick flags the subagent and alerts on its tree, the lead being the root
    let t = rig.tick();
    assert!(
        t.stderr().contains(&format!(
            "oc-watchdog: dedup=loop:{lead} state=trigger severity=warning title=\"Codex loop: {nickname} repeats bash {TEST}\""
        )),
        "{}",
        t.story()
    );
    let alert = &t.records()[0];
    let d = &alert["details"];
    assert_eq!(
        (&alert["root"], &d["root"], &d["session"], &d["program"]),
        (&json!(lead), &json!(lead), &json!(sub), &json!("codex")),
        "{alert}"
    );
    assert_eq!(d["flagged_sessions"], json!([sub]));
    assert_eq!(d["signals"]["top_target"], format!("bash {TEST}"));
    assert!(
        alert["summary"]
            .as_str()
            .unwrap()
            .starts_with(&format!("session {sub} \"SCRIPT:xsub run the tests\" in ~/proj (in the tree of {lead}), agent {nickname}, model sim/gpt-5-sim: repeats bash {TEST}; ")),
        "{alert}"
    );
    // what the operator is shown: stop the subagent, resume the lead
    rig.home.cmd("wd-store").args(["report"]).run().ok();
    let page =
        std::fs::read_to_string(rig.home.join(".local/state/oc-watchdog/report.html")).unwrap();
    assert!(
        page.contains(&format!(
            "Esc in its TUI, or <code>wd-store stop {sub}</code>; the turn ends as with those keys"
        )) && page.contains(&format!(
            "Resume with <code>codex exec resume {lead} &quot;continue&quot;</code> in its project"
        )),
        "the page's advice"
    );

    let r = rig.home.cmd("wd-store").args(["stop", &sub]).run();
    // the stop is the lead's: both turns end, neither rollout has a call after it
    let o = stopped(&r, &lead, "sigint", &sub_rollout);
    let at = o["stopped"].as_i64().unwrap();
    assert_eq!(turn_events(&lead_rollout), ["task_started", "turn_aborted"]);
    assert_eq!(calls_in(&lead_rollout).len(), 2);
    assert_eq!(turn_events(&sub_rollout), ["task_started", "turn_aborted"]);
    assert_eq!(
        calls_in(&sub_rollout).iter().filter(|&&t| t > at).count(),
        0
    );
    // the lead's wait was cut short by the interrupt
    let waited = records(&lead_rollout)
        .into_iter()
        .find(|r| {
            r["payload"]["type"] == "function_call_output"
                && r["payload"]["call_id"]
                    .as_str()
                    .is_some_and(|c| c.starts_with("call_s1_"))
        })
        .unwrap();
    assert!(
        waited["payload"]["output"]
            .as_str()
            .unwrap()
            .starts_with("aborted by user after "),
        "{waited}"
    );
    assert_eq!(o["episode"], "episode:1");
    assert_ne!(o["pid"], agent.0.id(), "the node wrapper was signalled");
    let resume = format!("codex exec resume {lead} \"continue\"");
    assert_eq!(
        o["resume"],
        format!("`{resume}` in its project, or `codex resume {lead}` (the TUI)")
    );
    assert!(
        r.stderr().starts_with(&format!(
            "wd-store: stopped Codex thread {lead} (for its subagent {sub}) by SIGINT to its codex exec (process {}), ",
            o["pid"]
        )),
        "{}",
        r.story()
    );
    assert_eq!(agent.exit(), Some(1));
    let c =
        rusqlite::Connection::open(rig.home.join(".local/state/oc-watchdog/watchdog.db")).unwrap();
    let row: (String, String, String, String, i64) = c
        .query_row(
            "SELECT session, via, status, reason, stopped FROM stops",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
        )
        .unwrap();
    assert_eq!(
        row,
        (
            lead.clone(),
            "sigint".into(),
            "stopped".into(),
            "operator".into(),
            at
        )
    );

    // the next tick resolves the loop as stopped, naming the lead to resume
    let t = rig.tick();
    assert!(
        t.stderr()
            .lines()
            .any(|l| l.contains(&format!("dedup=loop:{lead} state=resolve"))
                && l.contains("reason=stopped")),
        "{}",
        t.story()
    );
    let alerts = rig
        .home
        .cmd("wd-store")
        .args(["alerts", "--since", "1h"])
        .run();
    assert_eq!(
        alerts.kind("episode")[0]["stop"],
        format!(
            "session {lead} stopped by the operator (wd-store stop) via sigint, {} call(s) after the request; resume with `{resume}` in its project, or `codex resume {lead}` (the TUI)",
            o["calls_after_request"]
        ),
        "{}",
        alerts.story()
    );
    // asked again, by either thread: nothing done
    for id in [&sub, &lead] {
        let again = rig.home.cmd("wd-store").args(["stop", id]).run();
        again.ok();
        assert_eq!(
            (
                again.kind("stop")[0]["status"].as_str(),
                again.kind("stop")[0]["session"].as_str()
            ),
            (Some("already"), Some(lead.as_str())),
            "{}",
            again.story()
        );
    }

    // the advice, run as printed, takes the lead up again to its end; the subagent stays stopped
    let sub_calls = calls_in(&sub_rollout).len();
    let words = shell_words(&resume);
    let out = rig
        .model
        .codex_with(rig.home.path(), &rig.proj)
        .args(&words[1..])
        .output()
        .unwrap();
    assert!(out.status.success(), "{resume}: {out:?}");
    assert_eq!(
        turn_events(&lead_rollout),
        [
            "task_started",
            "turn_aborted",
            "task_started",
            "task_complete"
        ]
    );
    assert_eq!(turn_events(&sub_rollout), ["task_started", "turn_aborted"]);
    assert_eq!(calls_in(&sub_rollout).len(), sub_calls);
}

/// The lead of a looping subagent stopped by its own id (the root its alert is raised on): the
/// one SIGINT ends the subagent's turn too, and the stop is claimed once both rollouts show
/// their turns over, neither with a call after it.
#[test]
fn a_codex_lead_stopped_by_its_own_id_ends_its_subagents_turn_too() {
    let rig = Rig::new("xsub", 300);
    let (mut agent, tree) = lead_and_subagent(&rig);
    let r = rig.home.cmd("wd-store").args(["stop", &tree.lead]).run();
    let o = stopped(&r, &tree.lead, "sigint", &tree.lead_rollout);
    let at = o["stopped"].as_i64().unwrap();
    for f in [&tree.lead_rollout, &tree.sub_rollout] {
        assert_eq!(
            turn_events(f),
            ["task_started", "turn_aborted"],
            "{}",
            f.display()
        );
        assert_eq!(calls_in(f).iter().filter(|&&t| t > at).count(), 0);
    }
    // no episode: the stop is of the lead's turn
    assert!(o["episode"].as_str().unwrap().starts_with("turn:"), "{o}");
    assert!(
        r.stderr().starts_with(&format!(
            "wd-store: stopped Codex thread {} by SIGINT to its codex exec (process {}), ",
            tree.lead, o["pid"]
        )),
        "{}",
        r.story()
    );
    assert_eq!(agent.exit(), Some(1));
}
