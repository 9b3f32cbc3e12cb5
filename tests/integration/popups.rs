//! Nothing raw into the desktop (issue 30, point 3): an agent name with a NUL, pango markup,
//! a terminal escape, a bidi override and 400 characters reaches a real dunst (on a private
//! D-Bus session bus) shown as written, visibly and capped, and the delivery is sent.

use crate::support::desktop::Desktop;
use crate::support::Home;

#[test]
fn an_agent_name_with_a_nul_markup_escapes_and_bidi_reaches_dunst_visibly_and_capped() {
    let d = Desktop::shared();
    let home = Home::new();
    let cfg = home.join("watchdog.toml");
    std::fs::write(&cfg, "[[channels]]\nname = \"desk\"\ntype = \"desktop\"\n").unwrap();
    let db = home.join("w.db");
    let tag = format!("agent{}", std::process::id());
    let agent = format!(
        "<b>{tag}</b>\\u0000\\u001b[31m safe\\u202etxt.exe {}",
        "y".repeat(400)
    );
    let verdict = format!(
        r#"{{"kind":"verdict","session":"ses_pop","root":"ses_pop","agent":"{agent}","calls":50,"flagged":true,"reasons":["top"],"signals":{{"top":20,"top_target":"bash make"}},"landed_in_window":false,"calls_since_landed":50,"cost_since_landed":0.5,"t":1796000000000}}"#
    );
    let r = home
        .cmd("wd-alert")
        .args([
            "--db",
            db.to_str().unwrap(),
            "--config",
            cfg.to_str().unwrap(),
        ])
        .env("DBUS_SESSION_BUS_ADDRESS", &d.bus)
        .env("DISPLAY", &d.display)
        .stdin(format!("{verdict}\n"))
        .run();
    r.ok();
    let status: String = rusqlite::Connection::open(&db)
        .unwrap()
        .query_row("SELECT status || ' ' || detail FROM deliveries", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert!(
        status.starts_with("sent notification "),
        "{status}\n{}",
        r.story()
    );
    let seen = d.wait_for(&tag, 1);
    assert_eq!(seen.len(), 1, "{:?}", d.seen());
    let s = &seen[0];
    for text in [&s.summary, &s.body] {
        assert!(!text.contains('\0') && !text.contains('\u{1b}') && !text.contains('\u{202e}'));
    }
    // the body is markup to dunst: escaped; the summary is plain text: as written (issue 42:
    // escaped as well, it read `&lt;b&gt;` on screen)
    assert!(
        !s.body.contains(&format!("<b>{tag}")),
        "markup passed raw: {}",
        s.body
    );
    assert!(
        s.body.contains(&format!("&lt;b&gt;{tag}&lt;/b&gt;")),
        "{}",
        s.body
    );
    assert!(
        s.summary.contains(&format!("<b>{tag}</b><U+0000>")),
        "{}",
        s.summary
    );
    // the controls shown as <U+XXXX>, escaped for dunst's markup in the body
    assert!(
        s.body
            .contains("&lt;U+0000&gt;&lt;U+001B&gt;[31m safe&lt;U+202E&gt;txt.exe"),
        "{}",
        s.body
    );
    // capped with an ellipsis (escaping lengthens what was capped); the last lines survive
    assert!(s.summary.ends_with("yyy…"), "{}", s.summary);
    assert!(s.summary.chars().count() < 200, "{}", s.summary);
    let lines: Vec<&str> = s.body.lines().collect();
    assert!(
        lines[0].ends_with('…') && lines[0].chars().count() < 400,
        "{}",
        lines[0]
    );
    assert_eq!(
        lines.last(),
        Some(&"Look closer: wd-store loops"),
        "{}",
        s.body
    );
}

#[test]
fn a_title_with_markup_or_a_command_with_ampersands_read_escaped_in_the_popup_summary() {
    // issue 42: the summary was markup-escaped, though notification servers show it as plain
    // text (dunst escapes it itself into its format): titles read `&lt;b&gt;`, and a loop on a
    // command with `&&` showed `&amp;&amp;`
    let d = Desktop::shared();
    let home = Home::new();
    let cfg = home.join("watchdog.toml");
    std::fs::write(&cfg, "[[channels]]\nname = \"desk\"\ntype = \"desktop\"\n").unwrap();
    let db = home.join("w.db");
    let tag = format!("amp{}", std::process::id());
    let verdict = serde_json::json!({"kind": "verdict", "session": "ses_amp", "root": "ses_amp",
        "agent": format!("<b>{tag}</b>"), "calls": 50, "flagged": true, "reasons": ["top"],
        "signals": {"top": 20, "top_target": "bash make && make test"}, "landed_in_window": false,
        "calls_since_landed": 50, "cost_since_landed": 0.5, "t": 1796000000000i64});
    home.cmd("wd-alert")
        .args([
            "--db",
            db.to_str().unwrap(),
            "--config",
            cfg.to_str().unwrap(),
        ])
        .env("DBUS_SESSION_BUS_ADDRESS", &d.bus)
        .env("DISPLAY", &d.display)
        .stdin(format!("{verdict}\n"))
        .run()
        .ok();
    let seen = d.wait_for(&tag, 1);
    assert_eq!(seen.len(), 1, "{:?}", d.seen());
    let summary = &seen[0].summary;
    assert!(summary.contains(&format!("<b>{tag}</b>")), "{summary}");
    assert!(summary.contains("make && make test"), "{summary}");
    // what dunst renders: its markup holds the summary escaped once, never twice
    let held = d
        .dunst_history()
        .into_iter()
        .find(|e| {
            e["summary"]["data"]
                .as_str()
                .is_some_and(|s| s.contains(&tag))
        })
        .unwrap_or_else(|| panic!("dunst holds no {tag}"));
    let message = held["message"]["data"].as_str().unwrap_or_default();
    assert!(
        message.contains(&format!("&lt;b&gt;{tag}&lt;/b&gt;"))
            && message.contains("make &amp;&amp; make test"),
        "{held}"
    );
    assert!(
        !message.contains("&amp;lt;") && !message.contains("&amp;amp;"),
        "{held}"
    );
}

/// A typo in watchdog.toml stopped every command with exit 2 and told nobody: the page still
/// said "written 0 s ago" from before, no popup came, and the follow service restarted in a
/// loop. Now the follow script stays up saying so, the page is rewritten from the last good
/// state with the error, and a real dunst gets one popup per distinct error.
#[test]
fn a_config_typo_is_told_by_a_popup_and_the_page_and_the_follow_service_stays_up() {
    use std::os::unix::process::CommandExt;
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};
    let d = Desktop::shared();
    let home = Home::new();
    let cfg = home.join(".config/oc-watchdog/watchdog.toml");
    std::fs::create_dir_all(cfg.parent().unwrap()).unwrap();
    std::fs::write(&cfg, "[opencode]\ndiscover = \"off\"\n").unwrap();
    // the last good state: one tick
    home.cmd("wd-store")
        .args(["--now", "1796000000000", "tick", "--outcome", "no_agent"])
        .stdin("")
        .run()
        .ok();
    std::fs::write(
        &cfg,
        "[opencode]\ndiscover = \"off\"\n\n[detector]\nwindw = 60\n",
    )
    .unwrap();
    let bins = assert_cmd::cargo::cargo_bin("wd-store")
        .parent()
        .unwrap()
        .to_path_buf();
    let err_file = home.join("follow.err");
    let mut follow = Command::new("sh")
        .arg(crate::support::repo().join("deploy/oc-watchdog-follow"))
        .env_clear()
        .env(
            "PATH",
            format!("{}:{}", bins.display(), std::env::var("PATH").unwrap()),
        )
        .env("HOME", home.path())
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env("XDG_DATA_HOME", home.join(".local/share"))
        .env("XDG_STATE_HOME", home.join(".local/state"))
        .env("DBUS_SESSION_BUS_ADDRESS", &d.bus)
        .env("DISPLAY", &d.display)
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&err_file).unwrap())
        .spawn()
        .unwrap();
    let stop = |k: &mut std::process::Child| {
        let _ = Command::new("kill")
            .args(["-TERM", "--", &format!("-{}", k.id())])
            .status();
        let _ = k.wait();
    };
    let problem = format!(
        "config {}:5: detector.windw: unknown field `windw`",
        cfg.display()
    );
    let t0 = Instant::now();
    let mut seen = Vec::new();
    while seen.is_empty() && t0.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(200));
        seen = d.wait_for(&cfg.display().to_string(), 1);
    }
    let said = std::fs::read_to_string(&err_file).unwrap_or_default();
    if seen.len() != 1 {
        stop(&mut follow);
        panic!("no popup: {:?}\nfollow said: {said}", d.seen());
    }
    assert_eq!(
        seen[0].summary,
        "watchdog is not watching: its config does not load"
    );
    assert!(seen[0].body.starts_with(&problem), "{}", seen[0].body);
    assert_eq!(seen[0].urgency, Some(2));
    // the service stays up, saying so, instead of ending for systemd to restart it
    std::thread::sleep(Duration::from_secs(2));
    let alive = follow.try_wait().unwrap().is_none();
    let said = std::fs::read_to_string(&err_file).unwrap_or_default();
    stop(&mut follow);
    assert!(alive, "the follow script ended: {said}");
    assert!(said.contains(&format!("wd-store: {problem}")), "{said}");
    assert!(
        said.contains("oc-watchdog-follow: the watchdog is not watching (the line above says why); checking again every 60 s"),
        "{said}"
    );
    // the page: the last good state, and the error
    let page = std::fs::read_to_string(home.join(".local/state/oc-watchdog/report.html")).unwrap();
    assert!(
        page.contains(&format!(
            "TICKS ARE NOT RECORDED: the watchdog is not watching: {problem}"
        )),
        "{page}"
    );
    assert!(
        page.contains("no_agent"),
        "the last tick is gone from the page"
    );
    assert!(page.contains("<title>oc-watchdog: NOT WATCHING</title>"));
    // the same error again (the next tick, the next minute): no second popup
    let check = || {
        home.cmd("wd-store")
            .args(["check-config"])
            .env("DBUS_SESSION_BUS_ADDRESS", &d.bus)
            .env("DISPLAY", &d.display)
            .run()
    };
    check().expect_code(2);
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(d.wait_for(&cfg.display().to_string(), 2).len(), 1);
    // another mistake is told again; a config that loads ends it, and the next mistake is new
    std::fs::write(&cfg, "[detector]\nwindow = \"sixty\"\n").unwrap();
    check().expect_code(2);
    let seen = d.wait_for(&cfg.display().to_string(), 2);
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert!(
        seen[1].body.contains(":2: detector.window: invalid type"),
        "{seen:?}"
    );
    std::fs::write(&cfg, "[opencode]\ndiscover = \"off\"\n").unwrap();
    check().ok();
    assert!(!home.join(".local/state/oc-watchdog/not-watching").exists());
}
