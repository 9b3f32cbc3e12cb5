//! Bad input, values and clocks, tried the way a careless operator or a broken upstream would:
//! each loses nothing but the bad part, names it, and crashes nothing. Named after what broke.

use crate::support::{repo, Home, Run};
use std::io::Write;
use std::process::{Command, Stdio};

const NOW: i64 = 1_796_000_000_000;
const DAY: i64 = 86_400_000;

fn ticks(db: &std::path::Path) -> i64 {
    rusqlite::Connection::open(db)
        .unwrap()
        .query_row("SELECT count(*) FROM ticks", [], |r| r.get(0))
        .unwrap()
}

fn session_and_calls(bad: &[u8]) -> Vec<u8> {
    let mut v = br#"{"kind":"session","id":"ses_u","agent":"build"}"#.to_vec();
    v.push(b'\n');
    v.extend_from_slice(bad);
    v.push(b'\n');
    v.extend_from_slice(
        br#"{"kind":"call","session":"ses_u","id":"c1","t":1796000000000,"tool":"read","args":{"filePath":"/p/a.js"},"status":"completed"}"#,
    );
    v.push(b'\n');
    v
}

#[test]
fn a_line_that_is_not_utf8_is_named_and_skipped_by_progress_detect_wd_store_and_wd_alert() {
    let home = Home::new();
    let input = session_and_calls(b"{\"kind\":\"call\",\"tool\":\"\xff\xfe\"}");
    let r = home.cmd("progress-detect").stdin(input.clone()).run();
    r.expect_code(2);
    assert_eq!(
        r.stderr(),
        "progress-detect: stdin:2: not UTF-8 (invalid byte at column 24); line skipped\n"
    );
    let v = r.kind("verdict");
    assert_eq!(
        (v.len(), v[0]["calls"].as_i64()),
        (1, Some(1)),
        "{}",
        r.story()
    );

    let db = home.join("w.db");
    let db_s = db.to_str().unwrap();
    let r = home
        .cmd("wd-store")
        .args(["--db", db_s, "tick", "--started", &NOW.to_string()])
        .stdin(input.clone())
        .run();
    r.expect_code(2);
    assert_eq!(
        r.stderr(),
        "wd-store: stdin:2: not UTF-8 (invalid byte at column 24); line skipped\n"
    );
    assert_eq!(ticks(&db), 1, "the tick is recorded");
    assert_eq!(r.kind("tick")[0]["outcome"], "blind");
    // everything readable passed through
    assert_eq!(r.records().len(), 3);

    let r = home
        .cmd("wd-alert")
        .args(["--db", db_s, "--now", &NOW.to_string()])
        .stdin(input)
        .run();
    r.expect_code(2);
    assert!(
        r.stderr().starts_with(
            "wd-alert: stdin:2: not UTF-8 (invalid byte at column 24); line skipped\n"
        ),
        "{}",
        r.story()
    );
    let blind: Vec<_> = r
        .records()
        .into_iter()
        .filter(|e| e["dedup_key"] == "watchdog-blind")
        .collect();
    assert_eq!(blind.len(), 1, "{}", r.story());
}

#[test]
fn a_tick_line_with_1e400_is_named_and_skipped_by_wd_alert() {
    let home = Home::new();
    let db = home.join("w.db");
    let r = home
        .cmd("wd-alert")
        .args(["--db", db.to_str().unwrap(), "--now", &NOW.to_string()])
        .stdin("{\"kind\":\"tick\",\"id\":1,\"t\":1e400}\n")
        .run();
    r.expect_code(2);
    assert!(
        r.stderr()
            .starts_with("wd-alert: stdin:1: number out of range at line 1 column 31\n"),
        "{}",
        r.story()
    );
    assert_eq!(
        r.records()[0]["dedup_key"],
        "watchdog-blind",
        "{}",
        r.story()
    );
}

#[test]
fn costs_summing_past_f64_max_stay_a_number_and_wd_alert_takes_the_verdict() {
    let home = Home::new();
    let mut input = String::from("{\"kind\":\"session\",\"id\":\"ses_c\",\"agent\":\"build\"}\n");
    for i in 0..3 {
        input += &format!(
            "{{\"kind\":\"call\",\"session\":\"ses_c\",\"id\":\"c{i}\",\"t\":{},\"tool\":\"read\",\"args\":{{\"filePath\":\"/p/a.js\"}},\"status\":\"completed\",\"cost\":1e308}}\n",
            NOW + i
        );
    }
    let r = home.cmd("progress-detect").stdin(input).run();
    r.ok();
    let v = &r.kind("verdict")[0];
    assert_eq!(
        v["cost_since_landed"].as_f64(),
        Some(f64::MAX),
        "{}",
        r.story()
    );
    let db = home.join("w.db");
    let a = home
        .cmd("wd-alert")
        .args(["--db", db.to_str().unwrap(), "--now", &NOW.to_string()])
        .stdin(r.stdout())
        .run();
    a.ok();
    assert_eq!(a.stderr(), "");
}

#[test]
fn prune_older_than_an_enormous_duration_keeps_a_day_old_tick() {
    let home = Home::new();
    let db = home.join("w.db");
    let db_s = db.to_str().unwrap();
    home.cmd("wd-store")
        .args(["--db", db_s, "tick", "--started", &(NOW - DAY).to_string()])
        .run()
        .ok();
    let r = home
        .cmd("wd-store")
        .args([
            "--db",
            db_s,
            "--now",
            &NOW.to_string(),
            "prune",
            "--older-than",
            "213503982335d",
        ])
        .run();
    r.ok();
    assert_eq!(r.kind("pruned")[0]["ticks"], 0, "{}", r.story());
    assert_eq!(ticks(&db), 1);
}

#[test]
fn a_downstream_that_closes_early_still_gets_the_tick_recorded() {
    let home = Home::new();
    let db = home.join("w.db");
    let mut child = Command::new(assert_cmd::cargo::cargo_bin("wd-store"))
        .env_clear()
        .env("HOME", home.path())
        .args(["--db", db.to_str().unwrap(), "tick"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // the reader (a wd-alert with a broken config, say) goes away before reading anything
    drop(child.stdout.take());
    let mut sin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        let line = "{\"kind\":\"source\",\"source\":\"http://127.0.0.1:4096\",\"pad\":\"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"}\n";
        for _ in 0..40_000 {
            if sin.write_all(line.as_bytes()).is_err() {
                break;
            }
        }
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(ticks(&db), 1, "the tick is recorded though nobody read it");
}

#[test]
fn ten_concurrent_ticks_on_a_fresh_database_all_succeed() {
    let home = Home::new();
    for round in 0..20 {
        let db = home.join(&format!("w{round}.db"));
        let kids: Vec<_> = (0..10)
            .map(|_| {
                let mut c = Command::new(assert_cmd::cargo::cargo_bin("wd-store"))
                    .env_clear()
                    .env("HOME", home.path())
                    .args(["--db", db.to_str().unwrap(), "tick"])
                    .stdin(Stdio::piped())
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap();
                c.stdin
                    .take()
                    .unwrap()
                    .write_all(b"{\"kind\":\"source\",\"source\":\"x\"}\n")
                    .unwrap();
                c
            })
            .collect();
        for k in kids {
            let out = k.wait_with_output().unwrap();
            assert!(
                out.status.success(),
                "round {round}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        assert_eq!(ticks(&db), 10, "round {round}");
    }
}

#[test]
fn a_tick_from_a_clock_four_years_ahead_does_not_move_last_tick_into_the_future() {
    let home = Home::new();
    let db = home.join("w.db");
    let db_s = db.to_str().unwrap();
    let last = |now: i64| -> Run {
        let r = home
            .cmd("wd-store")
            .args(["--db", db_s, "--now", &now.to_string(), "last-tick"])
            .run();
        r.ok();
        r
    };
    let future = NOW + 4 * 365 * DAY;
    home.cmd("wd-store")
        .args(["--db", db_s, "tick", "--started", &future.to_string()])
        .run()
        .ok();
    // only a future tick (the clock stepped back under it): an hour back, never now, which
    // would list no session and record an all-clear while loops run (#30, point 7)
    let r = last(NOW);
    assert_eq!(r.stdout(), format!("{}\n", NOW - 3_600_000));
    assert!(
        r.stderr().contains(
            "in the future (was the clock ahead, or stepped back?); using 2026-11-29T23:53:20.000Z, an hour back, as a first tick does"
        ),
        "{}",
        r.story()
    );
    // an honest tick after the clock was fixed: that one
    home.cmd("wd-store")
        .args([
            "--db",
            db_s,
            "tick",
            "--started",
            &(NOW - 300_000).to_string(),
        ])
        .run()
        .ok();
    assert_eq!(last(NOW).stdout(), format!("{}\n", NOW - 300_000));
}

/// Regression (#30, point 7): a full state directory was said only in the journal of the tick
/// that failed, and `oc-watchdog-tick` exited 0. The state home is a 2 MiB tmpfs, filled up
/// after a first tick; the page is written outside it.
#[test]
fn a_full_state_directory_is_said_by_status_the_page_and_the_tick_script() {
    let home = Home::new();
    let state = home.join(".local/state");
    std::fs::create_dir_all(&state).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=2m", "tmpfs"])
        .arg(&state)
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        eprintln!("skipped: a tmpfs cannot be mounted here (needs root); a full state directory is not tried");
        return;
    }
    struct Unmount(std::path::PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(&self.0).status();
        }
    }
    let _mount = Unmount(state.clone());
    let page = home.join("page.html");
    let cfg = home.join(".config/oc-watchdog/watchdog.toml");
    std::fs::create_dir_all(cfg.parent().unwrap()).unwrap();
    std::fs::write(
        &cfg,
        format!(
            "[opencode]\ndiscover = \"off\"\n\n[report]\nfile = \"{}\"\n",
            page.display()
        ),
    )
    .unwrap();
    let bins = assert_cmd::cargo::cargo_bin("wd-store")
        .parent()
        .unwrap()
        .to_path_buf();
    let script = || -> Run {
        let out = Command::new("sh")
            .arg(repo().join("deploy/oc-watchdog-tick"))
            .env_clear()
            .env(
                "PATH",
                format!("{}:{}", bins.display(), std::env::var("PATH").unwrap()),
            )
            .env("HOME", home.path())
            .env("XDG_CONFIG_HOME", home.join(".config"))
            .env("XDG_DATA_HOME", home.join(".local/share"))
            .env("XDG_STATE_HOME", &state)
            .output()
            .unwrap();
        Run {
            shown: "oc-watchdog-tick".into(),
            out,
        }
    };
    let status = || home.cmd("wd-store").args(["status"]).run();
    script().ok();
    assert_eq!(ticks(&state.join("oc-watchdog/watchdog.db")), 1);
    let r = status();
    r.ok();
    assert_eq!(r.kind("status")[0]["state"], serde_json::Value::Null);
    // fill the directory up
    let mut f = std::fs::File::create(state.join("filler")).unwrap();
    while f.write_all(&[7u8; 4096]).is_ok() {}
    drop(f);
    let dir = state.join("oc-watchdog");
    // SQLite cannot even open it for reading (its WAL index lives there): status says why
    let r = status();
    assert_eq!(r.code(), 2, "{}", r.story());
    assert!(
        r.stderr().starts_with(&format!(
            "wd-store: state directory {}: full (No space left on device (os error 28)): ticks cannot be recorded: watchdog database",
            dir.display()
        )),
        "{}",
        r.story()
    );
    let r = script();
    assert_eq!(r.code(), 2, "{}", r.story());
    assert!(
        r.stderr().contains(&format!(
            "wd-store: state directory {}: full",
            dir.display()
        )),
        "{}",
        r.story()
    );
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(
        html.contains(&format!(
            "TICKS ARE NOT RECORDED: state directory {}: full",
            dir.display()
        )),
        "the page says it"
    );
    // room again: the record is whole, without the tick that could not run
    std::fs::remove_file(state.join("filler")).unwrap();
    assert_eq!(ticks(&dir.join("watchdog.db")), 1);
    let r = status();
    r.ok();
    assert_eq!(r.kind("status")[0]["state"], serde_json::Value::Null);
}

/// Runs a command as `nobody` when we are root (permissions do not bind root), else as we are.
fn unprivileged(home: &Home, bin: &str, args: &[&str]) -> Run {
    let exe = assert_cmd::cargo::cargo_bin(bin);
    let root = Command::new("id")
        .arg("-u")
        .output()
        .map(|o| o.stdout == b"0\n")
        .unwrap_or(false);
    let mut c = if root {
        // a copy nobody can run, in a directory nobody can enter
        let copy = home.join(bin);
        std::fs::copy(&exe, &copy).unwrap();
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(copy);
        c
    } else {
        Command::new(exe)
    };
    let out = c
        .env_clear()
        .env("HOME", home.path())
        .args(args)
        .output()
        .unwrap();
    Run {
        shown: format!("{bin} {}", args.join(" ")),
        out,
    }
}

#[test]
fn a_query_on_a_database_in_a_read_only_directory_says_read_only() {
    use std::os::unix::fs::PermissionsExt;
    let home = Home::new();
    let dir = home.join("ro");
    std::fs::create_dir(&dir).unwrap();
    let db = dir.join("w.db");
    home.cmd("wd-store")
        .args(["--db", db.to_str().unwrap(), "tick"])
        .run()
        .ok();
    for p in [home.path(), &dir] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o644)).unwrap();
    let r = unprivileged(&home, "wd-store", &["--db", db.to_str().unwrap(), "status"]);
    r.expect_code(2);
    assert_eq!(
        r.stderr(),
        format!(
            "wd-store: watchdog database {}: read-only: its directory {} is not writable, and SQLite keeps the database's -wal and -shm files there, for reading too\n",
            db.display(),
            dir.display()
        )
    );
}

#[test]
fn a_failed_metrics_write_leaves_no_temp_file_and_does_not_blame_the_database() {
    let home = Home::new();
    let db = home.join("w.db");
    let target = home.join("metrics.prom");
    std::fs::create_dir(&target).unwrap();
    home.cmd("wd-store")
        .args(["--db", db.to_str().unwrap(), "tick"])
        .stdin("")
        .run()
        .ok();
    let r = home
        .cmd("wd-store")
        .args([
            "--db",
            db.to_str().unwrap(),
            "metrics",
            "--output",
            target.to_str().unwrap(),
        ])
        .run();
    r.expect_code(2);
    assert!(
        r.stderr().starts_with(&format!(
            "wd-store: metrics file {}: cannot replace it with ",
            target.display()
        )),
        "{}",
        r.story()
    );
    let left: Vec<_> = std::fs::read_dir(home.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".tmp"))
        .collect();
    assert_eq!(left, Vec::<String>::new());
}

#[test]
fn a_config_type_error_names_the_file_line_and_key() {
    let home = Home::new();
    let cfg = home.join("watchdog.toml");
    std::fs::write(&cfg, "# mine\n[detector]\nwindow = \"sixty\"\n").unwrap();
    for bin in ["progress-detect", "wd-store", "wd-alert"] {
        let mut args = vec!["--config", cfg.to_str().unwrap()];
        if bin == "wd-store" {
            args.push("status");
        }
        let r = home.cmd(bin).args(&args).run();
        r.expect_code(2);
        assert_eq!(
            r.stderr(),
            format!(
                "{bin}: config {}:3: detector.window: invalid type: string \"sixty\", expected usize\n",
                cfg.display()
            )
        );
    }
}

#[test]
fn uninstall_keeps_an_edited_config_unless_purge() {
    let home = Home::new();
    let conf = home.join(".config/oc-watchdog/watchdog.toml");
    std::fs::create_dir_all(conf.parent().unwrap()).unwrap();
    let shipped = std::fs::read_to_string(repo().join("config/watchdog.toml")).unwrap();
    let edited = format!("{shipped}\n[[channels]]\nname = \"desktop\"\ntype = \"desktop\"\n");
    let install = |arg: &str| {
        let out = Command::new(repo().join("deploy/install"))
            .arg(arg)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap())
            .env("HOME", home.path())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    std::fs::write(&conf, &edited).unwrap();
    let said = install("--uninstall");
    assert_eq!(std::fs::read_to_string(&conf).unwrap(), edited);
    assert!(said.contains("your edited config is kept in"), "{said}");
    // an unedited copy goes with the rest
    std::fs::write(&conf, &shipped).unwrap();
    install("--uninstall");
    assert!(!conf.exists());
    std::fs::create_dir_all(conf.parent().unwrap()).unwrap();
    std::fs::write(&conf, &edited).unwrap();
    install("--purge");
    assert!(!conf.exists());
}

#[test]
fn a_failed_delivery_does_not_write_the_webhook_credentials_to_the_journal_or_database() {
    let home = Home::new();
    let cfg = home.join("watchdog.toml");
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    std::fs::write(
        &cfg,
        format!("[[channels]]\nname = \"hook\"\ntype = \"webhook\"\nurl = \"http://bob:S3cretHookPw@127.0.0.1:{dead}/hook?token=QueryTok3n\"\ntimeout_secs = 1\n"),
    )
    .unwrap();
    let db = home.join("w.db");
    let verdict = r#"{"kind":"verdict","session":"ses_x","root":"ses_x","agent":"build","calls":50,"flagged":true,"reasons":["top"],"signals":{"top":20,"top_target":"bash make"},"landed_in_window":false,"calls_since_landed":50,"cost_since_landed":0.5,"t":1796000000000}"#;
    let r = home
        .cmd("wd-alert")
        .args([
            "--db",
            db.to_str().unwrap(),
            "--config",
            cfg.to_str().unwrap(),
            "--now",
            &NOW.to_string(),
        ])
        .stdin(format!("{verdict}\n"))
        .run();
    r.ok();
    assert!(
        r.stderr()
            .contains("delivery failed: POST http://bob:***@127.0.0.1:"),
        "{}",
        r.story()
    );
    let c = rusqlite::Connection::open(&db).unwrap();
    let errors: String = c
        .query_row(
            "SELECT group_concat(detail, ' ') FROM deliveries",
            [],
            |r| r.get(0),
        )
        .unwrap();
    for text in [r.stdout(), r.stderr(), errors] {
        assert!(
            !text.contains("S3cretHookPw") && !text.contains("QueryTok3n"),
            "{text}"
        );
    }
}

#[test]
fn oc_watchdog_follow_under_a_name_with_a_space_and_parentheses_chained_exec_setsid_for_ever() {
    // issue 42: it read the process group as the fifth space-separated word of /proc/$$/stat,
    // whose second field is "(comm)", the file name: under `wd follow (x)` it misread it, ran
    // `exec setsid "$0"` again and again (1,138 processes in 3 s) and returned 0 to its caller
    use std::os::unix::fs::PermissionsExt;
    let home = Home::new();
    let dir = home.join("a dir (copy)");
    std::fs::create_dir_all(&dir).unwrap();
    let script = dir.join("wd follow (x)");
    std::fs::copy(repo().join("deploy/oc-watchdog-follow"), &script).unwrap();
    // a setsid that counts its runs, and gives up after 20 so a chain cannot run away
    let bin = home.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let count = home.join("setsid.count");
    let real = ["/usr/bin/setsid", "/bin/setsid"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .expect("setsid (util-linux)");
    std::fs::write(
        bin.join("setsid"),
        format!(
            "#!/bin/sh\necho run >> '{}'\n[ \"$(wc -l < '{}')\" -le 20 ] || exit 3\nexec {real} \"$@\"\n",
            count.display(),
            count.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(bin.join("setsid"), std::fs::Permissions::from_mode(0o755)).unwrap();
    // started as a child of this test: not a process-group leader, so it takes setsid once
    let out = Command::new("timeout")
        .arg("10")
        .arg(&script)
        .env_clear()
        .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
        .env("HOME", home.path())
        .env("XDG_STATE_HOME", home.join("state"))
        .output()
        .unwrap();
    let runs = std::fs::read_to_string(&count)
        .unwrap_or_default()
        .lines()
        .count();
    assert_eq!(runs, 1, "setsid ran {runs} times: {out:?}");
    // it went on to run the pipeline, whose stages are not there: it ends as a failed one does
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("oc-watchdog-follow: the pipeline ended"),
        "{out:?}"
    );
    // the state directory it made is private
    use std::os::unix::fs::MetadataExt;
    let made = std::fs::metadata(home.join("state/oc-watchdog")).unwrap();
    assert_eq!(made.mode() & 0o777, 0o700);
}

#[test]
fn a_full_state_directory_is_told_to_the_channels_once_straight_and_resolved_when_there_is_room() {
    use crate::support::stub::{Reply, Stub};
    // a real full filesystem: a 1 MiB tmpfs over the state directory, in a mount namespace of
    // the test's own (root, or an unprivileged user namespace), filled to the last block
    let stub = Stub::start();
    stub.route("POST /hook", Reply::Json(200, "{}".into()));
    let home = Home::new();
    std::fs::create_dir_all(home.join(".config/oc-watchdog")).unwrap();
    std::fs::write(
        home.join(".config/oc-watchdog/watchdog.toml"),
        format!(
            "[[channels]]\nname = \"hook\"\ntype = \"webhook\"\nurl = \"{}/hook\"\n",
            stub.url
        ),
    )
    .unwrap();
    std::fs::create_dir_all(home.join("run")).unwrap();
    let script = r#"
state="$XDG_STATE_HOME/oc-watchdog"
mkdir -p "$state"
mount -t tmpfs -o size=1m tmpfs "$state" || exit 97
dd if=/dev/zero of="$state/filler" bs=64k 2>/dev/null
for step in full again; do echo "== $step"; "$WD" check-config 2>&1; echo "rc=$?"; done
rm "$state/filler"
echo "== room"; "$WD" check-config 2>&1; echo "rc=$?"
"#;
    let out = crate::support::installed_cmd("unshare", home.path())
        .args(["--mount", "--map-root-user", "sh", "-c", script])
        .env("WD", assert_cmd::cargo::cargo_bin("wd-store"))
        .env("XDG_RUNTIME_DIR", home.join("run"))
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "no tmpfs could be mounted: {text}");
    let state = home.join(".local/state/oc-watchdog");
    let full = format!(
        "wd-store: state directory {}: full (0 KiB free): ticks cannot be recorded; the watchdog is not watching until there is room: the follow service checks again every minute, the timer at its next tick",
        state.display()
    );
    assert_eq!(
        text.lines().collect::<Vec<_>>(),
        [
            "== full",
            &full,
            "wd-store: channel hook: told (HTTP 200) that the watchdog cannot record",
            "rc=2",
            "== again",
            &full,
            "rc=2",
            "== room",
            "wd-store: channel hook: told (HTTP 200) that the watchdog records again",
            "rc=0",
        ]
    );
    let hooks: Vec<serde_json::Value> = stub
        .requests()
        .iter()
        .map(|r| serde_json::from_str(&r.body).unwrap())
        .collect();
    let seen: Vec<(&str, &str, &str)> = hooks
        .iter()
        .map(|h| {
            (
                h["dedup_key"].as_str().unwrap(),
                h["state"].as_str().unwrap(),
                h["severity"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("watchdog-unrecorded", "trigger", "critical"),
            ("watchdog-unrecorded", "resolve", "info")
        ]
    );
    assert_eq!(hooks[0]["title"], "watchdog is blind: it cannot record");
    assert!(!home.join("run/oc-watchdog-unrecorded").exists());
}
