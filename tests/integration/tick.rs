//! The watchdog tick end to end: the install script into a temp HOME, then the installed tick
//! script against a real `opencode serve` (a looping and a healthy session), a real watchdog
//! database and the desktop channel on a real D-Bus session bus with dunst.

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
        let mut c = Command::new(prog);
        c.env_clear()
            .env(
                "PATH",
                format!(
                    "{}:{}",
                    h.join(".local/bin").display(),
                    std::env::var("PATH").unwrap()
                ),
            )
            .env("HOME", h)
            .env("XDG_CONFIG_HOME", h.join(".config"))
            .env("XDG_DATA_HOME", h.join(".local/share"))
            .env("XDG_STATE_HOME", h.join(".local/state"))
            .env("XDG_CACHE_HOME", h.join(".cache"))
            .env("DBUS_SESSION_BUS_ADDRESS", &self.desk.bus)
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
    .arg(units.join("oc-watchdog.timer"));
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
            "oc-watchdog: dedup=opencode-loop:{} state=trigger severity=warning",
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
    // the loop ended before the next tick (the session is idle and made no call): resolved
    // with `stopped`, never escalated
    let r = w.tick();
    assert_eq!(
        transitions(&r),
        [format!(
            "oc-watchdog: dedup=opencode-loop:{} state=resolve severity=info reason=stopped",
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
    assert!(
        seen[1].body.contains("the loop burned 8 calls and $"),
        "{:?}",
        seen[1]
    );
    assert_eq!(transitions(&w.tick()), Vec::<String>::new());
    // a loop whose session is deleted: resolved with `gone`
    let again = sim.run("reread");
    let r = w.tick();
    assert_eq!(
        transitions(&r),
        [format!(
            "oc-watchdog: dedup=opencode-loop:{} state=trigger severity=warning",
            again.id
        )]
    );
    sim.delete(&again.id);
    let r = w.tick();
    assert_eq!(
        transitions(&r),
        [format!(
            "oc-watchdog: dedup=opencode-loop:{} state=resolve severity=info reason=gone",
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
        "oc-watchdog-tick: another tick is running; this one exits\n"
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
        .filter(|o| String::from_utf8_lossy(&o.stderr).contains("another tick is running"))
        .count();
    assert_eq!(
        w.ticks() - before,
        2 - left as i64,
        "ticks recorded vs ticks that left on the lock"
    );

    // opencode stopped: a quiet tick recording no_opencode
    sim.stop();
    let r = w.tick();
    assert_eq!(r.stderr(), "");
    assert_eq!(w.status()["outcome"], "no_opencode");

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
