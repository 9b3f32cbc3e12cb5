//! The watchdog tick end to end: the install script into a temp HOME, then the installed tick
//! script against a real `opencode serve` (a looping and a healthy session) and against real
//! `opencode run` sessions read from opencode's database (the alert lifecycle: loops that go on,
//! end, are fixed, wait in a long tool, start again), a real watchdog database and the desktop
//! channel on a real D-Bus session bus with dunst.

use crate::support::desktop::Desktop;
use crate::support::ocsim::Sim;
use crate::support::stub::Stub;
use crate::support::{repo, Home, Run};
use std::path::PathBuf;
use std::process::Command;

struct Installed<'a> {
    home: &'a Home,
    desk: &'a Desktop,
}

impl Installed<'_> {
    fn cmd(&self, prog: &str) -> Command {
        let h = self.home.path();
        let mut c = crate::support::installed_cmd(prog, h);
        c.env("DBUS_SESSION_BUS_ADDRESS", &self.desk.bus)
            .env("DISPLAY", &self.desk.display);
        c
    }
    fn run(&self, prog: &str, args: &[&str]) -> Run {
        let out = self.cmd(prog).args(args).output().unwrap();
        Run {
            shown: format!("{prog} {}", args.join(" ")),
            out,
        }
    }
    fn tick(&self) -> Run {
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
    fn status(&self) -> serde_json::Value {
        self.run("wd-store", &["status"]).kind("status")[0].clone()
    }
    fn ticks(&self) -> i64 {
        rusqlite::Connection::open(self.home.join(".local/state/oc-watchdog/watchdog.db"))
            .unwrap()
            .query_row("SELECT count(*) FROM ticks", [], |r| r.get(0))
            .unwrap()
    }
}

fn transitions(r: &Run) -> Vec<String> {
    r.stderr()
        .lines()
        .filter(|l| l.starts_with("oc-watchdog: dedup="))
        .map(|l| l.split(" title=").next().unwrap().to_string())
        .collect()
}

fn config(servers: &str) -> String {
    format!(
        "[opencode]\nservers = [{servers}]\n\n[[channels]]\nname = \"desktop\"\ntype = \"desktop\"\nrate_limit_secs = 0\n"
    )
}

#[test]
fn the_installed_tick_alerts_once_resolves_stopped_and_gone_and_stays_honest() {
    let desk = Desktop::shared();
    let mut sim = Sim::start();
    let home = Home::new();
    let cfg_path = home.join(".config/oc-watchdog/watchdog.toml");
    std::fs::create_dir_all(cfg_path.parent().unwrap()).unwrap();
    std::fs::write(&cfg_path, config(&format!("\"{}\"", sim.url))).unwrap();
    let w = Installed { home: &home, desk };

    // install: binaries, units, man pages, completions, config kept, one quiet tick
    let bins: PathBuf = assert_cmd::cargo::cargo_bin("wd-store")
        .parent()
        .unwrap()
        .to_path_buf();
    let r = w.run(
        repo().join("deploy/install").to_str().unwrap(),
        &["--from", bins.to_str().unwrap()],
    );
    r.ok();
    for f in [
        ".local/bin/oc-sessions",
        ".local/bin/oc-watchdog-tick",
        ".config/systemd/user/oc-watchdog.timer",
        ".local/share/man/man1/progress-detect.1",
        ".local/share/bash-completion/completions/wd-store",
        ".local/share/zsh/site-functions/_oc-calls",
        ".config/fish/completions/wd-alert.fish",
    ] {
        assert!(home.join(f).exists(), "{f} not installed\n{}", r.story());
    }
    assert_eq!(
        std::fs::read_to_string(&cfg_path).unwrap(),
        config(&format!("\"{}\"", sim.url))
    );
    assert_eq!(w.ticks(), 1, "the install runs one tick");
    assert_eq!(transitions(&r), Vec::<String>::new());
    // the installed units pass systemd-analyze verify
    let units = home.join(".config/systemd/user");
    let mut v = w.cmd("systemd-analyze");
    v.env(
        "MANPATH",
        format!("{}:", home.join(".local/share/man").display()),
    )
    .arg("verify")
    .arg(units.join("oc-watchdog.service"))
    .arg(units.join("oc-watchdog.timer"))
    .arg(units.join("oc-watchdog-follow.service"));
    let out = v.output().unwrap();
    assert!(
        out.status.success(),
        "systemd-analyze verify: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    // a looping session and a healthy one
    let looping = sim.run("reread");
    let healthy = sim.run("healthy");
    let r = w.tick();
    assert_eq!(
        transitions(&r),
        [format!(
            "oc-watchdog: dedup=loop:{} state=trigger severity=warning",
            looping.id
        )]
    );
    let seen = desk.wait_for(&looping.id, 1);
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].urgency, Some(1));
    assert_eq!(
        seen[0].summary,
        "opencode loop: build repeats read docs/spec.md"
    );
    // a server runs it: no key stops it, wd-store stop aborts it over HTTP (its popup said
    // "Esc twice in its TUI, Ctrl-C twice for `opencode run`"); and it stays until dismissed
    assert!(
        seen[0].body.contains(&format!(
            "\nStop it: wd-store stop {} (it aborts the session through its server)",
            looping.id
        )),
        "{:?}",
        seen[0]
    );
    assert_eq!(seen[0].expire, Some(0));
    // found after it stopped, the loop alerts once; status says so while its alert is open
    let st = w.status();
    assert_eq!(
        (
            st["outcome"].as_str(),
            st["flagged"].as_i64(),
            st["open_alerts"].as_i64()
        ),
        (Some("flagged"), Some(1), Some(1)),
        "{st}"
    );
    // the loop ended before the next tick (the session is idle and made no call): resolved
    // with `stopped`, never escalated
    let r = w.tick();
    assert_eq!(
        transitions(&r),
        [format!(
            "oc-watchdog: dedup=loop:{} state=resolve severity=info reason=stopped",
            looping.id
        )]
    );
    let seen = desk.wait_for(&looping.id, 2);
    assert_eq!(
        seen.iter().map(|s| s.urgency).collect::<Vec<_>>(),
        [Some(1), Some(0)]
    );
    assert_eq!(
        seen[1].summary,
        "resolved (stopped): opencode loop: build repeats read docs/spec.md"
    );
    // an all-clear: it may go
    assert_eq!(seen[1].expire, Some(10_000));
    assert!(
        seen[1].body.contains("the loop burned 8 calls and $"),
        "{:?}",
        seen[1]
    );
    // and status says what stands: no loop goes on (it said "flagged", 0 open alerts, until
    // the next tick judged the session again)
    let st = w.status();
    assert_eq!(
        (
            st["outcome"].as_str(),
            st["flagged"].as_i64(),
            st["open_alerts"].as_i64()
        ),
        (Some("ok"), Some(0), Some(0)),
        "{st}"
    );
    assert_eq!(transitions(&w.tick()), Vec::<String>::new());
    // a loop whose session is deleted: resolved with `gone`
    let again = sim.run("reread");
    let r = w.tick();
    assert_eq!(
        transitions(&r),
        [format!(
            "oc-watchdog: dedup=loop:{} state=trigger severity=warning",
            again.id
        )]
    );
    sim.delete(&again.id);
    let r = w.tick();
    assert_eq!(
        transitions(&r),
        [format!(
            "oc-watchdog: dedup=loop:{} state=resolve severity=info reason=gone",
            again.id
        )]
    );
    assert_eq!(desk.wait_for(&again.id, 2).len(), 2);
    // the healthy session never alerted
    let alerts: i64 = rusqlite::Connection::open(home.join(".local/state/oc-watchdog/watchdog.db"))
        .unwrap()
        .query_row(
            "SELECT count(*) FROM alerts WHERE root = ?1",
            [&healthy.id],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(alerts, 0);
    assert!(desk.seen().iter().all(|s| !s.body.contains(&healthy.id)));

    // one tick at a time: a held lock makes a tick leave at once, saying so
    let before = w.ticks();
    let lock = home.join(".local/state/oc-watchdog/tick.lock");
    let mut holder = Command::new("flock")
        .arg(&lock)
        .args(["sleep", "3"])
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let r = w.tick();
    assert_eq!(
        r.stderr(),
        "oc-watchdog-tick: another tick or the follow service (oc-watchdog-follow) is running; this one exits\n"
    );
    assert_eq!(w.ticks(), before);
    holder.wait().unwrap();
    // two ticks started together: one after the other, or one leaves on the lock
    let tick = home.join(".local/bin/oc-watchdog-tick");
    let a = w
        .cmd(tick.to_str().unwrap())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let b = w
        .cmd(tick.to_str().unwrap())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    assert!(a.status.success() && b.status.success());
    let left = [&a, &b]
        .iter()
        .filter(|o| {
            String::from_utf8_lossy(&o.stderr).contains("another tick or the follow service")
        })
        .count();
    assert_eq!(
        w.ticks() - before,
        2 - left as i64,
        "ticks recorded vs ticks that left on the lock"
    );

    // opencode stopped: a quiet tick recording no_agent
    sim.stop();
    let r = w.tick();
    assert_eq!(r.stderr(), "");
    assert_eq!(w.status()["outcome"], "no_agent");

    // opencode answering in a changed shape: "watchdog is blind", never an all-clear
    let stub = Stub::start();
    stub.json(
        "GET /global/health",
        r#"{"healthy":true,"version":"2.0.0"}"#,
    )
    .json("GET /session", r#"{"items":[]}"#)
    .json("GET /session/status", "{}");
    std::fs::write(&cfg_path, config(&format!("\"{}\"", stub.url))).unwrap();
    let r = w.tick();
    assert_eq!(
        transitions(&r),
        ["oc-watchdog: dedup=watchdog-blind state=trigger severity=warning"]
    );
    assert_eq!(w.status()["outcome"], "blind");
    let blind = desk.wait_for("watchdog is blind", 1);
    assert!(
        blind.iter().any(|s| s.body.contains(&stub.url)),
        "{blind:?}"
    );
    // and it resolves when reading works again (here: opencode gone entirely)
    std::fs::write(&cfg_path, config("\"http://127.0.0.1:9\"")).unwrap();
    assert_eq!(
        transitions(&w.tick()),
        ["oc-watchdog: dedup=watchdog-blind state=resolve severity=info reason=readable"]
    );
}

/// `opencode run` (no server, no port) in the simulator's HOME and project, talking to its fake
/// model; `--format json` so the session id can be read off its events.
fn opencode_run(sim: &Sim, args: &[&str]) -> std::process::Child {
    Command::new(std::env::var("OPENCODE_BIN").unwrap_or_else(|_| "opencode".into()))
        .arg("run")
        .args(["--format", "json"])
        .arg("--dir")
        .arg(&sim.proj)
        .args(args)
        // opencode takes its working directory from PWD: never the test's own checkout
        .current_dir(&sim.proj)
        .env("PWD", &sim.proj)
        .env("HOME", &sim.home)
        .env("XDG_CONFIG_HOME", sim.home.join(".config"))
        .env("XDG_DATA_HOME", sim.home.join(".local/share"))
        .env("XDG_STATE_HOME", sim.home.join(".local/state"))
        .env("XDG_CACHE_HOME", sim.home.join(".cache"))
        .env("OPENCODE_DISABLE_MODELS_FETCH", "1")
        .env("OPENCODE_DISABLE_AUTOUPDATE", "1")
        .env("OPENCODE_DISABLE_LSP_DOWNLOAD", "1")
        .env("OPENCODE_DISABLE_SHARE", "1")
        .env_remove("OPENCODE_SERVER_PASSWORD")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("opencode run")
}

/// The session id from `opencode run --format json` output.
fn session_of(out: &str) -> String {
    let i = out
        .find("\"sessionID\":\"")
        .expect("a sessionID in opencode run's output")
        + 13;
    out[i..].split('"').next().unwrap().to_string()
}

/// Runs `opencode run` to its end; returns the session id.
fn run_to_end(sim: &Sim, args: &[&str]) -> String {
    let out = opencode_run(sim, args).wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "opencode run {args:?}: {text}");
    session_of(&text)
}

/// A session's tool calls in opencode's database: (all, running).
fn calls_in_db(sim: &Sim, session: &str) -> (i64, i64) {
    let c = rusqlite::Connection::open_with_flags(
        sim.db_path(),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .unwrap();
    let q = |extra: &str| -> i64 {
        c.query_row(
            &format!(
                "SELECT count(*) FROM part WHERE session_id = ?1 AND json_extract(data, '$.type') = 'tool' {extra}"
            ),
            [session],
            |r| r.get(0),
        )
        .unwrap_or(0)
    };
    (
        q(""),
        q("AND json_extract(data, '$.state.status') = 'running'"),
    )
}

/// A session's tool parts as opencode stored them (tool, status, error), for failure messages.
fn tools_in_db(sim: &Sim, session: &str) -> String {
    let c = rusqlite::Connection::open_with_flags(
        sim.db_path(),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .unwrap();
    let mut st = c
        .prepare(
            "SELECT json_extract(data, '$.tool') || ' ' || json_extract(data, '$.state.status') || ' ' ||
                    coalesce(substr(json_extract(data, '$.state.error'), 1, 200), '') || ' ' ||
                    coalesce(substr(json_extract(data, '$.state.metadata.diff'), 1, 80), '')
             FROM part WHERE session_id = ?1 AND json_extract(data, '$.type') = 'tool' ORDER BY id",
        )
        .unwrap();
    st.query_map([session], |r| r.get::<_, String>(0))
        .unwrap()
        .map(Result::unwrap)
        .collect::<Vec<_>>()
        .join("\n")
}

/// The newest session in opencode's database (for a run still going).
fn newest_session(sim: &Sim, after: i64) -> Option<String> {
    let c = rusqlite::Connection::open_with_flags(
        sim.db_path(),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .ok()?;
    c.query_row(
        "SELECT id FROM session WHERE time_created >= ?1 ORDER BY time_created DESC LIMIT 1",
        [after],
        |r| r.get(0),
    )
    .ok()
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let t0 = std::time::Instant::now();
    while !f() {
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(300),
            "waited 5 minutes for {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

fn mine(r: &Run, id: &str) -> Vec<String> {
    transitions(r)
        .into_iter()
        .filter(|t| t.contains(id))
        .map(|t| t.split(' ').skip(2).collect::<Vec<_>>().join(" "))
        .collect()
}

/// A fresh simulator and the watchdog installed into a temp HOME reading its database
/// (`opencode run` serves no HTTP), with the desktop channel.
fn installed_on_db(sim: &Sim) -> Home {
    let home = Home::new();
    let cfg_path = home.join(".config/oc-watchdog/watchdog.toml");
    std::fs::create_dir_all(cfg_path.parent().unwrap()).unwrap();
    std::fs::write(
        &cfg_path,
        format!(
            "[opencode]\nservers = [\"http://127.0.0.1:9\"]\ndb = \"{}\"\n\n[[channels]]\nname = \"desktop\"\ntype = \"desktop\"\nrate_limit_secs = 0\n",
            sim.db_path().display()
        ),
    )
    .unwrap();
    let bins: PathBuf = assert_cmd::cargo::cargo_bin("wd-store")
        .parent()
        .unwrap()
        .to_path_buf();
    Installed {
        home: &home,
        desk: Desktop::shared(),
    }
    .run(
        repo().join("deploy/install").to_str().unwrap(),
        &["--from", bins.to_str().unwrap()],
    )
    .ok();
    home
}

/// Starts `opencode run` in the background; waits until its session satisfies `ready`.
fn run_in_background(
    sim: &Sim,
    args: &[&str],
    what: &str,
    ready: impl Fn((i64, i64)) -> bool,
) -> (std::process::Child, String) {
    let t0 = oc_watchdog::cli::now_ms();
    let child = opencode_run(sim, args);
    let mut id = String::new();
    wait_until(what, || {
        if let Some(s) = newest_session(sim, t0) {
            id = s;
        }
        !id.is_empty() && ready(calls_in_db(sim, &id))
    });
    (child, id)
}

#[test]
fn opencode_run_a_loop_that_ends_resolves_stopped_starts_again_as_a_new_episode_or_is_fixed() {
    let desk = Desktop::shared();
    let sim = Sim::start();
    let home = installed_on_db(&sim);
    let w = Installed { home: &home, desk };
    let episodes = |id: &str| -> Vec<serde_json::Value> {
        w.run("wd-store", &["alerts", "--since", "1h"])
            .kind("episode")
            .into_iter()
            .filter(|e| e["dedup_key"] == format!("loop:{id}"))
            .collect()
    };

    // a loop that ends: triggered, then resolved `stopped` on the next tick, never escalated
    let ended = run_to_end(&sim, &["SCRIPT:reread go"]);
    assert_eq!(mine(&w.tick(), &ended), ["state=trigger severity=warning"]);
    assert_eq!(
        mine(&w.tick(), &ended),
        ["state=resolve severity=info reason=stopped"]
    );
    assert_eq!(mine(&w.tick(), &ended), Vec::<String>::new());
    let seen = desk.wait_for(&ended, 2);
    assert_eq!(
        seen.iter().map(|s| s.urgency).collect::<Vec<_>>(),
        [Some(1), Some(0)]
    );
    assert_eq!(
        seen[1].summary,
        "resolved (stopped): opencode loop: build repeats read docs/spec.md"
    );
    assert!(
        seen[1]
            .body
            .contains("the loop stopped: every flagged session is idle")
            && seen[1].body.contains("the loop burned 8 calls and $"),
        "{:?}",
        seen[1]
    );
    // the same session loops again: a new episode
    run_to_end(&sim, &["-s", &ended, "SCRIPT:reread go"]);
    assert_eq!(mine(&w.tick(), &ended), ["state=trigger severity=warning"]);
    // the operator's page (issue 15) shows the episode's own figures and where it resumed
    let page = std::fs::read_to_string(home.join(".local/state/oc-watchdog/report.html")).unwrap();
    let art = &page[page
        .find(&format!("<article id=\"{ended}\""))
        .expect("the loop's article")..];
    let art = &art[..art.find("</article>").unwrap()];
    assert!(
        art.contains("<tr><td>this episode</td><td>8 calls, $"),
        "{art}"
    );
    assert!(art.contains(">resumed</text>"), "{art}");
    let eps = episodes(&ended);
    assert_eq!(eps.len(), 2, "{eps:?}");
    assert_eq!(
        (&eps[0]["state"], &eps[1]["state"], &eps[1]["reason"]),
        (&"open".into(), &"resolved".into(), &"stopped".into())
    );
    assert_eq!(
        mine(&w.tick(), &ended),
        ["state=resolve severity=info reason=stopped"]
    );
    // the second episode reports its own 8 calls (nothing landed in between: since the last
    // landed change, the session made 16), and its own time, not the gap between the runs
    let eps = episodes(&ended);
    eprintln!(
        "episodes of one session run twice: {} / {}",
        eps[1]["burned"], eps[0]["burned"]
    );
    assert_eq!((&eps[0]["calls"], &eps[1]["calls"]), (&8.into(), &8.into()));
    let (d0, d1) = (
        eps[0]["duration_ms"].as_i64().unwrap(),
        eps[1]["duration_ms"].as_i64().unwrap(),
    );
    let gap = eps[0]["opened"].as_i64().unwrap() - eps[1]["opened"].as_i64().unwrap();
    assert!(
        d0 < gap,
        "the second episode's {d0} ms spans the {gap} ms between the runs"
    );
    assert!(d1 > 0 && d0 > 0, "{eps:?}");
    let seen = desk.wait_for(&ended, 4);
    assert!(
        seen[3].body.contains("the loop burned 8 calls and $"),
        "{:?}",
        seen[3]
    );

    // a loop that is fixed: an edit lands and the check passes; resolved `progress`
    let fixed = run_to_end(&sim, &["SCRIPT:lc_fixed_loop go"]);
    assert_eq!(mine(&w.tick(), &fixed), ["state=trigger severity=warning"]);
    run_to_end(&sim, &["-s", &fixed, "SCRIPT:lc_fix go"]);
    let r = w.tick();
    assert_eq!(
        mine(&r, &fixed),
        ["state=resolve severity=info reason=progress"],
        "{}\n{}\n{}",
        r.story(),
        w.run(
            "wd-store",
            &["verdicts", "--session", &fixed, "--limit", "1"]
        )
        .stdout(),
        tools_in_db(&sim, &fixed)
    );
    let seen = desk.wait_for(&fixed, 2);
    assert!(
        seen[1]
            .summary
            .starts_with("resolved (progress): opencode loop: build repeats "),
        "{:?}",
        seen[1]
    );
    assert!(seen[1].body.contains("a change landed"), "{:?}", seen[1]);
}

#[test]
fn opencode_run_a_session_inside_a_long_tool_neither_escalates_nor_resolves() {
    let desk = Desktop::shared();
    let sim = Sim::start();
    let home = installed_on_db(&sim);
    let w = Installed { home: &home, desk };
    // inside a long tool (sleep 25 s, timeout 120 s): neither counted nor resolved
    let (mut long, id) = run_in_background(
        &sim,
        &["SCRIPT:lc_long_tool go"],
        "the long tool to run",
        |(calls, running)| calls == 10 && running == 1,
    );
    let r = w.tick();
    assert_eq!(
        mine(&r, &id),
        ["state=trigger severity=warning"],
        "{}\n{}\n{}",
        r.story(),
        w.run("wd-store", &["verdicts", "--session", &id, "--limit", "1"])
            .stdout(),
        tools_in_db(&sim, &id)
    );
    for _ in 0..2 {
        assert_eq!(mine(&w.tick(), &id), Vec::<String>::new());
    }
    let l: Vec<serde_json::Value> = w
        .run("wd-store", &["loops"])
        .kind("loop")
        .into_iter()
        .filter(|l| l["dedup_key"] == format!("loop:{id}"))
        .collect();
    assert_eq!(
        (&l[0]["last_decision"], &l[0]["flagged_ticks"]),
        (&"held_busy".into(), &1.into()),
        "{l:?}"
    );
    assert!(long.wait().unwrap().success());
    // the tool ended, the session is idle: stopped (its last call may count once first)
    let mut after = Vec::new();
    for _ in 0..2 {
        after.extend(mine(&w.tick(), &id));
    }
    assert_eq!(after, ["state=resolve severity=info reason=stopped"]);
}

#[test]
fn opencode_run_a_loop_that_goes_on_escalates_on_its_third_flagged_tick() {
    let desk = Desktop::shared();
    let sim = Sim::start();
    let home = installed_on_db(&sim);
    let w = Installed { home: &home, desk };
    // a loop that goes on: escalated on its third flagged tick, while it makes calls
    let (mut going, id) = run_in_background(
        &sim,
        &["SCRIPT:lc_goes_on go"],
        "the loop to be 12 calls long",
        |(calls, _)| calls >= 12,
    );
    // each tick after some new calls (on a busy machine a call may take seconds)
    let mut got = Vec::new();
    for k in 0..3 {
        if k > 0 {
            let before = calls_in_db(&sim, &id).0;
            wait_until("new calls", || calls_in_db(&sim, &id).0 > before);
        }
        got.push(mine(&w.tick(), &id));
    }
    assert_eq!(
        got,
        [
            vec!["state=trigger severity=warning".to_string()],
            vec![],
            vec!["state=escalate severity=critical reason=still_looping".to_string()]
        ],
        "calls in the database: {:?}",
        calls_in_db(&sim, &id)
    );
    assert!(
        calls_in_db(&sim, &id).0 < 50,
        "still going when it escalated"
    );
    let seen = desk.wait_for(&id, 2);
    assert_eq!(
        seen.iter().map(|s| s.urgency).collect::<Vec<_>>(),
        [Some(1), Some(2)]
    );
    assert!(
        seen[1]
            .body
            .starts_with("still looping after 3 flagged ticks: "),
        "{:?}",
        seen[1]
    );
    assert!(going.wait().unwrap().success());
    let mut after = Vec::new();
    for _ in 0..2 {
        after.extend(mine(&w.tick(), &id));
    }
    assert_eq!(after, ["state=resolve severity=info reason=stopped"]);
}

#[test]
fn opencode_run_killed_with_ctrl_c_resolves_the_process_ended_and_is_never_stalled() {
    let desk = Desktop::shared();
    let mut sim = Sim::start();
    // no server on the database: a served session's status would come from the server
    sim.stop_server();
    let home = installed_on_db(&sim);
    let w = Installed { home: &home, desk };
    // the loop is caught while its model streams a reply that never ends; then Ctrl-C
    let (mut run, id) = run_in_background(
        &sim,
        &["SCRIPT:lc_hang_loop go"],
        "the loop's ten reads",
        |(calls, _)| calls >= 10,
    );
    std::thread::sleep(std::time::Duration::from_secs(1));
    assert_eq!(mine(&w.tick(), &id), ["state=trigger severity=warning"]);
    // opencode run takes a first SIGINT inside a model stream that never ends without exiting;
    // a person presses Ctrl-C again
    let mut presses = 0;
    while run.try_wait().unwrap().is_none() {
        assert!(presses < 3, "opencode run outlived three SIGINTs");
        let sent = Command::new("kill")
            .args(["-INT", &run.id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success());
        presses += 1;
        let t0 = std::time::Instant::now();
        while run.try_wait().unwrap().is_none() && t0.elapsed().as_secs() < 5 {
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
    eprintln!("opencode run ended after {presses} SIGINT(s)");
    // its reply stays open in the database ("a reply cut off" below): only the process list
    // tells that nothing runs it any more
    let r = w.tick();
    assert_eq!(
        mine(&r, &id),
        ["state=resolve severity=info reason=stopped"],
        "{}",
        r.story()
    );
    let row = &w
        .run("wd-store", &["verdicts", "--session", &id, "--limit", "1"])
        .kind("verdict_row")[0];
    let v: serde_json::Value = serde_json::from_str(row["liveness"].as_str().unwrap()).unwrap();
    assert_eq!(
        (&v["class"], &v["evidence"]),
        (
            &"ended".into(),
            &"the opencode process ended, a reply cut off".into()
        ),
        "{v}"
    );
    // later ticks neither raise a stalled alert nor open anything
    for _ in 0..2 {
        assert_eq!(mine(&w.tick(), &id), Vec::<String>::new());
    }
    let seen = desk.wait_for(&id, 2);
    assert!(
        seen[1]
            .body
            .contains("the opencode process ended: no flagged session runs any more"),
        "{:?}",
        seen[1]
    );
    // the trigger said which project, and what to do
    // (the fake model names every session "Scripted session")
    assert!(
        seen[0].body.contains(&format!(
            "session {id} \"Scripted session\" in {}, agent build",
            sim.proj.display()
        )) && seen[0].body.contains(&format!(
            "Stop it: Ctrl-C in the terminal of its `opencode run`, or wd-store stop {id}; keep the model away: wd-store block-model "
        )) && seen[0].body.contains(" (not while it is opencode's default model)"),
        "{:?}",
        seen[0]
    );
}

/// Takes what the operator sees, when `OC_SHOTS` names a directory: the Xvfb screen with dunst's
/// popups (`xwd`, where installed) and the page in Chromium.
fn shots(desk: &Desktop, home: &Home, name: &str) {
    let Some(dir) = std::env::var_os("OC_SHOTS").map(PathBuf::from) else {
        return;
    };
    std::fs::create_dir_all(&dir).unwrap();
    let xwd = dir.join(format!("{name}-dunst.xwd"));
    let took = Command::new("xwd")
        .args(["-root", "-silent", "-out"])
        .arg(&xwd)
        .env("DISPLAY", &desk.display)
        .status()
        .is_ok_and(|s| s.success());
    if took {
        let _ = Command::new("convert")
            .arg(&xwd)
            .arg(dir.join(format!("{name}-dunst.png")))
            .status();
        let _ = std::fs::remove_file(&xwd);
    }
    let page = home.join(".local/state/oc-watchdog/report.html");
    let _ = crate::report::chromium(&[
        &format!(
            "--screenshot={}",
            dir.join(format!("{name}-page.png")).display()
        ),
        "--window-size=1200,1600",
        &format!("file://{}", page.display()),
    ]);
}

#[test]
fn an_operators_journey_trigger_escalation_ctrl_c_resolve_keeps_one_popup_on_screen() {
    // issue 29's journey with real opencode run and a real dunst: the loop triggers, goes on and
    // escalates, the operator presses Ctrl-C, the next tick resolves it. At each step the
    // episode has one popup on screen, the later ones shown in the place of the first
    let desk = &Desktop::private();
    let mut sim = Sim::start();
    sim.stop_server();
    let home = installed_on_db(&sim);
    let cfg = home.join(".config/oc-watchdog/watchdog.toml");
    let mut text = std::fs::read_to_string(&cfg).unwrap();
    text += "\n[alert]\nescalate_after_ticks = 2\n";
    std::fs::write(&cfg, text).unwrap();
    let w = Installed { home: &home, desk };
    let displayed = || -> String {
        let o = Command::new("dunstctl")
            .args(["count", "displayed"])
            .env("DBUS_SESSION_BUS_ADDRESS", &desk.bus)
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    };
    let settle = || std::thread::sleep(std::time::Duration::from_millis(500));
    let (mut run, id) = run_in_background(
        &sim,
        &["SCRIPT:lc_journey go"],
        "the loop's first ten reads",
        |(calls, _)| calls >= 10,
    );
    std::thread::sleep(std::time::Duration::from_secs(1));
    assert_eq!(mine(&w.tick(), &id), ["state=trigger severity=warning"]);
    settle();
    assert_eq!(displayed(), "1");
    shots(desk, &home, "1-trigger");
    // it goes on: new calls by the next tick, which escalates
    let (before, _) = calls_in_db(&sim, &id);
    wait_until("more reads", || calls_in_db(&sim, &id).0 >= before + 4);
    let r = w.tick();
    assert_eq!(
        mine(&r, &id),
        ["state=escalate severity=critical reason=still_looping"],
        "{}",
        r.story()
    );
    settle();
    assert_eq!(
        displayed(),
        "1",
        "the escalation replaced the trigger's popup"
    );
    shots(desk, &home, "2-escalate");
    // Ctrl-C (twice if it must)
    let mut presses = 0;
    while run.try_wait().unwrap().is_none() {
        assert!(presses < 3, "opencode run outlived three SIGINTs");
        Command::new("kill")
            .args(["-INT", &run.id().to_string()])
            .status()
            .unwrap();
        presses += 1;
        let t0 = std::time::Instant::now();
        while run.try_wait().unwrap().is_none() && t0.elapsed().as_secs() < 5 {
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
    eprintln!("journey: opencode run ended after {presses} SIGINT(s)");
    // the reads made since the escalation's tick count once more: the resolve comes with the
    // first tick that sees no new call (at most the second)
    let r = w.tick();
    let mut got = mine(&r, &id);
    if got.is_empty() {
        eprintln!("journey: the first tick after Ctrl-C counted the last reads; one more");
        got = mine(&w.tick(), &id);
    }
    assert_eq!(
        got,
        ["state=resolve severity=info reason=stopped"],
        "{}",
        r.story()
    );
    settle();
    assert_eq!(displayed(), "1", "the resolve replaced the critical popup");
    shots(desk, &home, "3-resolve");
    let seen = desk.wait_for(&id, 3);
    assert_eq!(
        seen.iter().map(|s| s.urgency).collect::<Vec<_>>(),
        [Some(1), Some(2), Some(0)],
        "{seen:?}"
    );
    for s in &seen {
        eprintln!(
            "journey popup: {} | {}",
            s.summary,
            s.body.replace('\n', " / ")
        );
    }
    let details = w
        .run("wd-store", &["alerts", "--format", "table", "--wide"])
        .stdout();
    eprintln!("journey: wd-store alerts --wide\n{details}");
    let ids: Vec<String> = rusqlite::Connection::open(home.join(".local/state/oc-watchdog/watchdog.db"))
        .unwrap()
        .prepare("SELECT d.detail FROM deliveries d JOIN events e ON e.id = d.event WHERE e.dedup_key = ?1 ORDER BY e.id")
        .unwrap()
        .query_map([format!("loop:{id}")], |r| r.get(0))
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    assert_eq!(ids.len(), 3, "{ids:?}");
    assert!(ids.iter().all(|d| d == &ids[0]), "one popup id: {ids:?}");
    // what stays on screen is the resolve, saying why
    assert!(
        seen[2].body.contains("the opencode process ended"),
        "{:?}",
        seen[2]
    );
}

/// #41: an "unfinished todos" alert ends when nothing runs its session any more, saying so,
/// and the page never lists it as a loop.
#[test]
fn an_unfinished_todos_alert_resolves_once_its_opencode_is_gone_and_is_no_loop_on_the_page() {
    let desk = Desktop::shared();
    let mut sim = Sim::start();
    let home = installed_on_db(&sim);
    let w = Installed { home: &home, desk };
    let ran = sim.run("todo_stop");
    let r = w.tick();
    assert_eq!(
        mine(&r, &ran.id),
        ["state=trigger severity=info"],
        "{}",
        r.story()
    );
    let page = std::fs::read_to_string(home.join(".local/state/oc-watchdog/report.html")).unwrap();
    assert!(
        page.contains(
            "Loops now <small>(0 loops open)</small></h2><p class=\"ok\">Nothing is looping.</p>"
        ) && page.contains("Sessions that need a look <small>(1 alert open, not loops)</small>"),
        "{page}"
    );
    // the server that ran it exits: nothing runs the session any more
    sim.stop_server();
    let r = w.tick();
    assert_eq!(
        mine(&r, &ran.id),
        ["state=resolve severity=info reason=stopped"],
        "{}",
        r.story()
    );
    let why: String = rusqlite::Connection::open(home.join(".local/state/oc-watchdog/watchdog.db"))
        .unwrap()
        .query_row(
            "SELECT json_extract(body, '$.details.why') FROM events WHERE dedup_key = ?1 AND state = 'resolve'",
            [format!("unfinished:{}", ran.id)],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(why, "the opencode process ended");
    assert_eq!(mine(&w.tick(), &ran.id), Vec::<String>::new());
}
