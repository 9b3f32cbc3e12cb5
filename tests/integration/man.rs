//! What `deploy/install` leaves for an operator to read and run: man pages that real `man`
//! renders, with every page they name installed beside them; `oc-watchdog-tick --help` as help,
//! not a tick; stripped binaries; and an uninstall that leaves no click helper running and no
//! block-model backup behind (and refuses while a model is still blocked).

use crate::support::desktop::Desktop;
use crate::support::{repo, Home};
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A command with a clean environment pointing at `home` (XDG dirs left to their defaults).
fn cmd(home: &Path, prog: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut c = Command::new(prog);
    c.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap())
        .env("HOME", home)
        .env("LC_ALL", "C")
        .env("OPENCODE_DISABLE_MODELS_FETCH", "1")
        .env("OPENCODE_DISABLE_AUTOUPDATE", "1")
        .env("OPENCODE_DISABLE_LSP_DOWNLOAD", "1")
        .current_dir(home);
    c
}

fn story(what: &str, o: &Output) -> String {
    format!(
        "{what}: {}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn install(home: &Path, args: &[&str]) -> Output {
    cmd(home, repo().join("deploy/install"))
        .args(args)
        .output()
        .unwrap()
}

fn bins() -> PathBuf {
    assert_cmd::cargo::cargo_bin("wd-store")
        .parent()
        .unwrap()
        .to_path_buf()
}

/// `name(N)` references in rendered man text, e.g. `oc-calls(1)`.
fn references(text: &str) -> Vec<(String, String)> {
    let b = text.as_bytes();
    let mut refs = Vec::new();
    for (i, _) in text.match_indices('(') {
        let Some(close) = text[i..].find(')').map(|c| i + c) else {
            continue;
        };
        let section = &text[i + 1..close];
        if section.len() != 1 || !section.as_bytes()[0].is_ascii_digit() {
            continue;
        }
        let mut start = i;
        while start > 0 && (b[start - 1].is_ascii_alphanumeric() || b"-_.".contains(&b[start - 1]))
        {
            start -= 1;
        }
        if start < i {
            refs.push((text[start..i].to_string(), section.to_string()));
        }
    }
    refs
}

/// Whether the ELF file has a `.debug_info` section (read from its section headers: the string
/// alone is also in std's backtrace code).
fn has_debug_info(bin: &Path) -> bool {
    let b = std::fs::read(bin).unwrap();
    assert_eq!(
        &b[..5],
        b"\x7fELF\x02",
        "{}: not a 64-bit ELF file",
        bin.display()
    );
    let u16_at = |o: usize| u16::from_le_bytes(b[o..o + 2].try_into().unwrap()) as usize;
    let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap()) as usize;
    let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap()) as usize;
    let (shoff, shentsize, shnum, shstrndx) =
        (u64_at(0x28), u16_at(0x3a), u16_at(0x3c), u16_at(0x3e));
    let names = u64_at(shoff + shstrndx * shentsize + 0x18);
    (0..shnum).any(|i| {
        let name = names + u32_at(shoff + i * shentsize);
        b[name..].starts_with(b".debug_info\0")
    })
}

#[test]
fn installed_man_pages_render_and_every_page_they_name_is_installed() {
    let home = Home::new();
    let h = home.path();
    let o = install(h, &["--from", bins().to_str().unwrap()]);
    assert!(o.status.success(), "{}", story("deploy/install", &o));
    let man1 = home.join(".local/share/man/man1");
    let mut pages: Vec<String> = std::fs::read_dir(&man1)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    pages.sort();
    assert_eq!(
        pages,
        [
            "oc-calls.1",
            "oc-sessions.1",
            "oc-watchdog-follow.1",
            "oc-watchdog-tick.1",
            "progress-detect.1",
            "wd-alert.1",
            "wd-store.1"
        ]
    );
    let resolves = |name: &str, section: &str| {
        home.join(&format!(".local/share/man/man{section}/{name}.{section}"))
            .exists()
    };
    for page in &pages {
        let o = cmd(h, "man")
            .env("MANWIDTH", "400") // no line breaks inside a reference
            .arg("-l")
            .arg(man1.join(page))
            .output()
            .unwrap();
        let what = format!("man -l {page}");
        assert!(o.status.success(), "{}", story(&what, &o));
        assert_eq!(
            String::from_utf8_lossy(&o.stderr),
            "",
            "{}",
            story(&what, &o)
        );
        let text = String::from_utf8_lossy(&o.stdout);
        let name = page.trim_end_matches(".1");
        assert!(text.contains("EXIT STATUS"), "{}", story(&what, &o));
        // one line, at this width
        let see_also = text[text.find("SEE ALSO").expect("a SEE ALSO section")..]
            .lines()
            .nth(1)
            .unwrap_or_default();
        assert!(
            !see_also.contains(&format!("{name}(1)")),
            "{page} lists itself in SEE ALSO:\n{see_also}"
        );
        for (n, s) in references(&text) {
            assert!(
                n == name || resolves(&n, &s),
                "{page} names {n}({s}), which is not installed:\n{text}"
            );
        }
        // the other five pages, and only they, in SEE ALSO
        let mut named: Vec<String> = references(see_also)
            .into_iter()
            .map(|(n, s)| format!("{n}.{s}"))
            .collect();
        named.sort();
        let others: Vec<&String> = pages.iter().filter(|p| *p != page).collect();
        assert_eq!(named.iter().collect::<Vec<_>>(), others, "{page}: SEE ALSO");
    }
    // wd-store's commands under their own names, not as pages of their own
    let o = cmd(h, "man")
        .env("MANWIDTH", "400")
        .arg("-l")
        .arg(man1.join("wd-store.1"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("\n       wd-store loops\n"), "{text}");
    assert!(!text.contains("wd-store-loops"), "{text}");
    // the units' Documentation= pages are installed too
    for unit in ["oc-watchdog.service", "oc-watchdog.timer"] {
        let text =
            std::fs::read_to_string(home.join(&format!(".config/systemd/user/{unit}"))).unwrap();
        let doc = text
            .lines()
            .find_map(|l| l.strip_prefix("Documentation="))
            .unwrap();
        for r in doc.split_whitespace() {
            let (n, s) = references(r).pop().unwrap();
            assert!(resolves(&n, &s), "{unit}: {r} is not installed");
        }
    }
}

#[test]
fn the_tick_prints_help_and_runs_no_tick() {
    let home = Home::new();
    let h = home.path();
    let o = install(h, &["--from", bins().to_str().unwrap()]);
    assert!(o.status.success(), "{}", story("deploy/install", &o));
    let bin = home.join(".local/bin");
    let last = || {
        let o = cmd(h, bin.join("wd-store"))
            .arg("last-tick")
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", story("wd-store last-tick", &o));
        String::from_utf8(o.stdout).unwrap()
    };
    let before = last();
    assert_ne!(before, "", "the install runs one tick");
    for flag in ["--help", "-h"] {
        let o = cmd(h, bin.join("oc-watchdog-tick"))
            .arg(flag)
            .output()
            .unwrap();
        let what = format!("oc-watchdog-tick {flag}");
        assert!(o.status.success(), "{}", story(&what, &o));
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            out.contains("\nUsage: oc-watchdog-tick\n"),
            "{}",
            story(&what, &o)
        );
        assert!(out.contains("oc-watchdog-tick(1)"), "{}", story(&what, &o));
        assert_eq!(o.stderr, b"", "{}", story(&what, &o));
    }
    let o = cmd(h, bin.join("oc-watchdog-tick"))
        .arg("--now")
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(2),
        "{}",
        story("oc-watchdog-tick --now", &o)
    );
    assert_eq!(
        String::from_utf8_lossy(&o.stderr),
        "oc-watchdog-tick: unexpected argument '--now': it takes none (see oc-watchdog-tick --help)\n"
    );
    assert_eq!(last(), before, "--help ran a tick");
    // the installed binaries carry no debug info (the built ones here do)
    for b in [
        "oc-sessions",
        "oc-calls",
        "progress-detect",
        "wd-alert",
        "wd-store",
    ] {
        assert!(
            has_debug_info(&bins().join(b)),
            "{b}: built without debug info"
        );
        assert!(
            !has_debug_info(&bin.join(b)),
            "{b}: installed with debug info"
        );
        let o = cmd(h, bin.join(b)).arg("--version").output().unwrap();
        assert!(o.status.success(), "{}", story(b, &o));
    }
}

const OPENCODE_CONFIG: &str = r#"{
  "$schema": "https://opencode.ai/config.json",
  "model": "sim/sim-model",
  "enabled_providers": ["sim"],
  "autoupdate": false,
  "share": "disabled",
  "provider": {
    "sim": {
      "npm": "@ai-sdk/openai-compatible",
      "name": "Sim",
      "options": { "baseURL": "http://127.0.0.1:9/v1", "apiKey": "k" },
      "models": {
        "sim-model": { "name": "Sim Model", "tool_call": true },
        "gpt-5-sim": { "name": "Other Sim", "tool_call": true }
      }
    }
  }
}
"#;

#[test]
fn uninstall_stops_the_click_helper_and_removes_block_backups_but_not_while_a_model_is_blocked() {
    let desk = Desktop::shared();
    let home = Home::new();
    let h = home.path();
    let o = install(h, &["--from", bins().to_str().unwrap()]);
    assert!(o.status.success(), "{}", story("deploy/install", &o));
    let wd = home.join(".local/bin/wd-store");
    let oc_config = home.join(".config/opencode/opencode.jsonc");
    std::fs::create_dir_all(oc_config.parent().unwrap()).unwrap();
    std::fs::write(&oc_config, OPENCODE_CONFIG).unwrap();
    let backup = home.join(".config/opencode/opencode.jsonc.oc-watchdog.bak");

    let o = cmd(h, &wd)
        .args(["block-model", "sim/gpt-5-sim"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", story("wd-store block-model", &o));
    assert!(backup.exists());
    // a model still blocked: the uninstall refuses, naming the undo, and removes nothing
    let o = install(h, &["--uninstall"]);
    assert_eq!(o.status.code(), Some(2), "{}", story("--uninstall", &o));
    let said = String::from_utf8_lossy(&o.stderr);
    assert!(
        said.contains("models are still blocked by wd-store block-model"),
        "{said}"
    );
    assert!(said.contains("sim/gpt-5-sim"), "{said}");
    assert!(said.contains("wd-store unblock-model MODEL"), "{said}");
    assert!(wd.exists() && backup.exists());

    let o = cmd(h, &wd)
        .args(["unblock-model", "sim/gpt-5-sim"])
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{}",
        story("wd-store unblock-model", &o)
    );
    // the file is what it was before the block: its backup goes with the undo
    assert!(!backup.exists(), "unblock-model left {}", backup.display());

    // a click helper waiting on a real notification daemon, as the desktop channel leaves one
    let mut helper = cmd(h, &wd)
        .arg("notify-on-action")
        .env("DBUS_SESSION_BUS_ADDRESS", &desk.bus)
        .env("DISPLAY", &desk.display)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    writeln!(
        helper.stdin.take().unwrap(),
        r#"{{"summary":"uninstall test","body":"b","urgency":"normal","url":"file:///nowhere"}}"#
    )
    .unwrap();
    let mut first = String::new();
    std::io::BufReader::new(helper.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(first.starts_with("notification "), "{first}");
    assert!(
        helper.try_wait().unwrap().is_none(),
        "the helper waits for a click"
    );

    let o = install(h, &["--uninstall"]);
    assert!(o.status.success(), "{}", story("--uninstall", &o));
    let t0 = Instant::now();
    while helper.try_wait().unwrap().is_none() {
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "the click helper still runs after --uninstall"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!backup.exists(), "--uninstall left {}", backup.display());
    for f in [
        ".local/bin/wd-store",
        ".local/bin/oc-watchdog-tick",
        ".local/share/man/man1/oc-watchdog-tick.1",
        ".local/bin/oc-watchdog-follow",
        ".local/share/man/man1/oc-watchdog-follow.1",
        ".config/systemd/user/oc-watchdog-follow.service",
        ".local/share/man/man1/wd-store.1",
    ] {
        assert!(!home.join(f).exists(), "--uninstall left {f}");
    }
}

/// The follow service as installed: its unit passes `systemd-analyze verify` (its script and
/// every man page it names are there), it runs one instance that restarts on failure, and its
/// script answers --help without starting a pipeline; `--uninstall` removes both.
#[test]
fn the_follow_service_installs_verifies_and_uninstalls() {
    let home = Home::new();
    let h = home.path();
    let o = install(h, &["--from", bins().to_str().unwrap()]);
    assert!(o.status.success(), "{}", story("deploy/install", &o));
    assert!(
        String::from_utf8_lossy(&o.stderr)
            .contains("systemctl --user enable --now oc-watchdog-follow.service oc-watchdog.timer"),
        "{}",
        story("deploy/install", &o)
    );
    let units = home.join(".config/systemd/user");
    let unit = units.join("oc-watchdog-follow.service");
    let o = cmd(h, "systemd-analyze")
        .env(
            "MANPATH",
            format!("{}:", home.join(".local/share/man").display()),
        )
        .arg("verify")
        .arg(&unit)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{}",
        story("systemd-analyze verify", &o)
    );
    assert_eq!(
        String::from_utf8_lossy(&o.stderr),
        "",
        "{}",
        story("verify", &o)
    );
    let text = std::fs::read_to_string(&unit).unwrap();
    for line in [
        "Type=simple",
        "Restart=on-failure",
        "RestartSec=10",
        "StandardError=journal",
        "ExecStart=%h/.local/bin/oc-watchdog-follow",
        "WantedBy=default.target",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} missing:\n{text}");
    }
    let follow = home.join(".local/bin/oc-watchdog-follow");
    let o = cmd(h, &follow).arg("--help").output().unwrap();
    assert!(o.status.success(), "{}", story("--help", &o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("\nUsage: oc-watchdog-follow\n"), "{out}");
    assert!(out.contains("oc-watchdog-follow(1)"), "{out}");
    let o = cmd(h, &follow).arg("--now").output().unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", story("--now", &o));
    assert_eq!(
        String::from_utf8_lossy(&o.stderr),
        "oc-watchdog-follow: unexpected argument '--now': it takes none (see oc-watchdog-follow --help)\n"
    );
    let o = install(h, &["--uninstall"]);
    assert!(o.status.success(), "{}", story("--uninstall", &o));
    assert!(!unit.exists(), "--uninstall left the follow unit");
    assert!(!follow.exists(), "--uninstall left the follow script");
}

/// `deploy/install --help` was an unknown option, `--from` without a directory a shell error
/// ("parameter not set"), and `--uninstall` with nothing installed claimed an uninstall.
#[test]
fn install_prints_usage_names_a_missing_from_dir_and_says_when_nothing_is_installed() {
    let home = Home::new();
    let h = home.path();
    let o = install(h, &["--help"]);
    assert!(o.status.success(), "{}", story("deploy/install --help", &o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.starts_with(
            "Usage: deploy/install [--from DIR] [--with-stop-plugin] | --uninstall | --purge | --help\n\nInstalls oc-watchdog"
        ),
        "{out}"
    );
    assert!(
        out.contains("  deploy/install --from DIR      install binaries already built in DIR\n")
    );
    for args in [&["--from"][..], &["--from", "--with-stop-plugin"][..]] {
        let o = install(h, args);
        assert_eq!(o.status.code(), Some(2), "{}", story("deploy/install", &o));
        assert_eq!(
            String::from_utf8_lossy(&o.stderr),
            "install: --from needs a directory: the one holding the built binaries (e.g. --from target/release)\n"
        );
    }
    for mode in ["--uninstall", "--purge"] {
        let o = install(h, &[mode]);
        assert!(o.status.success(), "{}", story(mode, &o));
        assert_eq!(
            String::from_utf8_lossy(&o.stderr),
            "install: oc-watchdog is not installed for this user: nothing to remove\n"
        );
    }
    // an unedited config and no database: no database is said to be kept
    let conf = home.join(".config/oc-watchdog/watchdog.toml");
    std::fs::create_dir_all(conf.parent().unwrap()).unwrap();
    std::fs::copy(repo().join("config/watchdog.toml"), &conf).unwrap();
    let o = install(h, &["--uninstall"]);
    assert!(o.status.success(), "{}", story("--uninstall", &o));
    assert_eq!(
        String::from_utf8_lossy(&o.stderr),
        "oc-watchdog uninstalled\n"
    );
    assert!(!conf.exists());
}

/// `--purge` left block-model's lock files (`.opencode.jsonc.oc-watchdog.lock`) in
/// ~/.config/opencode, and an uninstall printed "cannot open /proc/N/cmdline" for every
/// process that ended while it looked for click helpers.
#[test]
fn purge_removes_block_model_lock_files_and_says_nothing_of_proc() {
    let home = Home::new();
    let h = home.path();
    let o = install(h, &["--from", bins().to_str().unwrap()]);
    assert!(o.status.success(), "{}", story("deploy/install", &o));
    let oc = home.join(".config/opencode");
    std::fs::create_dir_all(&oc).unwrap();
    let config = oc.join("opencode.jsonc");
    std::fs::write(&config, "{}\n").unwrap();
    let lock = oc.join(".opencode.jsonc.oc-watchdog.lock");
    std::fs::write(&lock, "").unwrap();
    // short-lived processes while it reads /proc
    let mut churn = Command::new("sh")
        .args(["-c", "while :; do /bin/true; done"])
        .spawn()
        .unwrap();
    let o = install(h, &["--purge"]);
    let _ = churn.kill();
    let _ = churn.wait();
    assert!(
        o.status.success(),
        "{}",
        story("deploy/install --purge", &o)
    );
    assert_eq!(
        String::from_utf8_lossy(&o.stderr),
        "oc-watchdog uninstalled; its config and database removed\n"
    );
    assert!(!lock.exists());
    assert!(config.exists(), "the opencode config is the user's");
    assert!(!home.join(".local/state/oc-watchdog").exists());
}

/// An operator's journey: `deploy/install --uninstall` left an `oc-watchdog-follow` started by
/// hand running (it kept alerting after the uninstall), the directories the install had made,
/// empty, and said nothing of the state files it kept.
#[test]
fn uninstall_stops_a_follow_pipeline_started_by_hand_and_removes_the_directories_it_made() {
    let home = Home::new();
    let h = home.path();
    let o = install(h, &["--from", bins().to_str().unwrap()]);
    assert!(o.status.success(), "{}", story("deploy/install", &o));
    let mut follow = crate::support::installed_cmd(
        home.join(".local/bin/oc-watchdog-follow").to_str().unwrap(),
        h,
    )
    .current_dir(h)
    .stdin(Stdio::null())
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    let pid = follow.id();
    // its pipeline runs (oc-sessions --follow is one of its stages)
    let stage = || {
        std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
            std::fs::read(e.path().join("cmdline")).is_ok_and(|c| {
                let c = String::from_utf8_lossy(&c).replace('\0', " ");
                c.contains("oc-sessions --follow")
                    && std::fs::read_link(e.path().join("cwd")).is_ok_and(|d| d.starts_with(h))
            })
        })
    };
    let t0 = Instant::now();
    while !stage() {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "the follow pipeline did not start"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let o = install(h, &["--uninstall"]);
    assert!(o.status.success(), "{}", story("--uninstall", &o));
    let said = String::from_utf8_lossy(&o.stderr);
    assert!(
        said.contains(&format!(
            "stopped the follow pipeline started by hand (process {pid})"
        )),
        "{said}"
    );
    let t0 = Instant::now();
    while follow.try_wait().unwrap().is_none() || stage() {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "the follow pipeline still runs after --uninstall"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // what the install made is gone; what was there before stays
    for d in [
        ".local/bin",
        ".config/systemd",
        ".config/oc-watchdog",
        ".config/fish",
        ".local/share/man",
        ".local/share/bash-completion",
        ".local/share/zsh",
    ] {
        assert!(!home.join(d).exists(), "--uninstall left {d}");
    }
    for d in [".config", ".local/share", ".local/state"] {
        assert!(home.join(d).is_dir(), "--uninstall removed {d}");
    }
    // and it says what it keeps
    let state = home.join(".local/state/oc-watchdog");
    assert!(
        said.contains(&format!("kept in {}: ", state.display())) && said.contains("watchdog.db"),
        "{said}"
    );
}

/// Without a journal taking their stderr (no journald, no systemd: a container, some desktops;
/// cron; run by hand) the tick's and the follow pipeline's log went nowhere anyone looks (issue
/// 40). Each now copies it, line by line with its time, to tick.log and follow.log in the state
/// directory, and the install says where the log is.
#[test]
fn without_a_journal_the_log_is_in_the_state_directory_and_the_install_says_where() {
    use std::os::unix::process::CommandExt;
    let home = Home::new();
    let h = home.path();
    let o = install(h, &["--from", bins().to_str().unwrap()]);
    assert!(o.status.success(), "{}", story("deploy/install", &o));
    let state = home.join(".local/state/oc-watchdog");
    let said = String::from_utf8_lossy(&o.stderr);
    assert!(
        said.contains(&format!(
            "\nTheir log: journalctl --user -u oc-watchdog-follow -u oc-watchdog; where no journal takes it (no journald, no systemd, cron, run by hand), {}/follow.log and tick.log\n",
            state.display()
        )),
        "{said}"
    );
    // no user manager answers in the test's clean environment: the install says what to do
    assert!(
        said.contains(&format!(
            "start the follow pipeline with your session instead (nohup '{}' >/dev/null 2>&1 &)",
            home.join(".local/bin/oc-watchdog-follow").display()
        )),
        "{said}"
    );
    // a config typo: the tick says why on stderr, and in tick.log with its time
    let conf = home.join(".config/oc-watchdog/watchdog.toml");
    std::fs::write(&conf, "[detector]\nwindw = 60\n").unwrap();
    let tick = home.join(".local/bin/oc-watchdog-tick");
    let o = cmd(h, &tick).output().unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", story("tick", &o));
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    let why = format!(
        "config {}:2: detector.windw: unknown field `windw`",
        conf.display()
    );
    assert!(err.contains(&why), "{}", story("tick", &o));
    let log = std::fs::read_to_string(state.join("tick.log")).unwrap();
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines.len(), err.lines().count(), "{log}\n{err}");
    let line = lines
        .iter()
        .find(|l| l.contains(&why))
        .unwrap_or_else(|| panic!("{log}"));
    // "2026-12-05T00:24:03+0000 wd-store: config ...": the time, then the line as said
    let (time, said) = line.split_once(' ').unwrap();
    assert_eq!(time.len(), 24, "{line}");
    assert!(
        time.as_bytes()[10] == b'T' && time[..4].parse::<u32>().is_ok(),
        "{line}"
    );
    assert!(err.lines().any(|l| l == said), "{line}\n{err}");
    // under systemd with journald (JOURNAL_STREAM set), the journal has it: no copy
    let o = cmd(h, &tick)
        .env("JOURNAL_STREAM", "8:12345")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", story("tick", &o));
    assert_eq!(
        std::fs::read_to_string(state.join("tick.log")).unwrap(),
        log
    );
    // past 1 MiB the log starts again, the older one kept as tick.log.1
    std::fs::write(state.join("tick.log"), "x".repeat(1_100_000)).unwrap();
    let o = cmd(h, &tick).output().unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", story("tick", &o));
    assert_eq!(
        std::fs::metadata(state.join("tick.log.1")).unwrap().len(),
        1_100_000
    );
    assert_eq!(
        std::fs::read_to_string(state.join("tick.log"))
            .unwrap()
            .lines()
            .count(),
        err.lines().count()
    );
    // the follow pipeline, started by hand in the background, logs to follow.log
    let mut follow = cmd(h, home.join(".local/bin/oc-watchdog-follow"))
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    let waiting = "oc-watchdog-follow: the watchdog is not watching (the line above says why)";
    let seen = loop {
        let l = std::fs::read_to_string(state.join("follow.log")).unwrap_or_default();
        if l.contains(waiting) || t0.elapsed() > Duration::from_secs(60) {
            break l;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let _ = Command::new("kill")
        .args(["-TERM", "--", &format!("-{}", follow.id())])
        .status();
    let _ = follow.wait();
    assert!(seen.contains(&why) && seen.contains(waiting), "{seen}");
}
