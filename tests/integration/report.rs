//! The operator's page end to end: the installed tick against a real `opencode serve` (a session
//! that works, then loops, and a healthy one), the page it writes opened in real headless
//! Chromium (DOM and screenshot), and the alert's link to the loop's anchor.

use crate::support::ocsim::{self, Opts, Sim};
use crate::support::{repo, Home, Run};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Runs an installed command with the temp HOME's environment.
fn installed(home: &Home, prog: &str, args: &[&str]) -> Run {
    installed_env(home, prog, args, &[])
}

/// [`installed`], with more environment (a time zone, a desktop).
fn installed_env(home: &Home, prog: &str, args: &[&str], env: &[(&str, &str)]) -> Run {
    let h = home.path();
    let out = crate::support::installed_cmd(prog, h)
        .envs(env.iter().copied())
        .args(args)
        .output()
        .unwrap();
    Run {
        shown: format!("{prog} {}", args.join(" ")),
        out,
    }
}

/// Headless Chromium with the flags that work on this machine (no network, fresh profile).
pub fn chromium(args: &[&str]) -> Run {
    let profile = tempfile::tempdir().unwrap();
    let mut all = vec![
        "--headless".to_string(),
        "--no-sandbox".into(),
        "--disable-gpu".into(),
        "--disable-quic".into(),
        "--no-first-run".into(),
        "--disable-background-networking".into(),
        "--disable-component-update".into(),
        "--disable-sync".into(),
        format!("--user-data-dir={}", profile.path().display()),
    ];
    all.extend(args.iter().map(|a| a.to_string()));
    let out = Command::new("chromium")
        .args(&all)
        .output()
        .expect("chromium (tests/setup installs Debian's chromium)");
    Run {
        shown: format!("chromium {}", all.join(" ")),
        out,
    }
}

/// The DOM after Chromium loaded the page. The page holds no script and its CSP
/// (`default-src 'none'`) would block one: what is read here is what a reader with JavaScript
/// off sees. (`--blink-settings=scriptEnabled=false` would also stop `--dump-dom` itself.)
pub fn dom(page: &Path) -> String {
    let r = chromium(&["--dump-dom", &format!("file://{}", page.display())]);
    r.ok();
    r.stdout()
}

/// The `<article id="...">` element of the DOM, whole.
fn article<'a>(dom: &'a str, id: &str) -> &'a str {
    let start = dom
        .find(&format!("<article id=\"{id}\""))
        .unwrap_or_else(|| panic!("no article #{id} in the DOM"));
    let end = dom[start..].find("</article>").unwrap() + start;
    &dom[start..end]
}

/// (class, subpaths) of each path of a session picture that draws calls (not the axis or the
/// marker lines): a subpath is one mark.
fn mark_paths(pic: &str) -> Vec<(String, usize)> {
    pic.split("<path class=\"")
        .skip(1)
        .filter_map(|p| {
            let (cls, rest) = p.split_once('"')?;
            let d = rest.trim_start().strip_prefix("d=\"")?.split('"').next()?;
            (!matches!(cls, "ax" | "ls" | "ff"))
                .then(|| (cls.to_string(), d.matches(['M', 'm']).count()))
        })
        .collect()
}

#[test]
fn the_page_shows_the_loop_with_its_picture_and_alerts_link_to_it() {
    let sim = Sim::start();
    let home = Home::new();
    let cfg_path = home.join(".config/oc-watchdog/watchdog.toml");
    std::fs::create_dir_all(cfg_path.parent().unwrap()).unwrap();
    std::fs::write(
        &cfg_path,
        format!("[opencode]\nservers = [\"{}\"]\n", sim.url),
    )
    .unwrap();
    // a session that works (30 edits and 3 commits land), then goes round read, bash, grep
    let looping = sim.run_with(
        "fx_atlas",
        Opts {
            then: vec!["fx_atlas_loop".into()],
            ..Opts::default()
        },
    );
    let healthy = sim.run("healthy");
    let bins: PathBuf = assert_cmd::cargo::cargo_bin("wd-store")
        .parent()
        .unwrap()
        .to_path_buf();
    // the installer runs the first tick
    let r = installed(
        &home,
        repo().join("deploy/install").to_str().unwrap(),
        &["--from", bins.to_str().unwrap()],
    );
    r.ok();
    assert!(
        r.stderr()
            .contains(&format!("dedup=loop:{} state=trigger", looping.id)),
        "{}\n{}",
        r.story(),
        installed(&home, "wd-store", &["verdicts", "--format", "table"]).stdout()
    );
    let page = home.join(".local/state/oc-watchdog/report.html");
    let text = std::fs::read_to_string(&page).unwrap();
    if let Ok(shot) = std::env::var("REPORT_SCREENSHOT") {
        std::fs::write(format!("{shot}.html"), &text).unwrap();
    }
    assert!(
        !home
            .join(".local/state/oc-watchdog/tick-calls.jsonl")
            .exists(),
        "the tick's call stream is removed after the tick"
    );
    // self-contained: nothing fetched, no scripts
    for bad in ["<script", "http://", "https://", "<link", "@import", "url("] {
        assert!(!text.contains(bad), "the page holds {bad:?}");
    }

    // the calls of the looping session as oc-calls reads them
    let calls = installed(&home, "oc-calls", &["--server", &sim.url, &looping.id]);
    calls.ok();
    let cs = calls.kind("call");
    let n_calls = cs.len();
    assert_eq!(n_calls, 63 + 90, "{}", calls.story());
    let landed = cs.iter().filter(|c| c["landed"] == true).count();
    let edits = cs.iter().filter(|c| c["tool"] == "edit").count();
    assert_eq!(edits, 30);

    let d = dom(&page);
    let a = article(&d, &looping.id);
    assert!(a.contains("opencode loop: build repeats "), "{a}");
    assert!(a.contains("<td>model</td><td>sim/sim-model</td>"), "{a}");
    // one mark per call, the loop's 30 repeats of its top target highlighted, the landed
    // changes marked
    let pic_start = a.find("<svg class=\"pic\"").expect("a picture");
    let pic = &a[pic_start..a[pic_start..].find("</svg>").unwrap() + pic_start];
    // (one path per tool colour, one for the repeats, one for the landed changes; one subpath
    // per call)
    let paths = mark_paths(pic);
    let count = |f: &dyn Fn(&str) -> bool| -> usize {
        paths.iter().filter(|(c, _)| f(c)).map(|(_, n)| n).sum()
    };
    assert_eq!(
        count(&|c| c.starts_with("c ") || c.starts_with("r ")),
        n_calls,
        "{paths:?}\n{pic}"
    );
    assert_eq!(count(&|c| c.starts_with("r ")), 30, "{paths:?}");
    assert_eq!(
        paths.iter().filter(|(c, _)| c.starts_with("r ")).count(),
        1,
        "the repeats are one path: {paths:?}"
    );
    assert_eq!(count(&|c| c == "c te" || c == "r te"), edits, "{paths:?}");
    assert_eq!(count(&|c| c == "land"), landed, "{paths:?}");
    assert!(
        pic.contains(&format!("<title>{n_calls} calls (")),
        "the picture's title counts its calls: {pic}"
    );
    assert!(pic.contains(">loop starts</text>") && pic.contains(">flagged</text>"));
    // the episode table says what looped and in which project (#41: it said neither)
    let top: String = rusqlite::Connection::open(home.join(".local/state/oc-watchdog/watchdog.db"))
        .unwrap()
        .query_row(
            "SELECT top_target FROM episodes WHERE root = ?1",
            [&looping.id],
            |r| r.get(0),
        )
        .unwrap();
    let eps = &d[d.find("<section id=\"episodes\">").unwrap()..];
    let eps = &eps[..eps.find("</section>").unwrap()];
    assert!(
        eps.contains("<th>root</th><th>what</th><th>project</th><th>agent · model</th>"),
        "{eps}"
    );
    assert!(
        eps.contains(&format!(
            "<code>{}</code></a></td><td>\u{201c}Scripted session\u{201d} <code>{top}</code></td><td><code>{}</code></td><td>build · sim/sim-model</td>",
            looping.id,
            sim.proj.display()
        )),
        "{eps}"
    );
    // the healthy session has no alert and no article
    assert!(!d.contains(&format!("<article id=\"{}\"", healthy.id)));
    // the Watchdog section shows the tick
    assert!(
        d.contains("<td>outcome</td><td class=\"bad\">flagged</td>"),
        "{d}"
    );

    // the alert links to the loop's anchor on the page
    let body: String =
        rusqlite::Connection::open(home.join(".local/state/oc-watchdog/watchdog.db"))
            .unwrap()
            .query_row(
                "SELECT body FROM events WHERE dedup_key = ?1",
                [format!("loop:{}", looping.id)],
                |r| r.get(0),
            )
            .unwrap();
    let ev: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        ev["link"],
        format!("file://{}#{}", page.display(), looping.id)
    );

    // a screenshot for the closing note
    let shot = std::env::var("REPORT_SCREENSHOT")
        .map(PathBuf::from)
        .unwrap_or_else(|_| home.join("report.png"));
    let r = chromium(&[
        "--window-size=1200,1400",
        "--hide-scrollbars",
        &format!("--screenshot={}", shot.display()),
        &format!("file://{}#{}", page.display(), looping.id),
    ]);
    r.ok();
    let png = std::fs::read(&shot).unwrap();
    assert_eq!(&png[1..4], b"PNG");
    assert!(
        png.len() > 20_000,
        "a screenshot of a blank page? {}",
        png.len()
    );
}

#[test]
fn a_click_on_the_desktop_alert_opens_the_page_at_the_loop() {
    // its own desktop: the click goes to the notification on top, which on the shared one may
    // be another test's (seen in a full run once popups carry actions)
    let d = crate::support::desktop::Desktop::private();
    let home = Home::new();
    let opened = home.join("opened.txt");
    let opener = home.join("opener.sh");
    std::fs::write(
        &opener,
        format!("#!/bin/sh\necho \"$1\" >> '{}'\n", opened.display()),
    )
    .unwrap();
    std::fs::set_permissions(&opener, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let cfg = home.join(".config/oc-watchdog/watchdog.toml");
    std::fs::create_dir_all(cfg.parent().unwrap()).unwrap();
    std::fs::write(
        &cfg,
        format!(
            "[report]\nopen_with = \"{}\"\n\n[[channels]]\nname = \"desk\"\ntype = \"desktop\"\n",
            opener.display()
        ),
    )
    .unwrap();
    let root = format!("ses_click{}", std::process::id());
    let verdict = serde_json::json!({"kind": "verdict", "session": root, "root": root, "agent": "build",
        "model": "sim/sim-model", "flagged": true, "reasons": ["top"],
        "signals": {"top": 14, "top_target": "read src/a.js"}, "calls": 20, "calls_since_landed": 20,
        "cost_since_landed": 0.2});
    let input = format!(
        "{{\"kind\":\"source\",\"source\":\"http://127.0.0.1:4096\",\"sessions\":1}}\n{verdict}\n"
    );
    let stored = home.cmd("wd-store").args(["tick"]).stdin(input).run();
    stored.ok();
    let r = home
        .cmd("wd-alert")
        .env("DBUS_SESSION_BUS_ADDRESS", &d.bus)
        .env("DISPLAY", &d.display)
        .stdin(stored.stdout())
        .run();
    r.ok();
    let seen = d.wait_for(&root, 1);
    let url = format!(
        "file://{}#{root}",
        home.join(".local/state/oc-watchdog/report.html").display()
    );
    assert!(seen[0].body.contains(&url), "{seen:?}");
    // click it: dunst invokes the default action of the notification on top
    let t0 = std::time::Instant::now();
    loop {
        let _ = Command::new("dunstctl")
            .arg("action")
            .arg("0")
            .env("DBUS_SESSION_BUS_ADDRESS", &d.bus)
            .env("DISPLAY", &d.display)
            .output();
        std::thread::sleep(std::time::Duration::from_millis(300));
        if let Ok(got) = std::fs::read_to_string(&opened) {
            assert_eq!(got, format!("{url}\n"));
            break;
        }
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(20),
            "the click opened nothing\n{}",
            r.story()
        );
    }
}

/// An operator's first look: the watchdog installed with its default config, a plain `opencode
/// run` looping (no server: only opencode's database shows it), the machine's zone set. The
/// page draws the session from what the tick read of the database, one mark per call the
/// detector judged, and writes its times in that zone.
#[test]
fn an_opencode_run_loop_is_drawn_from_the_database_in_the_machines_time_zone() {
    let home = Home::new();
    let desk = crate::support::desktop::Desktop::shared();
    let env = [
        ("TZ", "Europe/Berlin"),
        ("DBUS_SESSION_BUS_ADDRESS", desk.bus.as_str()),
        ("DISPLAY", desk.display.as_str()),
    ];
    let bins: PathBuf = assert_cmd::cargo::cargo_bin("wd-store")
        .parent()
        .unwrap()
        .to_path_buf();
    installed_env(
        &home,
        repo().join("deploy/install").to_str().unwrap(),
        &["--from", bins.to_str().unwrap()],
        &env,
    )
    .ok();
    let fake = ocsim::Fake::start();
    fake.configure(home.path());
    let proj = home.join("work/proj");
    std::fs::create_dir_all(proj.parent().unwrap()).unwrap();
    ocsim::make_project(&proj);
    let mut run = ocsim::opencode(home.path(), &proj)
        .args(["run", "SCRIPT:slow_reread40 go"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(home.join("run.err")).unwrap())
        .spawn()
        .expect("opencode run");
    // wait until the session has made 10 calls
    let db = home.join(".local/share/opencode/opencode.db");
    let t0 = Instant::now();
    let id = loop {
        let got = rusqlite::Connection::open_with_flags(
            &db,
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
        )
        .and_then(|c| {
            c.query_row(
                "SELECT s.id, (SELECT count(*) FROM part p WHERE p.session_id = s.id
                    AND p.data LIKE '%\"type\":\"tool\"%') FROM session s ORDER BY s.time_created DESC LIMIT 1",
                [],
                |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)),
            )
        });
        if let Ok((id, n)) = got {
            if n >= 10 {
                break id;
            }
        }
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "no looping session\n{}",
            std::fs::read_to_string(home.join("run.err")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(300));
    };
    let tick = home.join(".local/bin/oc-watchdog-tick");
    let r = installed_env(&home, tick.to_str().unwrap(), &[], &env);
    r.ok();
    let _ = run.kill();
    let _ = run.wait();
    assert!(
        r.stderr()
            .contains(&format!("dedup=loop:{id} state=trigger")),
        "{}",
        r.story()
    );
    // the calls the detector judged in that tick
    let judged: i64 = rusqlite::Connection::open(home.join(".local/state/oc-watchdog/watchdog.db"))
        .unwrap()
        .query_row(
            "SELECT calls FROM verdicts WHERE session = ?1 ORDER BY tick DESC LIMIT 1",
            [&id],
            |r| r.get(0),
        )
        .unwrap();
    assert!(judged >= 10, "{judged}");

    let page = home.join(".local/state/oc-watchdog/report.html");
    let d = dom(&page);
    assert!(
        d.contains("times are local time, Europe/Berlin (UTC+0"),
        "the page names the zone\n{d}"
    );
    let a = article(&d, &id);
    let pic_start = a.find("<svg class=\"pic\"").expect("a picture");
    let pic = &a[pic_start..a[pic_start..].find("</svg>").unwrap() + pic_start];
    let marks: usize = mark_paths(pic)
        .iter()
        .filter(|(c, _)| c.starts_with("c ") || c.starts_with("r "))
        .map(|(_, n)| n)
        .sum();
    assert_eq!(marks as i64, judged, "{pic}");
    // times in the zone: the alert's start, and the picture's span (CET in winter, CEST in summer)
    assert!(
        a.contains(" CET</time>") || a.contains(" CEST</time>"),
        "{a}"
    );
    assert!(
        pic.contains(" CET; ")
            || pic.contains(" CEST; ")
            || pic.contains(" CET</title>")
            || pic.contains(" CEST</title>"),
        "{pic}"
    );
    if let Ok(shot) = std::env::var("REPORT_SCREENSHOT_RUN") {
        chromium(&[
            "--window-size=1200,1400",
            "--hide-scrollbars",
            &format!("--screenshot={shot}"),
            &format!("file://{}#{}", page.display(), id),
        ])
        .ok();
    }
}
