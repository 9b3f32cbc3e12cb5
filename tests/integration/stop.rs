//! `wd-store stop` (issue 28) against real opencode 1.18.33 and the scripted model: a looping
//! `opencode run` and a looping TUI (under tmux) stopped through the companion plugin, a served
//! session stopped over HTTP, and the requests that must stop nothing. What a session did after
//! the stop is read from opencode's own database.

use crate::support::desktop::Desktop;
use crate::support::ocsim::{self, http, Sim};
use crate::support::stub::{Reply, Stub};
use crate::support::{repo, Home, Run};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A temp HOME that opencode and the watchdog share, with a project and the scripted model.
struct Rig {
    home: Home,
    proj: PathBuf,
    _fake: ocsim::Fake,
    kids: Vec<Child>,
    tmux: Option<PathBuf>,
    /// When the latest `opencode run` or TUI was started: its session is created after.
    since: i64,
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// One tool call as opencode stored it: status and start time.
#[derive(Debug, Clone)]
struct Call {
    status: String,
    start: i64,
}

impl Rig {
    /// With `plugin`, the watchdog is installed with `deploy/install --with-stop-plugin`, as a
    /// user would; without, only the watchdog's state directory exists.
    fn new(plugin: bool) -> Rig {
        let home = Home::new();
        let fake = ocsim::Fake::start();
        fake.configure(home.path());
        let proj = home.join("proj");
        ocsim::make_project(&proj);
        let rig = Rig {
            home,
            proj,
            _fake: fake,
            kids: Vec::new(),
            tmux: None,
            since: 0,
        };
        if plugin {
            let bins = assert_cmd::cargo::cargo_bin("wd-store")
                .parent()
                .unwrap()
                .to_path_buf();
            let said = rig.install(&["--from", bins.to_str().unwrap(), "--with-stop-plugin"]);
            assert!(said.contains("stop plugin installed in"), "{said}");
            assert_eq!(
                std::fs::read_to_string(rig.plugin_file()).unwrap(),
                std::fs::read_to_string(repo().join("deploy/oc-watchdog-stop.js")).unwrap()
            );
        } else {
            std::fs::create_dir_all(rig.home.join(".local/state/oc-watchdog")).unwrap();
        }
        rig
    }

    fn install(&self, args: &[&str]) -> String {
        crate::support::deploy_install(self.home.path(), args)
    }

    fn plugin_file(&self) -> PathBuf {
        self.home
            .join(".config/opencode/plugin/oc-watchdog-stop.js")
    }

    fn stop_dir(&self) -> PathBuf {
        self.home.join(".local/state/oc-watchdog/stop")
    }

    /// `opencode run` on a script, in the background.
    fn run(&mut self, script: &str) -> u32 {
        self.since = now_ms();
        let child = ocsim::opencode(self.home.path(), &self.proj)
            .args(["run", &format!("SCRIPT:{script} go")])
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(self.home.join("run.out")).unwrap())
            .stderr(std::fs::File::create(self.home.join("run.err")).unwrap())
            .spawn()
            .expect("opencode run");
        let pid = child.id();
        self.kids.push(child);
        pid
    }

    /// The TUI on a script, under tmux (opencode takes its environment from the command).
    fn tui(&mut self, script: &str) {
        self.since = now_ms();
        let sock = self.home.join("tmux.sock");
        let h = self.home.path().display().to_string();
        let cmd = format!(
            "env PWD={p} HOME={h} XDG_CONFIG_HOME={h}/.config XDG_DATA_HOME={h}/.local/share \
             XDG_STATE_HOME={h}/.local/state XDG_CACHE_HOME={h}/.cache OPENCODE_DISABLE_MODELS_FETCH=1 \
             OPENCODE_DISABLE_AUTOUPDATE=1 OPENCODE_DISABLE_LSP_DOWNLOAD=1 OPENCODE_DISABLE_SHARE=1 \
             opencode --prompt 'SCRIPT:{script} go'",
            p = self.proj.display()
        );
        let st = Command::new("tmux")
            .arg("-S")
            .arg(&sock)
            .args([
                "new-session",
                "-d",
                "-s",
                "oc",
                "-x",
                "160",
                "-y",
                "48",
                "-c",
            ])
            .arg(&self.proj)
            .arg(cmd)
            .status()
            .expect("tmux (tests/setup installs it)");
        assert!(st.success());
        self.tmux = Some(sock);
    }

    fn pane(&self) -> String {
        let out = Command::new("tmux")
            .arg("-S")
            .arg(self.tmux.as_ref().unwrap())
            .args(["capture-pane", "-p", "-t", "oc"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The TUI's opencode process (tmux runs it as the pane's command; `env` execs it).
    fn tui_pid(&self) -> u32 {
        let out = Command::new("tmux")
            .arg("-S")
            .arg(self.tmux.as_ref().unwrap())
            .args(["display-message", "-p", "-t", "oc", "#{pane_pid}"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
    }

    /// Waits until the TUI's pane says "interrupted", as it does when Esc stops a run, and shows
    /// the stop plugin's toast saying the watchdog did it.
    fn wait_interrupted(&self) {
        let t0 = Instant::now();
        while !self.pane().contains("interrupted") || !self.pane().contains("oc-watchdog") {
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "the TUI does not say interrupted, with the plugin's toast:\n{}",
                self.pane()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Closes the TUI (its tmux server and all).
    fn close_tui(&mut self) {
        let _ = Command::new("tmux")
            .arg("-S")
            .arg(self.tmux.take().unwrap())
            .arg("kill-server")
            .status();
    }

    /// Tool calls that started from `from` to `to`, and the cost of the messages created then:
    /// what a loop burned between two points, from opencode's database.
    fn burned(&self, session: &str, from: i64, to: i64) -> (i64, f64) {
        self.db()
            .query_row(
                "SELECT (SELECT count(*) FROM part WHERE session_id = ?1
                           AND json_extract(data, '$.type') = 'tool'
                           AND json_extract(data, '$.state.time.start') BETWEEN ?2 AND ?3),
                        (SELECT coalesce(sum(json_extract(data, '$.cost')), 0) FROM message
                          WHERE session_id = ?1 AND json_extract(data, '$.time.created') BETWEEN ?2 AND ?3)",
                rusqlite::params![session, from, to],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap()
    }

    fn db(&self) -> rusqlite::Connection {
        rusqlite::Connection::open_with_flags(
            self.home.join(".local/share/opencode/opencode.db"),
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
        )
        .unwrap()
    }

    /// The latest session of the project, once it has at least `n` tool calls.
    fn wait_calls(&self, n: usize) -> String {
        wait_session_calls(
            &self.home.join(".local/share/opencode/opencode.db"),
            &self.proj,
            self.since,
            n,
            || {
                format!(
                    "--- run.err\n{}",
                    std::fs::read_to_string(self.home.join("run.err")).unwrap_or_default()
                )
            },
        )
    }

    /// Waits until `session` has at least `n` tool calls.
    fn wait_calls_of(&self, session: &str, n: usize) {
        let t0 = Instant::now();
        while self.calls(session).len() < n {
            assert!(
                t0.elapsed() < Duration::from_secs(60),
                "{session} has not {n} calls"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The error class of the session's last assistant message.
    fn last_error(&self, session: &str) -> Option<String> {
        self.db()
            .query_row(
                "SELECT json_extract(data, '$.error.name') FROM message
                 WHERE session_id = ?1 AND json_extract(data, '$.role') = 'assistant'
                 ORDER BY id DESC LIMIT 1",
                [session],
                |r| r.get(0),
            )
            .unwrap()
    }

    fn calls(&self, session: &str) -> Vec<Call> {
        calls_in(&self.db(), session)
    }

    /// One tick of the installed watchdog (`oc-watchdog-tick`), as the timer runs it.
    fn tick(&self) -> Run {
        let h = self.home.path();
        let out = Command::new(h.join(".local/bin/oc-watchdog-tick"))
            .env_clear()
            .env(
                "PATH",
                format!(
                    "{}:{}",
                    h.join(".local/bin").display(),
                    std::env::var("PATH").unwrap()
                ),
            )
            .env("HOME", h)
            .output()
            .unwrap();
        let r = Run {
            shown: "oc-watchdog-tick".into(),
            out,
        };
        r.ok();
        r
    }

    fn watchdog_db(&self) -> rusqlite::Connection {
        rusqlite::Connection::open(self.home.join(".local/state/oc-watchdog/watchdog.db")).unwrap()
    }

    fn stop(&self, session: &str) -> Run {
        self.home.cmd("wd-store").args(["stop", session]).run()
    }

    /// The watchdog's record of a stop, by session.
    fn stops(&self, session: &str) -> Vec<Value> {
        stops_in(
            &self.home.join(".local/state/oc-watchdog/watchdog.db"),
            session,
        )
    }

    /// Waits for the `opencode run` with this pid to exit; its exit status.
    fn wait_exit(&mut self, pid: u32) {
        let kid = self.kids.iter_mut().find(|k| k.id() == pid).unwrap();
        let t0 = Instant::now();
        loop {
            if kid.try_wait().unwrap().is_some() {
                return;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "opencode run goes on"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// `opencode run -s ID` on a script, to the end.
    fn resume(&self, session: &str, script: &str) -> std::process::Output {
        ocsim::opencode(self.home.path(), &self.proj)
            .args(["run", "-s", session, &format!("SCRIPT:{script} go")])
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }
}

impl Rig {
    /// The session's messages as (role, text of its text parts), oldest first.
    fn turns(&self, session: &str) -> Vec<(String, String)> {
        let db = self.db();
        let mut st = db
            .prepare(
                "SELECT json_extract(m.data, '$.role'),
                        coalesce((SELECT group_concat(json_extract(p.data, '$.text'), '') FROM part p
                                  WHERE p.message_id = m.id AND json_extract(p.data, '$.type') = 'text'), '')
                 FROM message m WHERE m.session_id = ?1 ORDER BY m.id",
            )
            .unwrap();
        st.query_map([session], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap()
    }

    fn sessions(&self) -> i64 {
        self.db()
            .query_row("SELECT count(*) FROM session", [], |r| r.get(0))
            .unwrap()
    }

    /// Waits until `session` has a user message "continue" after its first `before` messages
    /// and an answer of the model after it.
    fn wait_continued(&self, session: &str, before: usize, story: impl Fn() -> String) {
        let t0 = Instant::now();
        loop {
            let t = self.turns(session);
            let new = t.get(before..).unwrap_or_default();
            if let Some(i) = new.iter().position(|(r, x)| r == "user" && x == "continue") {
                if new[i + 1..].iter().any(|(r, _)| r == "assistant") {
                    return;
                }
            }
            assert!(
                t0.elapsed() < Duration::from_secs(90),
                "session {session} not resumed: {new:?}\n{}",
                story()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Follows the resume advice in `text` as a person would, in the session's project: each
    /// command it offers (between backquotes) is run by a shell. The TUI's is typed "continue"
    /// into; `opencode run`'s must end well. Each adds a turn to `session` ("continue" and the
    /// model's answer) and no session.
    fn follow_resume_advice(&self, session: &str, text: &str) {
        let offered: Vec<&str> = text.split('`').skip(1).step_by(2).collect();
        assert_eq!(
            offered,
            [
                format!("opencode -s {session}"),
                format!("opencode run -s {session} \"continue\"")
            ],
            "the advice: {text}"
        );
        let sessions = self.sessions();
        let shell = |cmd: &str| {
            let c = ocsim::opencode(self.home.path(), &self.proj);
            let mut sh = Command::new("sh");
            sh.arg("-c").arg(cmd).current_dir(&self.proj);
            for (k, v) in c.get_envs() {
                match v {
                    Some(v) => sh.env(k, v),
                    None => sh.env_remove(k),
                };
            }
            sh
        };
        // the TUI: open the session, type, see the model answer
        let before = self.turns(session).len();
        let tui = crate::support::tui::Tui::start(&shell(offered[0]));
        tui.wait_pane("SCRIPT:", 60);
        tui.keys(&["continue"]);
        tui.keys(&["Enter"]);
        self.wait_continued(session, before, || tui.pane());
        drop(tui);
        // `opencode run` with its message, to the end
        let before = self.turns(session).len();
        let out = shell(offered[1]).stdin(Stdio::null()).output().unwrap();
        assert!(
            out.status.success(),
            "{}: {}\n{}",
            offered[1],
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        self.wait_continued(session, before, String::new);
        assert_eq!(self.sessions(), sessions, "a resume made a new session");
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        if let Some(sock) = &self.tmux {
            let _ = Command::new("tmux")
                .arg("-S")
                .arg(sock)
                .arg("kill-server")
                .status();
        }
        for k in &mut self.kids {
            let _ = k.kill();
            let _ = k.wait();
        }
    }
}

/// The latest session of `proj` created after `since`, once it has at least `n` tool calls.
fn wait_session_calls(
    db: &Path,
    proj: &Path,
    since: i64,
    n: usize,
    story: impl Fn() -> String,
) -> String {
    let t0 = Instant::now();
    loop {
        if let Ok(c) =
            rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        {
            let got: rusqlite::Result<String> = c.query_row(
                "SELECT id FROM session WHERE directory = ?1 AND time_created > ?2
                 ORDER BY time_created DESC LIMIT 1",
                rusqlite::params![proj.to_str().unwrap(), since],
                |r| r.get(0),
            );
            if let Ok(id) = got {
                if calls_in(&c, &id).len() >= n {
                    return id;
                }
            }
        }
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "no session in {} with {n} calls\n{}",
            proj.display(),
            story()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn calls_in(c: &rusqlite::Connection, session: &str) -> Vec<Call> {
    let mut st = c
        .prepare(
            "SELECT json_extract(data, '$.state.status'), json_extract(data, '$.state.time.start')
             FROM part WHERE session_id = ?1 AND json_extract(data, '$.type') = 'tool' ORDER BY id",
        )
        .unwrap();
    st.query_map([session], |r| {
        Ok(Call {
            status: r.get(0)?,
            start: r.get::<_, Option<i64>>(1)?.unwrap_or(0),
        })
    })
    .unwrap()
    .collect::<rusqlite::Result<_>>()
    .unwrap()
}

fn stops_in(db: &Path, session: &str) -> Vec<Value> {
    let c = rusqlite::Connection::open(db).unwrap();
    let mut st = c
        .prepare(
            "SELECT json_object('action_id', action_id, 'episode', episode, 'reason', reason,
                    'status', status, 'via', via, 'pid', pid, 'calls_after_request', calls_after_request)
             FROM stops WHERE session = ?1 ORDER BY t",
        )
        .unwrap();
    st.query_map([session], |r| r.get::<_, String>(0))
        .unwrap()
        .map(|s| serde_json::from_str(&s.unwrap()).unwrap())
        .collect()
}

/// The checks every carried-out stop passes: one `stop` record saying how; nothing started
/// after the stop; the figures printed for the closing note.
#[track_caller]
fn stopped(r: &Run, session: &str, via: &str, what: &str) -> Value {
    r.ok();
    let recs = r.kind("stop");
    assert_eq!(recs.len(), 1, "{}", r.story());
    let o = recs[0].clone();
    assert_eq!(o["session"], session, "{}", r.story());
    assert_eq!(o["status"], "stopped", "{}", r.story());
    assert_eq!(o["via"], via, "{}", r.story());
    assert_eq!(
        o["resume"],
        format!("`opencode -s {session}` (its TUI) or `opencode run -s {session} \"continue\"`")
    );
    let took = o["stopped"].as_i64().unwrap() - o["requested"].as_i64().unwrap();
    eprintln!(
        "stop figures: {what}: {} call(s) from the request to the stop, {took} ms",
        o["calls_after_request"]
    );
    assert!(
        r.stderr()
            .starts_with(&format!("wd-store: stopped session {session} ")),
        "{}",
        r.story()
    );
    o
}

#[track_caller]
fn nothing_after(calls: &[Call], stopped_at: i64) {
    let late: Vec<&Call> = calls.iter().filter(|c| c.start > stopped_at).collect();
    assert!(late.is_empty(), "calls after the stop: {late:?}");
}

#[test]
fn a_looping_opencode_run_is_stopped_through_the_plugin_and_resumes_as_its_advice_says() {
    let mut rig = Rig::new(true);
    let pid = rig.run("lc_goes_on");
    let id = rig.wait_calls(10);
    // the watchdog's tick flags the loop: the stop is for its episode
    let t = rig.tick();
    let (episode, flag_t): (i64, i64) = rig
        .watchdog_db()
        .query_row(
            "SELECT e.id, v.first_flag_t FROM episodes e JOIN verdicts v ON v.session = e.root
             WHERE e.root = ?1 AND e.state = 'open' AND e.kind = 'loop'",
            [&id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap_or_else(|e| panic!("no open loop episode for {id}: {e}\n{}", t.story()));
    let r = rig.stop(&id);
    let o = stopped(&r, &id, "plugin", "opencode run");
    assert_eq!(
        o["pid"], pid,
        "the plugin of the `opencode run` process stopped it"
    );
    assert_eq!(o["action_id"], format!("stop:{id}:episode:{episode}"));
    assert!(o["calls_after_request"].as_i64().unwrap() <= 2, "{o}");
    let stop_t = o["stopped"].as_i64().unwrap();
    let (wasted, cost) = rig.burned(&id, flag_t, stop_t);
    eprintln!(
        "stop figures: opencode run: from the flag to the stop (tick, then wd-store stop by hand): \
         {wasted} call(s), ${cost:.4}, {} ms",
        stop_t - flag_t
    );
    // `opencode run` ends; its last step was aborted, as Esc or Ctrl-C leave it
    rig.wait_exit(pid);
    assert_eq!(rig.last_error(&id).as_deref(), Some("MessageAbortedError"));
    // its own output says who stopped it and how to resume (it said "Error: Aborted" alone)
    let err = std::fs::read_to_string(rig.home.join("run.err")).unwrap();
    assert!(
        err.contains(&format!(
            "\noc-watchdog: The operator stopped this session (wd-store stop) (session {id}). \
             Resume it with: opencode run -s {id} \"continue\"\n"
        )),
        "{err}"
    );
    let calls = rig.calls(&id);
    nothing_after(&calls, o["stopped"].as_i64().unwrap());
    assert!(calls.len() < 50, "the loop ran to its end: {}", calls.len());
    // the request and its acknowledgement are gone; the record stays
    let left: Vec<_> = std::fs::read_dir(rig.stop_dir())
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .filter(|n| n != "loaded")
        .collect();
    assert!(left.is_empty(), "{left:?}");
    let rows = rig.stops(&id);
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["status"], "stopped");
    assert_eq!(rows[0]["via"], "plugin");
    assert_eq!(rows[0]["reason"], "operator");
    assert_eq!(rows[0]["pid"], pid);
    assert_eq!(rows[0]["action_id"], o["action_id"]);
    assert_eq!(rows[0]["episode"], format!("episode:{episode}"));

    // the next tick closes the episode with the operator's stop as its event, even when a
    // call started after the request (it is the stopped loop's), and says nothing of the
    // interrupt the stop left
    let t = rig.tick();
    let (state, reason, summary): (String, Option<String>, String) = rig
        .watchdog_db()
        .query_row(
            "SELECT p.state, p.reason, json_extract(e.body, '$.summary') FROM episodes p
             JOIN events e ON e.episode = p.id AND e.state = 'resolve' WHERE p.id = ?1",
            [episode],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap_or_else(|e| panic!("episode {episode} not resolved: {e}\n{}", t.story()));
    assert_eq!(
        (state.as_str(), reason.as_deref()),
        ("resolved", Some("stopped")),
        "{}",
        t.story()
    );
    assert!(
        summary.starts_with(&format!(
            "session {id} \"Scripted session\" in ~/proj stopped by the operator (wd-store stop) after "
        )) && summary.ends_with(&format!(
            "; resume with `opencode -s {id}` (its TUI) or `opencode run -s {id} \"continue\"`"
        )),
        "{summary}"
    );
    let others: i64 = rig
        .watchdog_db()
        .query_row(
            "SELECT count(*) FROM episodes WHERE id <> ?1",
            [episode],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(
        others,
        0,
        "no interrupted alert, no new episode\n{}",
        t.story()
    );

    // a second request for the same episode does nothing and says so
    let again = rig.stop(&id);
    again.ok();
    assert_eq!(again.kind("stop")[0]["status"], "already");
    assert_eq!(again.kind("stop")[0]["action_id"], o["action_id"]);
    assert!(
        again
            .stderr()
            .contains(": nothing done; resume with `opencode -s "),
        "{}",
        again.story()
    );
    assert_eq!(rig.stops(&id).len(), 1);

    // it resumes as the stop's output and the resolve say (`opencode run -s ID` alone
    // answered "Error: You must provide a message or a command")
    let said = r.stderr();
    let advice = said[said.find("resume with").unwrap()..].trim_end();
    assert_eq!(advice, &summary[summary.find("resume with").unwrap()..]);
    rig.follow_resume_advice(&id, advice);

    // uninstall takes the plugin away
    rig.install(&["--uninstall"]);
    assert!(!rig.plugin_file().exists());
    assert!(!rig.stop_dir().exists());
}

#[test]
fn a_looping_tui_session_under_tmux_is_stopped_through_the_plugin() {
    let mut rig = Rig::new(true);
    rig.tui("slow_reread40");
    let id = rig.wait_calls(5);
    let r = rig.stop(&id);
    let o = stopped(&r, &id, "plugin", "TUI");
    // the TUI shows what Esc shows, and stays open with the session idle
    rig.wait_interrupted();
    // its toast says the operator stopped it, and no internal id (it said "The watchdog
    // stopped this session's loop (stop:ses_…@…)" for an operator's stop)
    let pane = rig.pane();
    assert!(pane.contains("The operator stopped"), "{pane}");
    assert!(
        !pane.contains("stop:ses_") && !pane.contains("The watchdog stopped"),
        "{pane}"
    );
    std::thread::sleep(Duration::from_secs(3));
    let calls = rig.calls(&id);
    nothing_after(&calls, o["stopped"].as_i64().unwrap());
    assert!(calls.len() < 40, "{}", calls.len());
    assert_eq!(rig.last_error(&id).as_deref(), Some("MessageAbortedError"));
    // no tick has seen it: the stop is for the session's current turn
    assert!(o["action_id"]
        .as_str()
        .unwrap()
        .starts_with(&format!("stop:{id}:turn:msg_")));
    let idle = rig.stop(&id);
    idle.ok();
    assert_eq!(idle.kind("stop")[0]["status"], "already");
    // close the TUI, then resume the session with `opencode run -s`
    rig.close_tui();
    let before = calls.len();
    let out = rig.resume(&id, "reread");
    assert!(out.status.success());
    assert_eq!(rig.calls(&id).len(), before + 8);
}

#[test]
fn a_served_session_without_the_plugin_is_stopped_over_http() {
    let sim = Sim::start();
    assert!(!sim
        .home
        .join(".config/opencode/plugin/oc-watchdog-stop.js")
        .exists());
    let (code, ses) = http("POST", &format!("{}/session", sim.url), Some(&json!({})));
    assert_eq!(code, 200, "{ses}");
    let id = ses["id"].as_str().unwrap().to_string();
    sim.prompt(&id, "slow_reread40", &ocsim::Opts::default());
    let db = sim.db_path();
    wait_session_calls(&db, sim.proj(), 0, 5, String::new);
    let wd = |args: &[&str]| {
        crate::support::Cmd::new("wd-store", &sim.home)
            .args(args)
            .run()
    };
    let r = wd(&["stop", &id]);
    let o = stopped(&r, &id, "http", "serve");
    assert_eq!(o["server"], sim.url.as_str());
    assert_eq!(o["pid"], Value::Null);
    assert_eq!(sim.get("/session/status"), json!({}));
    std::thread::sleep(Duration::from_secs(2));
    let c = rusqlite::Connection::open_with_flags(&db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .unwrap();
    let calls = calls_in(&c, &id);
    nothing_after(&calls, o["stopped"].as_i64().unwrap());
    assert!(calls.len() < 40);
    let again = wd(&["stop", &id]);
    again.ok();
    assert_eq!(again.kind("stop")[0]["status"], "already");
    let rows = stops_in(&sim.home.join(".local/state/oc-watchdog/watchdog.db"), &id);
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["via"], "http");
    assert_eq!(rows[0]["status"], "stopped");
    // the server runs it again on the next prompt
    let before = calls.len();
    sim.prompt(&id, "reread", &ocsim::Opts::default());
    sim.wait_idle(&id, None);
    assert_eq!(calls_in(&c, &id).len(), before + 8);
}

#[test]
fn bad_requests_are_refused_and_stale_or_corrupt_stop_files_stop_nothing() {
    let mut rig = Rig::new(true);
    // not an id, an unknown session: a clear message, nothing recorded
    let r = rig.stop("../ses_x");
    r.expect_code(2);
    assert_eq!(
        r.stderr(),
        "wd-store: stop: \"../ses_x\" is not an opencode session id (ses_...)\n"
    );
    // an idle session: one that ran to its end
    rig.since = now_ms();
    let out = ocsim::opencode(rig.home.path(), &rig.proj)
        .args(["run", "SCRIPT:fx_identical_run go"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success());
    let idle = rig.wait_calls(6);
    let r = rig.stop(&idle);
    r.expect_code(2);
    assert_eq!(
        r.stderr(),
        format!("wd-store: stop: session {idle} is idle already: its last run has ended, nothing to stop\n")
    );
    let r = rig.stop("ses_00000000000000000000000000");
    r.expect_code(2);
    assert!(
        r.stderr().starts_with(
            "wd-store: stop: no session ses_00000000000000000000000000 in opencode's database"
        ),
        "{}",
        r.story()
    );

    // a loop with a corrupt stop file, then one left from an old episode: it goes on
    rig.run("lc_goes_on");
    let id = rig.wait_calls(3);
    assert_ne!(id, idle);
    let file = rig.stop_dir().join(format!("{id}.json"));
    let ack = rig.stop_dir().join(format!("{id}.ack.json"));
    std::fs::write(&file, "{\"id\": \"stop:").unwrap();
    let n = rig.calls(&id).len();
    rig.wait_calls(n + 3);
    let now = now_ms();
    std::fs::write(
        &file,
        json!({"id": format!("stop:{id}:episode:1"), "session": id, "episode": "episode:1",
               "expires": now - 60_000})
        .to_string(),
    )
    .unwrap();
    let n = rig.calls(&id).len();
    rig.wait_calls(n + 3);
    assert!(!ack.exists(), "the plugin acted on a stale request");
    // no call refused (the last one may still be running)
    let calls = rig.calls(&id);
    assert!(calls.iter().all(|c| c.status != "error"), "{calls:?}");
    assert_eq!(rig.stops(&idle), Vec::<Value>::new());
    // a real request replaces the stale file and is carried out
    let o = stopped(
        &rig.stop(&id),
        &id,
        "plugin",
        "opencode run after stale files",
    );
    assert!(!file.exists());
    std::thread::sleep(Duration::from_secs(2));
    nothing_after(&rig.calls(&id), o["stopped"].as_i64().unwrap());
}

#[test]
fn a_loop_whose_process_has_no_stop_plugin_and_no_server_is_refused_with_what_to_do_instead() {
    let mut rig = Rig::new(false);
    rig.run("slow_reread40");
    let id = rig.wait_calls(3);
    let r = rig.stop(&id);
    r.expect_code(2);
    assert_eq!(
        r.stderr(),
        format!(
            "wd-store: stop: session {id} runs in a TUI or `opencode run`, which listen on no port, and the stop plugin is not installed: press Esc twice in its TUI, or Ctrl-C in the terminal of its `opencode run`, or install the plugin (deploy/install --with-stop-plugin) for the next ones\n"
        )
    );
    assert_eq!(r.stdout(), "");
    // the plugin installed now: the running `opencode run` has not loaded it
    let plugin = rig.plugin_file();
    std::fs::create_dir_all(plugin.parent().unwrap()).unwrap();
    std::fs::copy(repo().join("deploy/oc-watchdog-stop.js"), &plugin).unwrap();
    let r = rig.stop(&id);
    r.expect_code(2);
    assert_eq!(
        r.stderr(),
        format!(
            "wd-store: stop: session {id} runs in a TUI or `opencode run` that has not loaded the stop plugin (started before it was installed?) and no server lists it: press Esc twice in its TUI, or Ctrl-C in the terminal of its `opencode run`; opencode processes started from now on load the plugin\n"
        )
    );
    // nothing was stopped: the loop goes on
    let n = rig.calls(&id).len();
    rig.wait_calls(n + 3);
    assert_eq!(rig.stops(&id), Vec::<Value>::new());
}

/// The plugin on its own, under node with a stand-in SDK client (`plugin_driver.mjs`): the paths
/// a real loop rarely takes on cue (a tool call before the timer sees the request, an abort that
/// fails, a session of another process) and failing open.
struct Driver {
    child: Child,
    out: std::io::BufReader<std::process::ChildStdout>,
    pid: u64,
}

impl Driver {
    fn start(home: &Home) -> Driver {
        let mut child = Command::new("node")
            .arg(repo().join("tests/support/plugin_driver.mjs"))
            .arg(repo().join("deploy/oc-watchdog-stop.js"))
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap())
            .env("HOME", home.path())
            .env("XDG_STATE_HOME", home.join(".local/state"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("node");
        let out = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut d = Driver { child, out, pid: 0 };
        let hello = d.answer();
        assert_eq!(hello["exports"], json!(["OcWatchdogStop"]));
        d.pid = hello["pid"].as_u64().unwrap();
        d
    }

    fn answer(&mut self) -> Value {
        use std::io::BufRead;
        let mut line = String::new();
        self.out.read_line(&mut line).unwrap();
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("driver said {line:?}: {e}"))
    }

    fn op(&mut self, op: Value) -> Value {
        use std::io::Write;
        let sin = self.child.stdin.as_mut().unwrap();
        writeln!(sin, "{op}").unwrap();
        self.answer()
    }

    fn call(&mut self, session: &str, call: &str) -> Value {
        self.op(json!({"op": "call", "session": session, "call": call}))
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn the_plugin_refuses_one_call_per_request_aborts_only_its_own_sessions_and_fails_open() {
    let home = Home::new();
    let stop = home.join(".local/state/oc-watchdog/stop");
    let request = |session: &str, id: &str, expires: i64| {
        std::fs::create_dir_all(&stop).unwrap();
        std::fs::write(
            stop.join(format!("{session}.json")),
            json!({"id": id, "session": session, "episode": "episode:1", "expires": expires})
                .to_string(),
        )
        .unwrap();
    };
    let ack = |session: &str| -> Option<Value> {
        let text = std::fs::read_to_string(stop.join(format!("{session}.ack.json"))).ok()?;
        Some(serde_json::from_str(&text).unwrap())
    };
    let later = now_ms() + 60_000;

    // without the watchdog's state directory: no marker, and a call runs
    let mut d = Driver::start(&home);
    assert_eq!(d.call("ses_a", "call_1"), json!({"ran": true}));
    assert!(!stop.exists());
    drop(d);

    std::fs::create_dir_all(home.join(".local/state/oc-watchdog")).unwrap();
    let mut d = Driver::start(&home);
    assert!(stop.join(format!("loaded/{}.json", d.pid)).is_file());
    // a request: the next call is refused and the session aborted, once per request id
    request("ses_a", "stop:ses_a:episode:1@1", later);
    let refusal =
        "Stopped by the watchdog at the operator's request. Do not retry; wait for the user.";
    assert_eq!(d.call("ses_a", "call_2"), json!({"refused": refusal}));
    let a = ack("ses_a").unwrap();
    assert_eq!(a["id"], "stop:ses_a:episode:1@1");
    assert_eq!(a["pid"], d.pid);
    assert_eq!(a["aborted"], true);
    assert_eq!(a["refused_call"], "call_2");
    assert_eq!(d.call("ses_a", "call_3"), json!({"ran": true}));
    assert_eq!(
        d.op(json!({"op": "wait", "ms": 1200})),
        json!({"aborted": ["ses_a"]})
    );
    // an expired request (an old episode's) and a corrupt one: nothing refused, nothing aborted
    request("ses_b", "stop:ses_b:episode:1@1", now_ms() - 1);
    assert_eq!(d.call("ses_b", "call_4"), json!({"ran": true}));
    std::fs::write(stop.join("ses_c.json"), "{\"id\": 3, ").unwrap();
    assert_eq!(d.call("ses_c", "call_5"), json!({"ran": true}));
    // a session this process runs (seen busy), no call coming: the timer aborts it
    d.op(json!({"op": "busy", "session": "ses_d"}));
    request("ses_d", "stop:ses_d:episode:2@1", later);
    assert_eq!(
        d.op(json!({"op": "wait", "ms": 1500})),
        json!({"aborted": ["ses_a", "ses_d"]})
    );
    assert_eq!(ack("ses_d").unwrap()["refused_call"], Value::Null);
    // a session of another process: left alone
    request("ses_e", "stop:ses_e:episode:3@1", later);
    assert_eq!(
        d.op(json!({"op": "wait", "ms": 1500})),
        json!({"aborted": ["ses_a", "ses_d"]})
    );
    assert_eq!(ack("ses_e"), None);
    // an abort that fails is acknowledged as such; the call is still refused
    request("ses_throw", "stop:ses_throw:episode:4@1", later);
    assert_eq!(d.call("ses_throw", "call_6"), json!({"refused": refusal}));
    let a = ack("ses_throw").unwrap();
    assert_eq!(a["aborted"], false);
    assert_eq!(a["error"], "no such session");
    for f in ["ses_b.ack.json", "ses_c.ack.json", "ses_e.ack.json"] {
        assert!(!stop.join(f).exists(), "{f}");
    }
}

// ---- the stop policy (`[stop]`) ---------------------------------------------------------------

/// A webhook receiver, the shared desktop, and the policy's config: escalation on the second
/// flagged tick, and `extra` (the `[stop]` keys).
struct Policy {
    desk: &'static Desktop,
    hook: Stub,
}

impl Policy {
    fn on(rig: &Rig, stop: &str) -> Policy {
        let hook = Stub::start();
        hook.json("POST /hook", "{}");
        let conf = format!(
            "[alert]\nescalate_after_ticks = 2\n\n[stop]\n{stop}\n\n\
             [[channels]]\nname = \"desktop\"\ntype = \"desktop\"\nmin_severity = \"info\"\nrate_limit_secs = 0\n\n\
             [[channels]]\nname = \"hook\"\ntype = \"webhook\"\nurl = \"{}/hook\"\nmin_severity = \"info\"\nrate_limit_secs = 0\n",
            hook.url
        );
        std::fs::create_dir_all(rig.home.join(".config/oc-watchdog")).unwrap();
        std::fs::write(rig.home.join(".config/oc-watchdog/watchdog.toml"), conf).unwrap();
        Policy {
            desk: Desktop::shared(),
            hook,
        }
    }

    /// One installed tick with the desktop's bus.
    fn tick(&self, rig: &Rig) -> Run {
        let h = rig.home.path();
        let out = Command::new(h.join(".local/bin/oc-watchdog-tick"))
            .env_clear()
            .env(
                "PATH",
                format!(
                    "{}:{}",
                    h.join(".local/bin").display(),
                    std::env::var("PATH").unwrap()
                ),
            )
            .env("HOME", h)
            .env("DBUS_SESSION_BUS_ADDRESS", &self.desk.bus)
            .env("DISPLAY", &self.desk.display)
            .output()
            .unwrap();
        let r = Run {
            shown: "oc-watchdog-tick".into(),
            out,
        };
        r.ok();
        r
    }

    /// The events the webhook received for this root, as (state, reason).
    fn hooked(&self, root: &str) -> Vec<Value> {
        self.hook
            .requests()
            .into_iter()
            .filter(|r| r.path == "/hook")
            .map(|r| serde_json::from_str::<Value>(&r.body).unwrap())
            .filter(|v| v["root"] == root)
            .collect()
    }
}

/// The events of a root's loop episodes, as `state reason` in order.
fn events_of(rig: &Rig, root: &str) -> Vec<String> {
    let c = rig.watchdog_db();
    let mut st = c
        .prepare(
            "SELECT state || coalesce(' ' || reason, '') FROM events WHERE dedup_key = ?1 ORDER BY id",
        )
        .unwrap();
    st.query_map([format!("loop:{root}")], |r| r.get(0))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap()
}

fn alert_keys(rig: &Rig) -> Vec<String> {
    let c = rig.watchdog_db();
    let mut st = c
        .prepare("SELECT dedup_key || ' ' || state FROM episodes ORDER BY id")
        .unwrap();
    st.query_map([], |r| r.get(0))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap()
}

#[test]
fn the_policy_stops_a_looping_opencode_run_at_escalation_once_and_says_so_on_every_channel() {
    let mut rig = Rig::new(true);
    let pol = Policy::on(&rig, "at_escalation = true");
    let pid = rig.run("lc_goes_on");
    // ten calls started: at least eight completed, flagged by the first tick
    let id = rig.wait_calls(10);
    let t1 = pol.tick(&rig);
    assert_eq!(events_of(&rig, &id), ["trigger"], "{}", t1.story());
    let (episode, flag_t): (i64, i64) = rig
        .watchdog_db()
        .query_row(
            "SELECT e.id, v.first_flag_t FROM episodes e JOIN verdicts v ON v.session = e.root
             WHERE e.root = ?1 AND e.state = 'open' ORDER BY v.tick LIMIT 1",
            [&id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    // the loop goes on: the second flagged tick escalates, and the policy stops it at once
    let n = rig.calls(&id).len();
    rig.wait_calls(n + 3);
    let t2 = pol.tick(&rig);
    assert_eq!(
        events_of(&rig, &id),
        ["trigger", "escalate still_looping", "resolve stopped"],
        "{}",
        t2.story()
    );
    assert!(
        t2.stderr().contains(&format!(
            "oc-watchdog: stop session={id} episode={episode} reason=escalated status=stopped"
        )),
        "{}",
        t2.story()
    );
    let rows = rig.stops(&id);
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["reason"], "escalated");
    assert_eq!(rows[0]["status"], "stopped");
    assert_eq!(rows[0]["via"], "plugin");
    assert_eq!(rows[0]["pid"], pid);
    assert_eq!(rows[0]["action_id"], format!("stop:{id}:episode:{episode}"));
    let stop_t: i64 = rig
        .watchdog_db()
        .query_row("SELECT stopped FROM stops WHERE session = ?1", [&id], |r| {
            r.get(0)
        })
        .unwrap();
    // no tool call starts after the stop; the run ends aborted, as Esc leaves it, and says why
    rig.wait_exit(pid);
    assert_eq!(rig.last_error(&id).as_deref(), Some("MessageAbortedError"));
    let err = std::fs::read_to_string(rig.home.join("run.err")).unwrap();
    assert!(
        err.contains(&format!(
            "\noc-watchdog: The watchdog stopped this session's loop at its escalation ([stop] \
             policy) (session {id}). Resume it with: opencode run -s {id} \"continue\"\n"
        )),
        "{err}"
    );
    let calls = rig.calls(&id);
    nothing_after(&calls, stop_t);
    assert!(calls.len() < 50, "the loop ran to its end: {}", calls.len());
    // the resolve says who stopped it, after how much, and how to resume
    let (summary, details): (String, String) = rig
        .watchdog_db()
        .query_row(
            "SELECT json_extract(body, '$.summary'), json_extract(body, '$.details.stop') FROM events
             WHERE episode = ?1 AND state = 'resolve'",
            [episode],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    let burned: (i64, f64) = rig
        .watchdog_db()
        .query_row(
            "SELECT calls, cost FROM episodes WHERE id = ?1",
            [episode],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(
        summary,
        format!(
            "session {id} \"Scripted session\" in ~/proj stopped by the watchdog at its escalation ([stop] at_escalation) after {} calls and ${:.2}; resume with `opencode -s {id}` (its TUI) or `opencode run -s {id} \"continue\"`",
            burned.0, burned.1
        )
    );
    let details: Value = serde_json::from_str(&details).unwrap();
    assert_eq!(details["by"], "escalated");
    assert_eq!(details["pid"], pid);
    assert_eq!(
        details["resume"],
        format!("opencode run -s {id} \"continue\"")
    );
    // on the desktop, with its resume line
    let seen = pol.desk.wait_for(
        &format!(
            "session {id} \"Scripted session\" in ~/proj stopped by the watchdog at its escalation"
        ),
        1,
    );
    assert_eq!(seen.len(), 1, "{:?}", pol.desk.seen());
    assert!(
        seen[0]
            .summary
            .starts_with("stopped by the watchdog: opencode loop: "),
        "{:?}",
        seen[0]
    );
    // it stays until dismissed: the session waits to be resumed
    assert_eq!(seen[0].expire, Some(0), "{:?}", seen[0]);
    assert!(
        seen[0].body.contains(&format!(
            "resume with `opencode -s {id}` (its TUI) or `opencode run -s {id} \"continue\"`"
        )),
        "{:?}",
        seen[0]
    );
    // the webhook got the trigger and the stop: the escalation, superseded by the stop before
    // it was sent, is recorded as skipped (the outbox's rule for every newer event of an alert)
    let hooked = pol.hooked(&id);
    let states: Vec<String> = hooked
        .iter()
        .map(|v| {
            format!(
                "{} {}",
                v["state"].as_str().unwrap(),
                v["reason"].as_str().unwrap_or("")
            )
        })
        .collect();
    assert_eq!(states, ["trigger ", "resolve stopped"], "{hooked:?}");
    assert_eq!(hooked[1]["details"]["stop"]["by"], "escalated");
    assert_eq!(hooked[1]["summary"], summary);
    let skipped: String = rig
        .watchdog_db()
        .query_row(
            "SELECT d.status || ' ' || d.detail FROM deliveries d JOIN events e ON e.id = d.event
             WHERE e.episode = ?1 AND e.state = 'escalate' AND d.channel = 'hook'",
            [episode],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(skipped, "skipped superseded before it was sent");
    // `wd-store alerts` tells it
    let alerts = rig
        .home
        .cmd("wd-store")
        .args(["alerts", "--since", "1h"])
        .run();
    let ep = alerts
        .kind("episode")
        .into_iter()
        .find(|e| e["episode"] == episode)
        .unwrap();
    assert_eq!(ep["reason"], "stopped");
    assert!(
        ep["stop"].as_str().unwrap().starts_with(&format!(
            "session {id} stopped by the watchdog (escalated) via plugin, "
        )),
        "{ep}"
    );

    // the figures for the closing note: from the flag point to the stop
    let (wasted, cost) = rig.burned(&id, flag_t, stop_t);
    eprintln!(
        "stop figures: policy at escalation (timer pipeline, 2 ticks): from the flag to the stop \
         {wasted} call(s), ${cost:.4}, {} ms",
        stop_t - flag_t
    );

    // the next tick: nothing more of it (no second stop, no "interrupted", no new episode)
    let t3 = pol.tick(&rig);
    assert_eq!(
        events_of(&rig, &id),
        ["trigger", "escalate still_looping", "resolve stopped"],
        "{}",
        t3.story()
    );
    assert_eq!(rig.stops(&id).len(), 1);
    assert_eq!(alert_keys(&rig), [format!("loop:{id} resolved")]);
    assert_eq!(pol.hooked(&id).len(), 2);
    // and the session resumes as the resolve says
    rig.follow_resume_advice(&id, &summary);
}

/// The policy on a TUI under tmux, at escalation as for `opencode run` above (the same two-tick
/// path, so the two runs' figures compare): the plugin in the TUI's own process stops it, the
/// TUI stays open and idle, and the session resumes with `opencode run -s`.
#[test]
fn the_policy_stops_a_looping_tui_session_under_tmux_at_escalation_and_it_resumes_with_run_s() {
    let mut rig = Rig::new(true);
    let pol = Policy::on(&rig, "at_escalation = true");
    rig.tui("lc_goes_on");
    let id = rig.wait_calls(10);
    let pid = rig.tui_pid();
    let t1 = pol.tick(&rig);
    assert_eq!(events_of(&rig, &id), ["trigger"], "{}", t1.story());
    assert!(rig.stops(&id).is_empty(), "{}", t1.story());
    let (episode, flag_t, flag_index): (i64, i64, i64) = rig
        .watchdog_db()
        .query_row(
            "SELECT e.id, v.first_flag_t, v.first_flag_index FROM episodes e
             JOIN verdicts v ON v.session = e.root
             WHERE e.root = ?1 AND e.state = 'open' ORDER BY v.tick LIMIT 1",
            [&id],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap_or_else(|e| panic!("no open episode for {id}: {e}\n{}", t1.story()));
    // the loop goes on in the TUI: the second flagged tick escalates and the policy stops it
    let n = rig.calls(&id).len();
    rig.wait_calls(n + 3);
    let t2 = pol.tick(&rig);
    assert_eq!(
        events_of(&rig, &id),
        ["trigger", "escalate still_looping", "resolve stopped"],
        "{}",
        t2.story()
    );
    assert!(
        t2.stderr().contains(&format!(
            "oc-watchdog: stop session={id} episode={episode} reason=escalated status=stopped"
        )),
        "{}",
        t2.story()
    );
    let rows = rig.stops(&id);
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["reason"], "escalated");
    assert_eq!(rows[0]["status"], "stopped");
    assert_eq!(rows[0]["via"], "plugin");
    assert_eq!(rows[0]["pid"], pid, "the plugin in the TUI's own process");
    assert_eq!(rows[0]["action_id"], format!("stop:{id}:episode:{episode}"));
    assert_eq!(rows[0]["episode"], format!("episode:{episode}"));
    let stop_t: i64 = rig
        .watchdog_db()
        .query_row("SELECT stopped FROM stops WHERE session = ?1", [&id], |r| {
            r.get(0)
        })
        .unwrap();

    // the TUI shows what Esc shows and stays open, its session idle: no call after the stop
    rig.wait_interrupted();
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        Path::new(&format!("/proc/{pid}")).exists(),
        "the TUI exited:\n{}",
        rig.pane()
    );
    assert!(rig.pane().contains("interrupted"), "{}", rig.pane());
    let calls = rig.calls(&id);
    nothing_after(&calls, stop_t);
    assert!(calls.len() < 50, "the loop ran to its end: {}", calls.len());
    assert!(calls.iter().all(|c| c.status != "running"), "{calls:?}");
    assert_eq!(rig.last_error(&id).as_deref(), Some("MessageAbortedError"));
    // the resolve says it, and so does the desktop
    let summary: String = rig
        .watchdog_db()
        .query_row(
            "SELECT json_extract(body, '$.summary') FROM events
             WHERE episode = ?1 AND state = 'resolve'",
            [episode],
            |r| r.get(0),
        )
        .unwrap();
    let (ep_calls, ep_cost): (i64, f64) = rig
        .watchdog_db()
        .query_row(
            "SELECT calls, cost FROM episodes WHERE id = ?1",
            [episode],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(
        summary,
        format!(
            "session {id} \"Scripted session\" in ~/proj stopped by the watchdog at its escalation ([stop] at_escalation) after {ep_calls} calls and ${ep_cost:.2}; resume with `opencode -s {id}` (its TUI) or `opencode run -s {id} \"continue\"`"
        )
    );
    let seen = pol.desk.wait_for(
        &format!(
            "session {id} \"Scripted session\" in ~/proj stopped by the watchdog at its escalation"
        ),
        1,
    );
    assert_eq!(seen.len(), 1, "{:?}", pol.desk.seen());

    // the figures for the closing note: from the flag point to the stop
    let (wasted, cost) = rig.burned(&id, flag_t, stop_t);
    let at_stop = calls.iter().filter(|c| c.start <= stop_t).count() as i64;
    assert_eq!(
        wasted,
        at_stop - flag_index + 1,
        "the verdict's flagged call #{flag_index} is not opencode's"
    );
    eprintln!(
        "stop figures: policy at escalation, TUI under tmux (timer pipeline, 2 ticks): from the \
         flag (call #{flag_index}) to the stop {wasted} call(s), ${cost:.4}, {} ms; {} call(s) \
         after the request; {} call(s) in all",
        stop_t - flag_t,
        rows[0]["calls_after_request"],
        calls.len()
    );

    // the next tick: nothing more of it (no second stop, no "interrupted", no new episode)
    let t3 = pol.tick(&rig);
    assert_eq!(
        events_of(&rig, &id),
        ["trigger", "escalate still_looping", "resolve stopped"],
        "{}",
        t3.story()
    );
    assert!(
        !t3.stderr().contains("oc-watchdog: stop "),
        "{}",
        t3.story()
    );
    assert_eq!(rig.stops(&id).len(), 1);
    assert_eq!(alert_keys(&rig), [format!("loop:{id} resolved")]);

    // close the TUI, then the session resumes with `opencode run -s`
    rig.close_tui();
    let before = calls.len();
    let out = rig.resume(&id, "reread");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let after = rig.calls(&id);
    assert_eq!(after.len(), before + 8);
    assert!(after[before..].iter().all(|c| c.status == "completed"));
}

#[test]
fn the_policy_never_stops_a_loop_that_landed_a_change_since_its_trigger() {
    let mut rig = Rig::new(true);
    let pol = Policy::on(&rig, "at_escalation = true\nafter_calls = 3");
    let pid = rig.run("st_landed_loop");
    let id = rig.wait_calls(10);
    let t1 = pol.tick(&rig);
    assert_eq!(events_of(&rig, &id), ["trigger"], "{}", t1.story());
    // the write lands (call 13), and the loop reads on until it is flagged again
    rig.wait_calls(24);
    let t2 = pol.tick(&rig);
    let (decision, landed): (String, Option<i64>) = rig
        .watchdog_db()
        .query_row(
            "SELECT last_decision, landed FROM episodes WHERE root = ?1",
            [&id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(decision, "held_landed", "{}", t2.story());
    assert!(landed.is_some());
    // it goes on with nothing landed: it escalates, past the calls cap too, and is not stopped
    rig.wait_calls(30);
    let t3 = pol.tick(&rig);
    assert_eq!(
        events_of(&rig, &id),
        ["trigger", "escalate still_looping"],
        "{}",
        t3.story()
    );
    assert!(rig.stops(&id).is_empty());
    assert!(
        !t3.stderr().contains("oc-watchdog: stop "),
        "{}",
        t3.story()
    );
    // it runs on, never aborted
    let n = rig.calls(&id).len();
    rig.wait_calls(n + 2);
    assert_eq!(rig.last_error(&id), None);
    assert!(rig
        .kids
        .iter_mut()
        .any(|k| k.id() == pid && k.try_wait().unwrap().is_none()));
}

/// One tick of the pipeline by hand at a given time (the stages' `--now`), as the tick script
/// runs it: to judge a session silent for longer than a test can wait.
fn tick_at(rig: &Rig, now: i64) -> Run {
    let n = now.to_string();
    let sessions = rig
        .home
        .cmd("oc-sessions")
        .args(["--since", "1h", "--now", &n])
        .run();
    sessions.ok();
    let calls = rig.home.cmd("oc-calls").stdin(sessions.stdout()).run();
    calls.ok();
    let verdicts = rig
        .home
        .cmd("progress-detect")
        .args(["--now", &n])
        .stdin(calls.stdout())
        .run();
    verdicts.ok();
    let tick = rig
        .home
        .cmd("wd-store")
        .args(["--now", &n, "tick"])
        .stdin(verdicts.stdout())
        .run();
    tick.ok();
    let r = rig
        .home
        .cmd("wd-alert")
        .args(["--now", &n])
        .stdin(tick.stdout())
        .run();
    r.ok();
    r
}

#[test]
fn the_policy_never_stops_a_stalled_loop() {
    let mut rig = Rig::new(true);
    let _pol = Policy::on(&rig, "at_escalation = true\nafter_calls = 1");
    rig.run("st_hang_loop");
    let id = rig.wait_calls(8);
    let t0 = now_ms();
    let t1 = tick_at(&rig, t0);
    assert_eq!(events_of(&rig, &id), ["trigger"], "{}", t1.story());
    // its last read hangs in the model's reply: judged 20 minutes on, it is stalled, and the
    // calls it made since the trigger count: it escalates, and stays an alert
    rig.wait_calls(20);
    std::thread::sleep(Duration::from_secs(2));
    let t2 = tick_at(&rig, t0 + 20 * 60_000);
    let class: String = rig
        .watchdog_db()
        .query_row(
            "SELECT json_extract(liveness, '$.class') FROM verdicts WHERE session = ?1 ORDER BY tick DESC LIMIT 1",
            [&id],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(class, "stalled", "{}", t2.story());
    assert_eq!(
        events_of(&rig, &id),
        ["trigger", "escalate still_looping"],
        "{}",
        t2.story()
    );
    assert!(rig.stops(&id).is_empty(), "{}", t2.story());
}

#[test]
fn a_policy_stop_that_cannot_be_carried_out_is_recorded_once_and_the_loop_stays_an_alert() {
    // no plugin and no server: the `opencode run` cannot be reached
    let mut rig = Rig::new(false);
    let _pol = Policy::on(&rig, "at_escalation = true");
    rig.run("lc_goes_on");
    let id = rig.wait_calls(10);
    let t1 = tick_at(&rig, now_ms());
    assert_eq!(events_of(&rig, &id), ["trigger"], "{}", t1.story());
    let n = rig.calls(&id).len();
    rig.wait_calls(n + 3);
    let t2 = tick_at(&rig, now_ms());
    assert_eq!(
        events_of(&rig, &id),
        ["trigger", "escalate still_looping"],
        "{}",
        t2.story()
    );
    assert!(
        t2.stderr().contains(&format!(
            "reason=escalated status=refused: stop: session {id} runs in a TUI or `opencode run`, which listen on no port, and the stop plugin is not installed: "
        )),
        "{}",
        t2.story()
    );
    let rows = rig.stops(&id);
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["status"], "failed");
    assert_eq!(rows[0]["reason"], "escalated");
    // the next tick counts the loop on and asks nothing again
    let n = rig.calls(&id).len();
    rig.wait_calls(n + 2);
    let t3 = tick_at(&rig, now_ms());
    assert!(
        !t3.stderr().contains("oc-watchdog: stop "),
        "{}",
        t3.story()
    );
    assert_eq!(rig.stops(&id).len(), 1);
    let (state, decision): (String, String) = rig
        .watchdog_db()
        .query_row(
            "SELECT state, last_decision FROM episodes WHERE root = ?1",
            [&id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!((state.as_str(), decision.as_str()), ("open", "counted"));
    // `wd-store alerts` says why it was not stopped
    let alerts = rig
        .home
        .cmd("wd-store")
        .args(["alerts", "--since", "1h"])
        .run();
    let ep = &alerts.kind("episode")[0];
    assert!(
        ep["stop"].as_str().unwrap().starts_with(&format!(
            "stop of session {id} (escalated) not carried out: stop: session {id} runs in a TUI"
        )),
        "{ep}"
    );
}

/// Resident memory of a process in bytes (`VmRSS`), 0 once it is gone.
fn rss(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

#[test]
fn a_fifo_dev_zero_or_100_mb_file_at_the_stop_path_froze_or_swelled_opencode() {
    // issue 42: the plugin read stop/<session>.json with readFileSync: a FIFO there froze the
    // opencode process for good, a link to /dev/zero took it to 9.1 GB, a 100 MB file to 1.7 GB
    let mut rig = Rig::new(true);
    // installed private: the plugin ignores a directory others can write to
    assert_eq!(mode(&rig.stop_dir()), 0o700);
    assert_eq!(mode(rig.stop_dir().parent().unwrap()), 0o700);
    let mut peaks = Vec::new();
    for hostile in ["none", "fifo", "/dev/zero", "100 MB"] {
        let pid = rig.run("slow_reread40");
        let id = rig.wait_calls(2);
        let at = rig.stop_dir().join(format!("{id}.json"));
        match hostile {
            "fifo" => assert!(Command::new("mkfifo").arg(&at).status().unwrap().success()),
            "/dev/zero" => std::os::unix::fs::symlink("/dev/zero", &at).unwrap(),
            "100 MB" => std::fs::File::create(&at)
                .unwrap()
                .set_len(100 << 20)
                .unwrap(),
            _ => {}
        }
        let t0 = Instant::now();
        let mut peak = 0;
        let status = loop {
            let kid = rig.kids.iter_mut().find(|k| k.id() == pid).unwrap();
            if let Some(st) = kid.try_wait().unwrap() {
                break st;
            }
            peak = peak.max(rss(pid));
            // kept from taking the machine down: a failure either way
            if peak > 3 << 30 || t0.elapsed() > Duration::from_secs(180) {
                let _ = kid.kill();
                let _ = kid.wait();
                let calls = rig.calls(&id).len();
                panic!(
                    "{hostile} at the stop path: opencode run at {} MB after {:?}, {calls} of 40 calls",
                    peak >> 20,
                    t0.elapsed()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        let _ = std::fs::remove_file(&at);
        assert!(status.success(), "{hostile}: opencode run ended {status:?}");
        let calls = rig.calls(&id);
        assert_eq!(calls.len(), 40, "{hostile}: {calls:?}");
        assert!(calls.iter().all(|c| c.status == "completed"), "{calls:?}");
        eprintln!(
            "stop plugin figures: {hostile} at the stop path: opencode run's peak RSS {} MB, {:.1} s",
            peak >> 20,
            t0.elapsed().as_secs_f64()
        );
        peaks.push(peak);
    }
    // none of them costs opencode more than 256 MB over the run with nothing there
    for (p, hostile) in peaks[1..].iter().zip(["fifo", "/dev/zero", "100 MB"]) {
        assert!(
            *p < peaks[0] + (256 << 20),
            "{hostile}: {} MB against {} MB",
            p >> 20,
            peaks[0] >> 20
        );
    }
}

fn mode(p: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o777
}

#[test]
fn the_plugin_took_requests_from_other_users_and_wrote_through_links_at_predictable_names() {
    // issue 42: where another user made the state directory first (an XDG_STATE_HOME under
    // /tmp), that user could stop the victim's sessions, and the plugin's temp files
    // (`<file>.<pid>.tmp`) were written through links planted at those names
    use std::os::unix::fs::{chown, symlink, PermissionsExt};
    let home = Home::new();
    let state = home.join(".local/state/oc-watchdog");
    let stop = state.join("stop");
    std::fs::create_dir_all(&stop).unwrap();
    for d in [&state, &stop] {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o700)).unwrap();
    }
    let later = now_ms() + 60_000;
    let request = |session: &str| {
        let file = stop.join(format!("{session}.json"));
        std::fs::write(
            &file,
            json!({"id": format!("stop:{session}:episode:1@1"), "session": session, "episode": "episode:1", "expires": later})
                .to_string(),
        )
        .unwrap();
        file
    };
    let mut d = Driver::start(&home);
    // its marker: a private directory, a private file
    assert_eq!(mode(&stop.join("loaded")), 0o700);
    assert_eq!(mode(&stop.join(format!("loaded/{}.json", d.pid))), 0o600);
    let refusal =
        "Stopped by the watchdog at the operator's request. Do not retry; wait for the user.";
    // links planted at the names the plugin wrote its acknowledgement through
    let victim = home.join("victim.txt");
    std::fs::write(&victim, "mine\n").unwrap();
    for n in 0..4 {
        let name = format!("ses_v.ack.json.{}.tmp", d.pid + n);
        symlink(&victim, stop.join(name)).unwrap();
    }
    request("ses_v");
    assert_eq!(d.call("ses_v", "call_1"), json!({"refused": refusal}));
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "mine\n");
    let ack = stop.join("ses_v.ack.json");
    assert!(std::fs::symlink_metadata(&ack).unwrap().is_file());
    assert_eq!(mode(&ack), 0o600);
    let strays: Vec<_> = std::fs::read_dir(&stop)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(strays.is_empty(), "{strays:?}");
    // a request behind a link (to a good request elsewhere): not followed
    let elsewhere = home.join("req.json");
    std::fs::rename(request("ses_l"), &elsewhere).unwrap();
    symlink(&elsewhere, stop.join("ses_l.json")).unwrap();
    assert_eq!(d.call("ses_l", "call_2"), json!({"ran": true}));
    // another user's request file, and a stop directory another user owns or all can write to
    let nobody = 65534;
    let theirs = request("ses_o");
    let as_root = chown(&theirs, Some(nobody), Some(nobody)).is_ok();
    if as_root {
        assert_eq!(d.call("ses_o", "call_3"), json!({"ran": true}));
        std::fs::remove_file(&theirs).unwrap();
        request("ses_p");
        chown(&stop, Some(nobody), Some(nobody)).unwrap();
        assert_eq!(d.call("ses_p", "call_4"), json!({"ran": true}));
        chown(&stop, Some(0), Some(0)).unwrap();
    } else {
        eprintln!("not root: the other user's file and directory are not tried");
    }
    request("ses_w");
    std::fs::set_permissions(&stop, std::fs::Permissions::from_mode(0o777)).unwrap();
    assert_eq!(d.call("ses_w", "call_5"), json!({"ran": true}));
    std::fs::set_permissions(&stop, std::fs::Permissions::from_mode(0o700)).unwrap();
    // a FIFO, a device behind a link, a file over 64 KiB: no request, no wait
    assert!(Command::new("mkfifo")
        .arg(stop.join("ses_f.json"))
        .status()
        .unwrap()
        .success());
    symlink("/dev/zero", stop.join("ses_z.json")).unwrap();
    let big = request("ses_b");
    std::fs::OpenOptions::new()
        .append(true)
        .open(&big)
        .unwrap()
        .set_len(64 * 1024 + 1)
        .unwrap();
    for (s, c) in [
        ("ses_f", "call_6"),
        ("ses_z", "call_7"),
        ("ses_b", "call_8"),
    ] {
        let t0 = Instant::now();
        assert_eq!(d.call(s, c), json!({"ran": true}), "{s}");
        assert!(
            t0.elapsed() < Duration::from_secs(2),
            "{s}: {:?}",
            t0.elapsed()
        );
        // said once, however often it is read
        assert_eq!(d.call(s, c), json!({"ran": true}), "{s}");
    }
    let logs = d.op(json!({"op": "logs"}))["logs"].clone();
    let logs: Vec<&str> = logs
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap())
        .collect();
    for (file, why) in [
        ("ses_l.json", "not a regular file"),
        ("ses_f.json", "not a regular file"),
        ("ses_z.json", "not a regular file"),
        ("ses_b.json", "65537 bytes, more than 65536"),
    ] {
        let said = format!(
            "oc-watchdog-stop warn: {}: {why}; taken as no stop request",
            stop.join(file).display()
        );
        assert_eq!(logs.iter().filter(|l| **l == said).count(), 1, "{logs:#?}");
    }
    if as_root {
        assert!(
            logs.iter().any(|l| l.ends_with(
                "ses_o.json: owned by uid 65534, not by this user; taken as no stop request"
            )),
            "{logs:#?}"
        );
    }
    assert!(
        logs.iter()
            .any(|l| l.ends_with("writable by others (mode 777); taken as no stop request")),
        "{logs:#?}"
    );
}

// ---- a stop is checked before it is claimed (issue 42) ------------------------------------------

/// A stand-in server, configured, that speaks opencode's protocol and lists `session` as busy
/// until it is asked to abort it, then lists nothing: what a server says of a session it does
/// not run.
fn lying_server(rig: &Rig, session: &str) -> Stub {
    let s = Stub::start();
    s.json(
        "GET /global/health",
        r#"{"healthy":true,"version":"1.18.33"}"#,
    );
    s.route(
        "GET /session/status",
        Reply::After(
            format!("/session/{session}/abort"),
            Box::new(Reply::Json(
                200,
                json!({ session: {"type": "busy"} }).to_string(),
            )),
            Box::new(Reply::Json(200, "{}".into())),
        ),
    );
    s.json(&format!("POST /session/{session}/abort"), "true");
    std::fs::create_dir_all(rig.home.join(".config/oc-watchdog")).unwrap();
    std::fs::write(
        rig.home.join(".config/oc-watchdog/watchdog.toml"),
        format!("[opencode]\nservers = [\"{}\"]\n", s.url),
    )
    .unwrap();
    s
}

#[test]
fn a_server_that_stopped_listing_a_session_it_does_not_run_was_taken_for_its_stop() {
    // no plugin: the looping `opencode run` is reachable only by hand; a configured server
    // lists it as busy, takes the abort and lists it no more
    let mut rig = Rig::new(false);
    let pid = rig.run("lc_goes_on");
    let id = rig.wait_calls(10);
    let server = lying_server(&rig, &id);
    let r = rig
        .home
        .cmd("wd-store")
        .args(["stop", &id, "--wait", "3s"])
        .run();
    r.expect_code(2);
    let aborts = server
        .requests()
        .iter()
        .filter(|q| q.method == "POST" && q.path.starts_with(&format!("/session/{id}/abort")))
        .count();
    assert_eq!(aborts, 1, "{}", r.story());
    // it says what it saw and what to do, not "stopped"
    let said = r.stderr();
    eprintln!("stop figures: a server that does not run the session: {said}");
    assert!(
        said.starts_with(&format!(
            "wd-store: stop: session {id}: {} took the abort and no longer lists the session as running, but opencode's database shows its run going on: ",
            server.url
        )) && said.contains(" call(s) started after the request, ")
            && said.contains(": the server does not run it; press Esc twice in its TUI, or Ctrl-C in the terminal of its `opencode run` (the request is recorded as failed"),
        "{}",
        r.story()
    );
    assert!(r.kind("stop").is_empty(), "{}", r.story());
    // the run goes on, and the record says the stop failed
    let n = rig.calls(&id).len();
    rig.wait_calls(n + 2);
    assert!(
        Path::new(&format!("/proc/{pid}")).exists(),
        "opencode run ended"
    );
    let rows = rig.stops(&id);
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["status"], "failed");
    assert_eq!(rows[0]["via"], "http");
    assert!(
        rows[0]["calls_after_request"].as_i64().unwrap() >= 1,
        "{rows:?}"
    );
}

#[test]
fn two_stops_of_one_session_at_once_overwrote_each_others_request_and_ended_failed() {
    let mut rig = Rig::new(true);
    let pid = rig.run("lc_goes_on");
    let id = rig.wait_calls(10);
    // the operator's two stops (a `wd-store stop` and a click on the popup's action, or the
    // policy's) at the same moment
    let kids: Vec<Child> = (0..2)
        .map(|_| {
            rig.home
                .cmd("wd-store")
                .args(["stop", &id, "--wait", "5s"])
                .spawn()
        })
        .collect();
    let outs: Vec<std::process::Output> = kids
        .into_iter()
        .map(|k| k.wait_with_output().unwrap())
        .collect();
    let story: String = outs
        .iter()
        .map(|o| {
            format!(
                "--- {}\n{}{}",
                o.status,
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            )
        })
        .collect();
    eprintln!("stop figures: two stops at once:\n{story}");
    assert!(outs.iter().all(|o| o.status.success()), "{story}");
    let mut statuses: Vec<String> = outs
        .iter()
        .map(|o| {
            let v: Value = serde_json::from_slice(&o.stdout).unwrap();
            v["status"].as_str().unwrap().to_string()
        })
        .collect();
    statuses.sort();
    assert_eq!(statuses, ["already", "stopped"], "{story}");
    // one request, carried out once, recorded as stopped
    let rows = rig.stops(&id);
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["status"], "stopped", "{rows:?}");
    assert_eq!(rows[0]["via"], "plugin");
    assert_eq!(rows[0]["pid"], pid);
    rig.wait_exit(pid);
    assert_eq!(rig.last_error(&id).as_deref(), Some("MessageAbortedError"));
}

#[test]
fn a_hung_server_held_each_policy_stop_and_the_ticks_other_alerts_for_its_whole_deadline() {
    // a configured server that accepts and never answers (its deadline is the shipped 10 s)
    let hung = Stub::start();
    hung.route("GET /global/health", Reply::Hang);
    let mut rig = Rig::new(true);
    let pol = Policy::on(
        &rig,
        &format!(
            "at_escalation = true\n\n[opencode]\nservers = [\"{}\"]",
            hung.url
        ),
    );
    let pid = rig.run("lc_journey");
    let id = rig.wait_calls(10);
    let t1 = pol.tick(&rig);
    assert_eq!(events_of(&rig, &id), ["trigger"], "{}", t1.story());
    // a second loop, flagged first at the tick that escalates and stops the first
    rig.run("lc_journey");
    let other = rig.wait_calls(10);
    let n = rig.calls(&id).len();
    rig.wait_calls_of(&id, n + 3);
    let t2 = pol.tick(&rig);
    assert_eq!(
        events_of(&rig, &id),
        ["trigger", "escalate still_looping", "resolve stopped"],
        "{}",
        t2.story()
    );
    assert_eq!(events_of(&rig, &other), ["trigger"], "{}", t2.story());
    let (requested, stopped, via, by): (i64, i64, String, i64) = rig
        .watchdog_db()
        .query_row(
            "SELECT t, stopped, via, pid FROM stops WHERE session = ?1 AND status = 'stopped'",
            [&id],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )
        .unwrap_or_else(|e| panic!("no stop of {id}: {e}\n{}", t2.story()));
    assert_eq!((via.as_str(), by), ("plugin", pid as i64));
    // the other loop's trigger reached the webhook before the stop began, not after it ended
    let hooked = pol.hook.requests();
    let triggered = hooked
        .iter()
        .find(|r| {
            r.path == "/hook"
                && serde_json::from_str::<Value>(&r.body)
                    .is_ok_and(|v| v["root"] == other.as_str() && v["state"] == "trigger")
        })
        .unwrap_or_else(|| panic!("no trigger of {other} hooked\n{}", t2.story()));
    eprintln!(
        "stop figures: policy stop beside a hung server: {} ms from its request to the stop; \
         the other loop's trigger hooked {} ms after the stop's request",
        stopped - requested,
        triggered.at_ms - requested
    );
    assert!(
        triggered.at_ms <= requested,
        "the other loop's trigger waited for the stop"
    );
    // the hung server was asked for at most its bound (2 s), not its 10 s deadline; the
    // plugin's request did not expire while it was asked
    assert!(
        stopped - requested < 8_000,
        "{} ms from the request to the stop",
        stopped - requested
    );
}

// ---- the popup's stop action, chosen in dunst -------------------------------------------------

/// The installed follow service, started by hand as a user without systemd does, on `desk`'s
/// bus; ended with its whole process group when dropped.
struct Following(Child);

impl Following {
    fn start(rig: &Rig, desk: &Desktop) -> Following {
        use std::os::unix::process::CommandExt;
        let h = rig.home.path();
        let child = crate::support::installed_cmd(
            h.join(".local/bin/oc-watchdog-follow").to_str().unwrap(),
            h,
        )
        .env("DBUS_SESSION_BUS_ADDRESS", &desk.bus)
        .env("DISPLAY", &desk.display)
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(rig.home.join("follow.err")).unwrap())
        .spawn()
        .expect("oc-watchdog-follow");
        Following(child)
    }
}

impl Drop for Following {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", "--", &format!("-{}", self.0.id())])
            .stderr(Stdio::null())
            .status();
        let _ = self.0.wait();
    }
}

/// Waits (at most `secs`) for a notification about `session` whose summary starts so.
fn heard(
    desk: &Desktop,
    rig: &Rig,
    session: &str,
    summary: &str,
    secs: u64,
) -> crate::support::desktop::Seen {
    let t0 = Instant::now();
    loop {
        if let Some(s) = desk
            .seen()
            .into_iter()
            .find(|s| s.summary.starts_with(summary) && s.body.contains(session))
        {
            return s;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(secs),
            "no {summary:?} notification about {session} in {secs} s\n{:?}\n--- follow.err\n{}",
            desk.seen(),
            std::fs::read_to_string(rig.home.join("follow.err")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Issue 41: a click on the popup's stop action was told as "(wd-store stop)", and no test
/// clicked a real popup. The follow service's trigger of a looping `opencode run` offers
/// "Stop the session" in dunst; a person picks it from dunst's context menu; dunst sends the
/// action to the click helper, which stops the session through the plugin. Nothing runs after
/// the stop (opencode's own record), the stop is the operator's by the popup everywhere it is
/// told (the run's own output, `wd-store alerts`, the page, the resolve popup), and the resolve
/// popup says which session, who stopped it and how to resume, which works when followed.
#[test]
fn the_popups_stop_action_chosen_in_dunst_stops_the_loop_and_is_told_as_the_operators() {
    let desk = Desktop::with_menu();
    let mut rig = Rig::new(true);
    let _follow = Following::start(&rig, &desk);
    // 50 reads half a second apart: the click comes within the first ten
    let pid = rig.run("lc_goes_on");
    let id = rig.wait_calls(1);
    let trigger = heard(&desk, &rig, &id, "opencode loop: ", 120);
    assert!(
        trigger.strings.iter().any(|s| s == "Stop the session"),
        "{trigger:?}"
    );
    let menu = desk.choose("Stop the session");
    assert!(
        menu.lines().any(
            |l| l.starts_with(&format!("#Stop the session ({}) [", trigger.summary))
                && l.ends_with(",stop]")
        ),
        "{menu}"
    );
    // the run ends, aborted, and says who stopped it and how to resume
    rig.wait_exit(pid);
    assert_eq!(rig.last_error(&id).as_deref(), Some("MessageAbortedError"));
    let err = std::fs::read_to_string(rig.home.join("run.err")).unwrap();
    assert!(
        err.contains(&format!(
            "\noc-watchdog: The operator stopped this session (the popup's stop action) \
             (session {id}). Resume it with: opencode run -s {id} \"continue\"\n"
        )),
        "{err}"
    );
    // the helper records the stop once the plugin acknowledged it
    let t0 = Instant::now();
    let rows = loop {
        let rows = rig.stops(&id);
        if rows.len() != 1 || rows[0]["status"] != "requested" {
            break rows;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the stop is still requested: {rows:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    eprintln!(
        "stop recorded {} ms after the run ended",
        t0.elapsed().as_millis()
    );
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(
        (&rows[0]["reason"], &rows[0]["status"], &rows[0]["via"]),
        (&json!("popup"), &json!("stopped"), &json!("plugin"))
    );
    assert_eq!(rows[0]["pid"], pid);
    let stop_t: i64 = rig
        .watchdog_db()
        .query_row("SELECT stopped FROM stops WHERE session = ?1", [&id], |r| {
            r.get(0)
        })
        .unwrap();
    let calls = rig.calls(&id);
    nothing_after(&calls, stop_t);
    assert!(calls.len() < 50, "the loop ran to its end: {}", calls.len());

    // the resolve popup: which session, who stopped it, after how much, how to resume
    let resolve = heard(
        &desk,
        &rig,
        &id,
        "stopped by the operator (the popup's stop action): opencode loop: ",
        60,
    );
    let summary = resolve.body.lines().next().unwrap().to_string();
    let lead = format!(
        "session {id} \"Scripted session\" in ~/proj stopped by the operator (the popup's stop \
         action) after "
    );
    let advice = format!(
        "; resume with `opencode -s {id}` (its TUI) or `opencode run -s {id} \"continue\"`"
    );
    assert!(
        summary.starts_with(&lead) && summary.ends_with(&advice),
        "{}",
        resolve.body
    );
    // it stays until dismissed: the session waits to be resumed
    assert_eq!(resolve.expire, Some(0), "{resolve:?}");
    let (reason, told): (String, String) = rig
        .watchdog_db()
        .query_row(
            "SELECT p.reason, json_extract(e.body, '$.summary') FROM episodes p
             JOIN events e ON e.episode = p.id AND e.state = 'resolve'
             WHERE p.dedup_key = ?1",
            [format!("loop:{id}")],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(reason, "stopped");
    assert_eq!(told, summary);
    // `wd-store alerts` and the page say the same
    let alerts = rig
        .home
        .cmd("wd-store")
        .args(["alerts", "--since", "1h"])
        .run();
    let ep = alerts
        .kind("episode")
        .into_iter()
        .find(|e| e["session"] == id.as_str())
        .unwrap_or_else(|| panic!("{}", alerts.story()));
    let line = ep["stop"].as_str().unwrap_or_default().to_string();
    assert!(
        line.starts_with(&format!(
            "session {id} stopped by the operator (the popup's stop action) via plugin, "
        )),
        "{ep}"
    );
    let page = rig.home.join(".local/state/oc-watchdog/report.html");
    let t0 = Instant::now();
    loop {
        let html = std::fs::read_to_string(&page).unwrap_or_default();
        if html.contains("stopped by the operator (the popup&#39;s stop action) via plugin") {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the page does not tell the popup's stop"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // the advice works when followed
    rig.follow_resume_advice(&id, &summary);
}
