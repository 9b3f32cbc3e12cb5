//! The proof of issue #11, as a new user meets it: the watchdog installed into a temp HOME that
//! opencode shares, no watchdog configuration written, a real `opencode run` looping with the
//! scripted model (no port: only the database shows it), then a real `opencode serve` on a
//! random port nobody configured, in a second project. Then the proof of issue #27: the follow
//! service hears of a looping `opencode run` and of a looping TUI under tmux within calls of
//! the flag point, and of each one's end.

use crate::support::ocsim::{self, http};
use crate::support::tui::Tui;
use crate::support::Home;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The watchdog installed into a temp HOME that opencode shares, as a new user has it.
struct Machine {
    home: Home,
    desk: &'static crate::support::desktop::Desktop,
    kids: Vec<std::process::Child>,
}

impl Machine {
    fn install() -> Machine {
        let m = Machine {
            home: Home::new(),
            desk: crate::support::desktop::Desktop::shared(),
            kids: Vec::new(),
        };
        let bins = assert_cmd::cargo::cargo_bin("wd-store")
            .parent()
            .unwrap()
            .to_path_buf();
        let r = m.run(
            crate::support::repo()
                .join("deploy/install")
                .to_str()
                .unwrap(),
            &["--from", bins.to_str().unwrap()],
        );
        r.ok();
        m
    }

    fn cmd(&self, prog: &str) -> std::process::Command {
        let h = self.home.path();
        let mut c = crate::support::installed_cmd(prog, h);
        c.env("DBUS_SESSION_BUS_ADDRESS", &self.desk.bus)
            .env("DISPLAY", &self.desk.display);
        c
    }

    fn run(&self, prog: &str, args: &[&str]) -> crate::support::Run {
        let out = self.cmd(prog).args(args).output().unwrap();
        crate::support::Run {
            shown: format!("{prog} {}", args.join(" ")),
            out,
        }
    }

    fn sh(&self, script: &str) -> crate::support::Run {
        self.run("sh", &["-c", script])
    }

    fn tick(&self) -> crate::support::Run {
        let r = self.run(
            self.home
                .join(".local/bin/oc-watchdog-tick")
                .to_str()
                .unwrap(),
            &[],
        );
        r.ok();
        r
    }

    /// `opencode run` on `script` in `proj`, in the background, its output in `{name}.out` and
    /// `{name}.err`; its pid.
    fn run_in(&mut self, proj: &Path, name: &str, script: &str) -> u32 {
        let run = ocsim::opencode(self.home.path(), proj)
            .args(["run", &format!("SCRIPT:{script} go")])
            .stdin(std::process::Stdio::null())
            .stdout(std::fs::File::create(self.home.join(&format!("{name}.out"))).unwrap())
            .stderr(std::fs::File::create(self.home.join(&format!("{name}.err"))).unwrap())
            .spawn()
            .expect("opencode run");
        let pid = run.id();
        self.kids.push(run);
        pid
    }

    fn project(&self, name: &str) -> PathBuf {
        let p = self.home.join(&format!("work/{name}"));
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        ocsim::make_project(&p);
        p
    }

    fn db(&self) -> PathBuf {
        self.home.join(".local/share/opencode/opencode.db")
    }

    /// The session of `proj` and its tool calls so far, once it has at least `n`.
    fn wait_calls(&self, proj: &Path, n: i64) -> String {
        let t0 = Instant::now();
        loop {
            if let Ok(c) = rusqlite::Connection::open_with_flags(
                self.db(),
                rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
            ) {
                let got: rusqlite::Result<(String, i64)> = c.query_row(
                    "SELECT s.id, (SELECT count(*) FROM part p WHERE p.session_id = s.id
                        AND p.data LIKE '%\"type\":\"tool\"%') FROM session s
                     WHERE s.directory = ?1 ORDER BY s.time_created DESC LIMIT 1",
                    [proj.to_str().unwrap()],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                );
                if let Ok((id, k)) = got {
                    if k >= n {
                        return id;
                    }
                }
            }
            assert!(
                t0.elapsed() < Duration::from_secs(120),
                "no session in {} with {n} calls\n--- run.out\n{}\n--- run.err\n{}",
                proj.display(),
                std::fs::read_to_string(self.home.join("run.out")).unwrap_or_default(),
                std::fs::read_to_string(self.home.join("run.err")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(300));
        }
    }

    fn transitions(r: &crate::support::Run) -> Vec<String> {
        r.stderr()
            .lines()
            .filter(|l| l.starts_with("oc-watchdog: dedup="))
            .map(|l| l.split(" title=").next().unwrap().to_string())
            .collect()
    }

    fn last_outcome(&self) -> String {
        rusqlite::Connection::open(self.home.join(".local/state/oc-watchdog/watchdog.db"))
            .unwrap()
            .query_row(
                "SELECT outcome FROM ticks ORDER BY id DESC LIMIT 1",
                [],
                |r| r.get(0),
            )
            .unwrap()
    }
}

impl Drop for Machine {
    fn drop(&mut self) {
        for k in &mut self.kids {
            // the follow service's script leads its own process group: the whole pipeline goes
            let _ = std::process::Command::new("kill")
                .args(["-INT", "--", &format!("-{}", k.id())])
                .stderr(std::process::Stdio::null())
                .status();
            // opencode serve ignores SIGTERM while busy; SIGINT stops it
            let _ = std::process::Command::new("kill")
                .args(["-INT", &k.id().to_string()])
                .status();
        }
        std::thread::sleep(Duration::from_millis(500));
        for k in &mut self.kids {
            let _ = k.kill();
            let _ = k.wait();
        }
    }
}

#[test]
fn a_new_users_opencode_run_loop_and_an_unconfigured_serve_are_seen_with_no_configuration() {
    let mut m = Machine::install();
    assert_eq!(
        std::fs::read_to_string(m.home.join(".config/oc-watchdog/watchdog.toml")).unwrap(),
        std::fs::read_to_string(crate::support::repo().join("config/watchdog.toml")).unwrap(),
        "the installed config is the default one, untouched"
    );
    assert_eq!(m.last_outcome(), "no_agent");
    let fake = ocsim::Fake::start();
    fake.configure(m.home.path());

    // a plain `opencode run` looping: no port, no server, only the database
    let a = m.project("proj_a");
    let run = ocsim::opencode(m.home.path(), &a)
        .args(["run", "SCRIPT:slow_reread40 go"])
        .stdin(std::process::Stdio::null())
        .stdout(std::fs::File::create(m.home.join("run.out")).unwrap())
        .stderr(std::fs::File::create(m.home.join("run.err")).unwrap())
        .spawn()
        .expect("opencode run");
    m.kids.push(run);
    let looping = m.wait_calls(&a, 10);
    let r = m.tick();
    assert!(
        m.kids[0].try_wait().unwrap().is_none(),
        "opencode run finished before the tick"
    );
    assert_eq!(m.last_outcome(), "flagged", "{}", r.story());
    assert_eq!(
        Machine::transitions(&r),
        [format!(
            "oc-watchdog: dedup=loop:{looping} state=trigger severity=warning"
        )]
    );
    let src = m.sh("oc-sessions | jq -c 'select(.kind==\"source\")'");
    src.ok();
    let sources: Vec<Value> = src.records();
    assert_eq!(sources.len(), 1, "{}", src.story());
    assert_eq!(sources[0]["source"], m.db().to_str().unwrap());
    assert_eq!(sources[0]["found"], json!(["default"]));

    // a real `opencode serve` on a random port nobody configured, in a second project
    let b = m.project("proj_b");
    let port = ocsim::random_port();
    let serve = ocsim::opencode(m.home.path(), &b)
        .args([
            "serve",
            "--hostname",
            "127.0.0.1",
            "--port",
            &port.to_string(),
        ])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("opencode serve");
    let pid = serve.id();
    m.kids.push(serve);
    let url = format!("http://127.0.0.1:{port}");
    let t0 = Instant::now();
    while ureq::get(&format!("{url}/global/health"))
        .timeout(Duration::from_secs(2))
        .call()
        .is_err()
    {
        assert!(t0.elapsed() < Duration::from_secs(60), "serve not healthy");
        std::thread::sleep(Duration::from_millis(200));
    }
    let (code, ses) = http("POST", &format!("{url}/session"), Some(&json!({})));
    assert_eq!(code, 200, "{ses}");
    let served = ses["id"].as_str().unwrap().to_string();
    let (code, v) = http(
        "POST",
        &format!("{url}/session/{served}/prompt_async"),
        Some(&json!({"parts": [{"type": "text", "text": "SCRIPT:slow_reread40 go"}]})),
    );
    assert!(code < 300, "{v}");
    assert_eq!(m.wait_calls(&b, 10), served);

    let listed = m.sh("oc-sessions --since 10m");
    listed.ok();
    let server = listed
        .kind("source")
        .into_iter()
        .find(|s| s["reader"] == "server")
        .unwrap_or_else(|| panic!("the serve was not found\n{}", listed.story()));
    assert_eq!(server["source"], url.as_str());
    assert_eq!(server["found"], json!(["discovered"]));
    assert_eq!(server["pids"], json!([pid]));
    let sessions = listed.kind("session");
    let s = sessions
        .iter()
        .find(|s| s["id"] == served.as_str())
        .unwrap();
    assert_eq!(s["status"], "busy", "{}", listed.story());
    assert_eq!(s["source"], url.as_str());
    assert_eq!(s["sources"], json!([url, m.db().to_str().unwrap()]));
    assert!(sessions.iter().any(|s| s["id"] == looping.as_str()));
    // judged once, on each call once
    let judged = m.sh("oc-sessions --since 10m | oc-calls | progress-detect");
    judged.ok();
    let verdicts: Vec<Value> = judged
        .kind("verdict")
        .into_iter()
        .filter(|v| v["session"] == served.as_str())
        .collect();
    assert_eq!(verdicts.len(), 1, "{}", judged.story());
    let calls = m.sh("oc-sessions --since 10m | oc-calls");
    let ids: Vec<String> = calls
        .kind("call")
        .iter()
        .filter(|c| c["session"] == served.as_str())
        .map(|c| c["id"].as_str().unwrap().to_string())
        .collect();
    let distinct: std::collections::HashSet<&String> = ids.iter().collect();
    assert_eq!(ids.len(), distinct.len(), "a call written twice");
    assert_eq!(verdicts[0]["flagged"], true);
    let r = m.tick();
    assert_eq!(
        Machine::transitions(&r),
        [format!(
            "oc-watchdog: dedup=loop:{served} state=trigger severity=warning"
        )],
        "{}",
        r.story()
    );
    assert_eq!(m.last_outcome(), "flagged");
}

impl Machine {
    /// The follow service's script as systemd runs it (its own process group, killed whole
    /// when the machine is dropped), logging to `follow.err`.
    fn follow(&mut self) {
        use std::os::unix::process::CommandExt;
        let child = self
            .cmd(
                self.home
                    .join(".local/bin/oc-watchdog-follow")
                    .to_str()
                    .unwrap(),
            )
            .process_group(0)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(self.home.join("follow.err")).unwrap())
            .spawn()
            .expect("oc-watchdog-follow");
        self.kids.push(child);
    }

    fn watchdog(&self) -> rusqlite::Connection {
        rusqlite::Connection::open(self.home.join(".local/state/oc-watchdog/watchdog.db")).unwrap()
    }

    /// The tool calls of `session` in opencode's database now.
    fn calls_now(&self, session: &str) -> i64 {
        rusqlite::Connection::open_with_flags(
            self.db(),
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
        )
        .unwrap()
        .query_row(
            "SELECT count(*) FROM part WHERE session_id = ?1 AND data LIKE '%\"type\":\"tool\"%'",
            [session],
            |r| r.get(0),
        )
        .unwrap()
    }

    /// Waits (at most `secs`) for a notification about `session` whose summary starts so.
    fn heard(&self, session: &str, summary: &str, secs: u64) -> crate::support::desktop::Seen {
        let t0 = Instant::now();
        loop {
            if let Some(s) = self
                .desk
                .seen()
                .into_iter()
                .find(|s| s.summary.starts_with(summary) && s.body.contains(session))
            {
                return s;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(secs),
                "no {summary:?} notification about {session} in {secs} s\n--- follow.err\n{}",
                std::fs::read_to_string(self.home.join("follow.err")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Machine {
    /// Installed, with the follow service running as a new user enables it, and its first
    /// (full) read recorded before any opencode runs. Full reads are set ten minutes apart, so
    /// whatever the test hears after that came from a partial read.
    fn following(fake: &ocsim::Fake) -> Machine {
        Machine::following_with(fake, str::to_string)
    }

    /// [`Machine::following`], the installed config edited by `edit` first.
    fn following_with(fake: &ocsim::Fake, edit: fn(&str) -> String) -> Machine {
        let mut m = Machine::install();
        fake.configure(m.home.path());
        let cfg = m.home.join(".config/oc-watchdog/watchdog.toml");
        let text = std::fs::read_to_string(&cfg).unwrap();
        assert!(
            text.contains("full_every_secs = 60\n"),
            "the shipped [follow]"
        );
        std::fs::write(
            &cfg,
            edit(&text).replace("full_every_secs = 60\n", "full_every_secs = 600\n"),
        )
        .unwrap();
        m.follow();
        let t0 = Instant::now();
        while m.full_reads() == 0 {
            assert!(
                t0.elapsed() < Duration::from_secs(60),
                "the follow service recorded no tick"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        m
    }

    /// The follow service's full reads so far.
    fn full_reads(&self) -> i64 {
        self.watchdog()
            .query_row("SELECT count(*) FROM ticks WHERE full = 1", [], |r| {
                r.get(0)
            })
            .unwrap_or(0)
    }

    /// The trigger about `session` heard on the desktop, once it came from a partial read
    /// within two calls of the detector's flag point.
    fn heard_trigger_at_flag_point(&self, session: &str) -> crate::support::desktop::Seen {
        let trigger = self.heard(session, "opencode loop", 120);
        let at_notify = self.calls_now(session);
        let (flag_index, full): (i64, bool) = self
            .watchdog()
            .query_row(
                "SELECT v.first_flag_index, t.full FROM verdicts v JOIN ticks t ON t.id = v.tick
                 WHERE v.session = ?1 AND v.flagged = 1 ORDER BY v.tick LIMIT 1",
                [session],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        assert!(!full, "the trigger came from a partial read");
        assert!(
            at_notify <= flag_index + 2,
            "heard of the loop {} calls after its flag point (call {flag_index})",
            at_notify - flag_index
        );
        trigger
    }

    /// The follow service's log (its stderr).
    fn follow_log(&self) -> String {
        std::fs::read_to_string(self.home.join("follow.err")).unwrap()
    }

    /// The follow service's alert transitions about `session`, as its log has them.
    fn follow_transitions(&self, session: &str) -> Vec<String> {
        self.follow_log()
            .lines()
            .filter(|l| l.starts_with("oc-watchdog: dedup=") && l.contains(session))
            .map(|l| l.split(" title=").next().unwrap().to_string())
            .collect()
    }
}

/// Issue 27: a new user runs the follow service and hears of a looping `opencode run` within a
/// few calls of the point where the detector flags it, from a partial read (full reads are set
/// ten minutes apart, so nothing here waits for one), and of its end when it is interrupted
/// with Ctrl-C.
#[test]
fn a_new_user_following_hears_of_a_loop_within_calls_of_its_flag_point_and_of_its_end() {
    let fake = ocsim::Fake::start();
    let m = Machine::following(&fake);

    // in a terminal, as people run it. The script's 200 calls last about 2 min, so the run
    // cannot end by itself before the Ctrl-C, as a 40-call one did under CI's load (its resolve
    // then said "idle", not "ended")
    let a = m.project("proj_a");
    let run = Tui::start(ocsim::opencode(m.home.path(), &a).args(["run", "SCRIPT:lc_journey go"]));
    let looping = m.wait_calls(&a, 1);
    let trigger = m.heard_trigger_at_flag_point(&looping);
    assert!(trigger.body.contains("work/proj_a"), "{}", trigger.body);

    // Ctrl-C: the episode resolves, the process ended, without waiting for a full read
    // opencode 1.18.33's `run` goes on after a first Ctrl-C and stops at the second (as in
    // tick.rs), so a person presses it again
    let mut presses = 0;
    while run.running() && presses < 3 {
        run.keys(&["C-c"]);
        presses += 1;
        let t0 = Instant::now();
        while run.running() && t0.elapsed() < Duration::from_secs(3) {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    run.wait_gone(10);
    let calls = m.calls_now(&looping);
    assert!(calls < 150, "the run went on to its end: {calls} calls");
    let resolved = m.heard(&looping, "resolved", 60);
    assert!(
        // or, when a read saw the abort opencode records before its process was gone
        resolved.body.contains("the opencode process ended")
            || resolved
                .body
                .contains("interrupted by the user (Esc in the TUI, Ctrl-C"),
        "{}",
        resolved.body
    );
    // follow mode's ticks come every second: their count says nothing to a person
    assert!(!resolved.body.contains("flagged tick"), "{}", resolved.body);
    assert_eq!(
        m.follow_transitions(&looping),
        [
            format!("oc-watchdog: dedup=loop:{looping} state=trigger severity=warning"),
            format!("oc-watchdog: dedup=loop:{looping} state=resolve severity=info reason=stopped"),
        ],
        "{}",
        m.follow_log()
    );
}

/// An operator's journey: an `opencode run` killed while a second opencode worked in the same
/// project (there a TUI) stayed "busy and silent" for six minutes, its loop open and critical,
/// until the other process quit. The run that ran the session has ended, whatever else works in
/// its directory: the loop resolves within seconds, and the other run's session goes on.
#[test]
fn a_killed_run_resolves_though_another_opencode_works_in_its_project() {
    let fake = ocsim::Fake::start();
    let mut m = Machine::following(&fake);
    let a = m.project("proj_a");
    let first = m.run_in(&a, "run1", "slow_reread40");
    let looping = m.wait_calls(&a, 1);
    m.heard_trigger_at_flag_point(&looping);
    // 200 reads half a second apart: it outlasts the test
    let _second = m.run_in(&a, "run2", "lc_journey");
    let other = loop {
        let latest = m.wait_calls(&a, 1);
        if latest != looping {
            break latest;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    // no Ctrl-C, which may leave an abort in the database: the process is gone, nothing else
    let st = std::process::Command::new("kill")
        .args(["-KILL", &first.to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let killed = Instant::now();
    let resolved = m.heard(&looping, "resolved", 60);
    assert!(
        resolved.body.contains("the opencode process ended"),
        "{}",
        resolved.body
    );
    eprintln!(
        "the killed run's loop resolved {:.1} s after the kill",
        killed.elapsed().as_secs_f64()
    );
    let before = m.calls_now(&other);
    std::thread::sleep(Duration::from_secs(3));
    assert!(m.calls_now(&other) > before, "the second run goes on");
    assert!(
        !m.follow_transitions(&other)
            .iter()
            .any(|t| t.contains("state=resolve")),
        "{}",
        m.follow_log()
    );
}

/// Issue 27, the TUI half: a new user runs the follow service, then the opencode TUI in a tmux
/// pane on a looping prompt. The desktop notification names the project within two calls of the
/// flag point, from a partial read; quitting the TUI (one Ctrl-C quits opencode 1.18.33's TUI,
/// even mid-reply, and records the reply as aborted) resolves the episode with the process gone,
/// still without a full read.
#[test]
fn a_new_user_following_hears_of_a_looping_tui_session_under_tmux_and_of_its_quit() {
    let fake = ocsim::Fake::start();
    let m = Machine::following(&fake);
    let p = m.project("proj_t");
    let tui = Tui::start(
        ocsim::opencode(m.home.path(), &p).args(["--prompt", "SCRIPT:slow_reread40 go"]),
    );
    let looping = m.wait_calls(&p, 1);
    let trigger = m.heard_trigger_at_flag_point(&looping);
    assert!(trigger.body.contains("work/proj_t"), "{}", trigger.body);
    assert!(tui.running(), "the TUI quit before the trigger");
    // the TUI draws what it runs a moment later on a loaded machine
    tui.wait_pane("Read docs/spec.md", 30);
    let calls = m.calls_now(&looping);
    assert!(
        calls < 40,
        "the loop ran out ({calls} calls) before the trigger"
    );

    tui.keys(&["C-c"]);
    tui.wait_gone(10);
    let resolved = m.heard(&looping, "resolved", 60);
    assert!(
        // or, when a read saw the abort opencode records before its process was gone
        resolved.body.contains("the opencode process ended")
            || resolved
                .body
                .contains("interrupted by the user (Esc in the TUI, Ctrl-C"),
        "{}",
        resolved.body
    );
    // the read that saw the process gone was a partial one (the full reads here are the first
    // and those of opencode's database appearing, before the TUI's first call)
    let full: bool = m
        .watchdog()
        .query_row(
            "SELECT t.full FROM verdicts v JOIN ticks t ON t.id = v.tick
             WHERE v.session = ?1 AND json_extract(v.liveness, '$.class') = 'ended'
             ORDER BY v.tick LIMIT 1",
            [&looping],
            |r| r.get(0),
        )
        .unwrap();
    assert!(!full, "the process's end was seen by a full read");
    assert!(m.calls_now(&looping) < 40);
    assert_eq!(
        m.follow_transitions(&looping),
        [
            format!("oc-watchdog: dedup=loop:{looping} state=trigger severity=warning"),
            format!("oc-watchdog: dedup=loop:{looping} state=resolve severity=info reason=stopped"),
        ],
        "{}",
        m.follow_log()
    );
}

/// Issue 41: a TUI session waiting for a person (a permission prompt, a question), which has no
/// server to ask, is told within seconds by the follow service from opencode's database alone,
/// as its own kind ("needs a person", saying where to answer), stays on screen, and resolves
/// once the person answered.
#[test]
fn a_tui_waiting_for_a_person_is_told_within_seconds_and_stays_until_answered() {
    let fake = ocsim::Fake::start();
    let m = Machine::following(&fake);
    // the question tool, which the shared config denies
    let oc = m.home.join(".config/opencode/opencode.json");
    let text = std::fs::read_to_string(&oc).unwrap();
    std::fs::write(
        &oc,
        text.replace("\"question\": \"deny\"", "\"question\": \"allow\""),
    )
    .unwrap();

    // a permission prompt: the "asker" agent asks before bash
    let p = m.project("proj_ask");
    let tui = Tui::start(ocsim::opencode(m.home.path(), &p).args([
        "--agent",
        "asker",
        "--prompt",
        "SCRIPT:ask_bash go",
    ]));
    let asking = m.wait_calls(&p, 1);
    let t_call = Instant::now();
    let told = m.heard(&asking, "opencode asker session needs a person", 60);
    let after = t_call.elapsed();
    tui.wait_pane("Permission required", 30);
    assert!(
        told.body
            .contains("a bash call waits for a person's permission (for ")
            && told.body.contains("answer it in its TUI")
            && told.body.contains("work/proj_ask"),
        "{}",
        told.body
    );
    // what needs a person stays until dismissed
    assert_eq!(told.expire, Some(0));
    eprintln!(
        "permission prompt told {:.1} s after its call was seen",
        after.as_secs_f64()
    );
    assert!(after < Duration::from_secs(30), "told after {after:?}");
    // answered (allow once): the command runs, the turn ends, the alert resolves
    tui.keys(&["Enter"]);
    let resolved = m.heard(&asking, "resolved", 60);
    assert!(
        resolved.summary.contains("needs a person"),
        "{}",
        resolved.summary
    );

    // a question
    let q = m.project("proj_q");
    let tui_q =
        Tui::start(ocsim::opencode(m.home.path(), &q).args(["--prompt", "SCRIPT:ask_question go"]));
    let questioning = m.wait_calls(&q, 1);
    let told = m.heard(&questioning, "opencode build session needs a person", 30);
    // the notice may come before the TUI draws the question (stop 48, under load: "Asking
    // questions…" on screen)
    tui_q.wait_pane("Which database should the report use?", 30);
    assert!(
        told.body
            .contains("a question waits for a person's answer (for ")
            && told.body.contains("answer it in its TUI"),
        "{}",
        told.body
    );
    assert_eq!(
        m.follow_transitions(&asking),
        [
            format!("oc-watchdog: dedup=waiting:{asking} state=trigger severity=info"),
            format!(
                "oc-watchdog: dedup=waiting:{asking} state=resolve severity=info reason=recovered"
            ),
        ],
        "{}",
        m.follow_log()
    );
}

/// Issue 42: opencode's database deleted, then replaced by an older copy, while an `opencode
/// run` loops: the run writes the file it holds, which nobody else can read. Each tick says the
/// watchdog is blind (naming the process), not "no opencode", and the loop's alert stays open
/// rather than resolving as gone.
#[test]
fn a_database_deleted_or_replaced_under_a_running_opencode_is_blindness() {
    let mut m = Machine::install();
    let fake = ocsim::Fake::start();
    fake.configure(m.home.path());
    let a = m.project("proj_del");
    let pid = m.run_in(&a, "run", "lc_journey");
    let looping = m.wait_calls(&a, 8);
    let r = m.tick();
    assert_eq!(
        Machine::transitions(&r),
        [format!(
            "oc-watchdog: dedup=loop:{looping} state=trigger severity=warning"
        )],
        "{}",
        r.story()
    );
    let db = m.db();
    let old = m.home.join("opencode-old.db");
    std::fs::copy(&db, &old).unwrap();

    // deleted (with its journal files), as `rm -f ~/.local/share/opencode/opencode.db*` does
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
    }
    let r = m.tick();
    assert!(m.kids[0].try_wait().unwrap().is_none(), "the run ended");
    assert_eq!(m.last_outcome(), "blind", "{}", r.story());
    assert_eq!(
        Machine::transitions(&r),
        ["oc-watchdog: dedup=watchdog-blind state=trigger severity=warning"],
        "{}",
        r.story()
    );
    let said = format!(
        "opencode (pid {pid} in {}) writes a database that was deleted or replaced at this path \
         since it started: its sessions cannot be read until that opencode is restarted",
        a.display()
    );
    let body: String = m
        .watchdog()
        .query_row(
            "SELECT body FROM events WHERE dedup_key = 'watchdog-blind' ORDER BY id DESC LIMIT 1",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(body.contains(&said), "{body}");

    // an older copy put in its place: the run still writes the deleted file
    std::fs::rename(&old, &db).unwrap();
    let r = m.tick();
    assert!(m.kids[0].try_wait().unwrap().is_none(), "the run ended");
    assert_eq!(m.last_outcome(), "blind", "{}", r.story());
    // nothing resolves: the blind alert stays open, and so does the loop's
    assert_eq!(
        Machine::transitions(&r),
        Vec::<String>::new(),
        "{}",
        r.story()
    );
    let open: Vec<String> = m
        .watchdog()
        .prepare("SELECT dedup_key FROM episodes WHERE state = 'open' ORDER BY dedup_key")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(open, [format!("loop:{looping}"), "watchdog-blind".into()]);
}

/// Issue 40: the timer's tick, like the follow service, tells a killed `opencode run` from
/// another opencode working in its project: it keeps the runs it saw (`runs.json` in the state
/// directory), so the next tick resolves the killed run's loop "the opencode process ended"
/// while the other run goes on (before, its loop stayed open, the session busy for ever beside
/// the other run).
#[test]
fn the_timer_resolves_a_killed_run_though_another_opencode_works_in_its_project() {
    let mut m = Machine::install();
    let fake = ocsim::Fake::start();
    fake.configure(m.home.path());
    let a = m.project("proj_k");
    let first = m.run_in(&a, "run1", "lc_journey");
    let looping = m.wait_calls(&a, 8);
    let _second = m.run_in(&a, "run2", "lc_journey");
    let other = loop {
        let latest = m.wait_calls(&a, 1);
        if latest != looping {
            break latest;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let r = m.tick();
    assert!(
        Machine::transitions(&r).contains(&format!(
            "oc-watchdog: dedup=loop:{looping} state=trigger severity=warning"
        )),
        "{}",
        r.story()
    );
    let runs = std::fs::read_to_string(m.home.join(".local/state/oc-watchdog/runs.json")).unwrap();
    assert!(runs.contains(&format!("\"pid\":{first},")), "{runs}");
    let st = std::process::Command::new("kill")
        .args(["-KILL", &first.to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    std::thread::sleep(Duration::from_millis(500));
    let r = m.tick();
    let t = Machine::transitions(&r);
    assert!(
        t.contains(&format!(
            "oc-watchdog: dedup=loop:{looping} state=resolve severity=info reason=stopped"
        )),
        "{}",
        r.story()
    );
    assert!(
        !t.iter()
            .any(|x| x.contains(&other) && x.contains("state=resolve")),
        "{}",
        r.story()
    );
    let body: String = m
        .watchdog()
        .query_row(
            "SELECT json_extract(body, '$.summary') FROM events
             WHERE dedup_key = ?1 AND state = 'resolve'",
            [format!("loop:{looping}")],
            |r| r.get(0),
        )
        .unwrap();
    assert!(body.contains("the opencode process ended"), "{body}");
}

impl Machine {
    /// Turns the done notices on, as an operator does: one line of the installed config.
    fn opt_in_done(&self) {
        let cfg = self.home.join(".config/oc-watchdog/watchdog.toml");
        let text = std::fs::read_to_string(&cfg).unwrap();
        std::fs::write(&cfg, done_on(&text)).unwrap();
    }

    /// What dunst holds of the notification about `session` whose summary is `summary`.
    fn in_dunst(&self, session: &str, summary: &str) -> Value {
        self.desk
            .dunst_history()
            .into_iter()
            .find(|e| {
                e["summary"]["data"] == summary
                    && e["body"]["data"]
                        .as_str()
                        .is_some_and(|b| b.contains(session))
            })
            .unwrap_or_else(|| panic!("dunst holds no {summary:?} about {session}"))
    }
}

/// A watchdog config with the done notices turned on.
fn done_on(config: &str) -> String {
    assert!(
        config.contains("\nnotify_done = false\n"),
        "the shipped [alert]"
    );
    config.replace("\nnotify_done = false\n", "\nnotify_done = true\n")
}

/// The words of the done notice of a `healthy` run in `~/work/proj_done`: its session, title
/// and project, and what its turn landed (the edit, the new file, the commit).
fn assert_told_done(told: &crate::support::desktop::Seen, session: &str) {
    assert_eq!(told.summary, "opencode build session finished its work");
    let first = told.body.lines().next().unwrap();
    assert_eq!(
        first,
        format!(
            "session {session} \"Scripted session\" in ~/work/proj_done (agent build): its turn \
             ended; it landed 3 changes: edit src/navbar.js, write src/footer.js, bash git add -A \
             &amp;&amp; git commit -q -m 'Fix navItem1; add footer'"
        ),
        "{}",
        told.body
    );
    assert_eq!(
        told.body.lines().last(),
        Some("Look closer: wd-store alerts")
    );
    // an info that may go: low urgency, gone after 20 s
    assert_eq!((told.urgency, told.expire), (Some(0), Some(20_000)));
}

/// Issue 41, done: with `[alert] notify_done = true`, an `opencode run` that finished its work
/// is one info notice on the desktop within seconds, from the follow service, saying its title,
/// project and what it landed, and dunst lets it go after 20 s; however many reads see the
/// session finished after, it is told once.
#[test]
fn a_finished_opencode_run_is_one_done_notice_within_seconds_when_opted_in() {
    let fake = ocsim::Fake::start();
    let mut m = Machine::following_with(&fake, done_on);
    let p = m.project("proj_done");
    m.run_in(&p, "done", "healthy");
    let session = m.wait_calls(&p, 1);
    let t_run = Instant::now();
    let run = m.kids.pop().unwrap();
    let st = wait_exit(run);
    let ran = t_run.elapsed();
    assert!(st.success(), "{st:?}");
    let told = m.heard(&session, "opencode build session finished its work", 60);
    eprintln!(
        "done notice {:.1} s after the run's first call was seen (the run took {:.1} s)",
        t_run.elapsed().as_secs_f64(),
        ran.as_secs_f64()
    );
    assert_told_done(&told, &session);
    // dunst took it with that timeout (microseconds)
    let held = m.in_dunst(&session, &told.summary);
    assert_eq!(held["timeout"]["data"], 20_000_000, "{held}");
    // more reads of the finished session (its process ends, opencode writes its summary): told once
    std::thread::sleep(Duration::from_secs(5));
    assert_eq!(
        m.follow_transitions(&session),
        [format!(
            "oc-watchdog: dedup=done:{session} state=trigger severity=info"
        )],
        "{}",
        m.follow_log()
    );
    let stored: (String, String, String) = m
        .watchdog()
        .query_row(
            "SELECT kind, state, reason FROM episodes WHERE dedup_key = ?1",
            [format!("done:{session}")],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    assert_eq!(stored, ("done".into(), "resolved".into(), "done".into()));
}

/// Issue 41, done, at the timer's tick: an `opencode run` that finished is told once (a later
/// read of it does not tell it again); one interrupted with Ctrl-C is not told at all.
#[test]
fn the_timer_tells_a_finished_run_once_and_an_interrupted_one_never() {
    let fake = ocsim::Fake::start();
    let mut m = Machine::install();
    fake.configure(m.home.path());
    m.opt_in_done();
    let p = m.project("proj_done");
    m.run_in(&p, "done", "healthy");
    let session = m.wait_calls(&p, 1);
    let q = m.project("proj_cut");
    let cut_pid = m.run_in(&q, "cut", "abort");
    let cut = m.wait_calls(&q, 1);
    std::thread::sleep(Duration::from_secs(1));
    let st = std::process::Command::new("kill")
        .args(["-INT", &cut_pid.to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    for k in std::mem::take(&mut m.kids) {
        wait_exit(k);
    }
    let r = m.tick();
    assert_eq!(
        Machine::transitions(&r)
            .into_iter()
            .filter(|t| t.contains("dedup=done:"))
            .collect::<Vec<_>>(),
        [format!(
            "oc-watchdog: dedup=done:{session} state=trigger severity=info"
        )],
        "{}",
        r.story()
    );
    assert!(
        !r.stderr().contains(&format!("done:{cut}")),
        "{}",
        r.story()
    );
    let told = m.heard(&session, "opencode build session finished its work", 10);
    assert_told_done(&told, &session);
    // every session read again (a tick reads only what changed): the turn was told
    let again = m
        .sh("oc-sessions | oc-calls | wd-store calls | progress-detect | wd-store tick | wd-alert");
    again.ok();
    let judged: i64 = m
        .watchdog()
        .query_row(
            "SELECT count(*) FROM verdicts WHERE session = ?1",
            [&session],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(judged, 2, "judged at both reads");
    assert!(!again.stderr().contains("dedup=done:"), "{}", again.story());
}

/// Waits (at most 2 min) for a process to exit.
fn wait_exit(mut k: std::process::Child) -> std::process::ExitStatus {
    let t0 = Instant::now();
    loop {
        if let Some(st) = k.try_wait().unwrap() {
            return st;
        }
        assert!(t0.elapsed() < Duration::from_secs(120), "a run did not end");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Issue 41, done, in the TUI under tmux: each turn finished is its own done notice within
/// seconds, saying what that turn landed (the first its changes, the second none), while the
/// TUI waits for the next prompt.
#[test]
fn each_turn_a_tui_finishes_is_its_own_done_notice() {
    let fake = ocsim::Fake::start();
    let m = Machine::following_with(&fake, done_on);
    let p = m.project("proj_done");
    let tui =
        Tui::start(ocsim::opencode(m.home.path(), &p).args(["--prompt", "SCRIPT:healthy go"]));
    let session = m.wait_calls(&p, 1);
    let first = m.heard(&session, "opencode build session finished its work", 60);
    assert!(
        first
            .body
            .contains("its turn ended; it landed 3 changes: edit src/navbar.js"),
        "{}",
        first.body
    );
    assert_eq!(first.expire, Some(20_000));
    assert!(tui.running(), "the TUI quit");
    // the next prompt, typed as a person does: a turn that lands nothing
    tui.keys(&["SCRIPT:ask_bash again"]);
    tui.keys(&["Enter"]);
    let t0 = Instant::now();
    loop {
        let told: Vec<_> = m
            .desk
            .seen()
            .into_iter()
            .filter(|s| {
                s.summary.starts_with("opencode build session finished")
                    && s.body.contains(&session)
            })
            .collect();
        if told.len() == 2 {
            assert!(
                told[1].body.contains("its turn ended; it landed no change"),
                "{}",
                told[1].body
            );
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "{} done notices\n{}\n{}",
            told.len(),
            tui.pane(),
            m.follow_log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let dones: Vec<String> = m
        .follow_transitions(&session)
        .into_iter()
        .filter(|t| t.contains("dedup=done:"))
        .collect();
    assert_eq!(dones.len(), 2, "{}", m.follow_log());
}

/// Issue 41, done, in follow mode for the other agents: with `[alert] notify_done = true`, a
/// real `claude -p` and a real `codex exec` that finished their work, each run after the follow
/// service started (as a new user's first runs of them are: neither had its directory yet),
/// are each one done notice within seconds, naming the program, the session, its project and
/// what the turn landed, low urgency with a 20 s expiry in the Notify call and in dunst.
#[test]
fn a_finished_claude_p_and_codex_exec_are_each_one_done_notice_within_seconds_when_following() {
    use crate::support::agents::{make_project, AgentModel};
    let fake = ocsim::Fake::start();
    let m = Machine::following_with(&fake, done_on);
    std::fs::write(
        m.home.join(".gitconfig"),
        "[user]\n\temail = sim@example.invalid\n\tname = sim\n",
    )
    .unwrap();
    assert!(!m.home.join(".claude").exists() && !m.home.join(".codex").exists());
    let model = AgentModel::start();
    let test = "python3 tests/test_calc.py";
    let bash = |c: &str| json!({"tool": "Bash", "args": {"command": c, "description": "run"}});
    let exec = |c: &str| json!({"tool": "exec_command", "args": {"cmd": c}});
    let cwork = make_project(&m.home.join("cwork"));
    let calc = cwork.join("src/calc.py").display().to_string();
    model.script(
        "cwork",
        &json!([
            {"tool": "Read", "args": {"file_path": calc}},
            bash(test),
            {"tool": "Edit", "args": {"file_path": calc, "old_string": "    return sum(xs) / len(xs)",
                                      "new_string": "    return sum(xs) / len(xs) if xs else 0"}},
            bash(test),
            bash("git add -A && git commit -qm 'fix mean'"),
            {"text": "Fixed and committed."}
        ]),
    );
    let xwork = make_project(&m.home.join("xwork"));
    model.script(
        "xwork",
        &json!([
            exec("cat src/calc.py"),
            exec(test),
            {"tool": "apply_patch", "args": "*** Begin Patch\n*** Update File: src/calc.py\n@@\n def mean(xs):\n-    return sum(xs) / len(xs)\n+    return sum(xs) / len(xs) if xs else 0\n*** End Patch\n"},
            exec(test),
            exec("git add -A && git commit -qm 'fix mean'"),
            {"text": "Fixed and committed."}
        ]),
    );
    let landed = "its turn ended; it landed 2 changes: edit src/calc.py, bash git add -A \
                  &amp;&amp; git commit -qm 'fix mean'";
    let mut told = Vec::new();
    for (title, proj, place) in [
        (
            "Claude Code session finished its work",
            &cwork,
            " in ~/cwork",
        ),
        (
            "Codex session finished its work",
            &xwork,
            " \"SCRIPT:xwork fix the tests\" in ~/xwork",
        ),
    ] {
        let codex = title.starts_with("Codex");
        let out = if codex {
            model.codex(m.home.path(), proj, "xwork")
        } else {
            model.claude(m.home.path(), proj, "cwork")
        };
        let ended = Instant::now();
        let session = if codex {
            // `codex exec --json` says its thread first
            let first: Value =
                serde_json::from_str(String::from_utf8_lossy(&out.stdout).lines().next().unwrap())
                    .unwrap();
            first["thread_id"].as_str().unwrap().to_string()
        } else {
            let dir = m.home.join(".claude/projects");
            let mine = std::fs::read_dir(&dir)
                .unwrap()
                .flatten()
                .find(|d| d.file_name().to_string_lossy().ends_with("-cwork"))
                .unwrap();
            let transcript = std::fs::read_dir(mine.path())
                .unwrap()
                .flatten()
                .find(|f| f.file_name().to_string_lossy().ends_with(".jsonl"))
                .unwrap();
            let name = transcript.file_name().to_string_lossy().into_owned();
            name.trim_end_matches(".jsonl").to_string()
        };
        let seen = m.heard(&session, title, 30);
        eprintln!(
            "done notice {:.1} s after the {} run ended",
            ended.elapsed().as_secs_f64(),
            if codex { "codex exec" } else { "claude -p" }
        );
        assert!(
            ended.elapsed() < Duration::from_secs(15),
            "told {:.1} s after the run ended",
            ended.elapsed().as_secs_f64()
        );
        assert_eq!(
            seen.body.lines().next().unwrap(),
            format!("session {session}{place}: {landed}"),
            "{}",
            seen.body
        );
        assert_eq!(
            seen.body.lines().last(),
            Some("Look closer: wd-store alerts")
        );
        assert_eq!(
            (seen.urgency, seen.expire),
            (Some(0), Some(20_000)),
            "{seen:?}"
        );
        told.push((session, seen));
    }
    // more reads of the finished sessions: each told once
    std::thread::sleep(Duration::from_secs(5));
    for (session, seen) in &told {
        let held = m.in_dunst(session, &seen.summary);
        assert_eq!(held["timeout"]["data"], 20_000_000, "{held}");
        let n = m
            .desk
            .seen()
            .iter()
            .filter(|s| s.summary.ends_with("finished its work") && s.body.contains(session))
            .count();
        assert_eq!(n, 1, "{session}");
        assert_eq!(
            m.follow_transitions(session),
            [format!(
                "oc-watchdog: dedup=done:{session} state=trigger severity=info"
            )],
            "{}",
            m.follow_log()
        );
    }
}
