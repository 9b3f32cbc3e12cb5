//! The integration tests: every command as a process, against real opencode, real SQLite files
//! and a real D-Bus notification daemon where they can run here.

#[path = "../support/mod.rs"]
mod support;

mod agents;
mod alert;
mod block;
mod claude_stop;
mod detect;
mod fixtures;
mod fleet;
mod follow;
mod follow_faults;
mod follow_sources;
mod hardening;
mod liveness;
mod man;
mod owners;
mod popups;
mod privacy;
mod proof;
mod races;
mod readers;
mod report;
mod sources;
mod stop;
mod stop_codex;
mod store;
mod tick;

/// The committed man pages and completions are what the clap definitions produce.
#[test]
fn man_pages_and_completions_are_up_to_date() {
    let dir = tempfile::tempdir().unwrap();
    let st = std::process::Command::new(env!("CARGO"))
        .args(["run", "-q", "--example", "gen-docs", "--"])
        .arg(dir.path())
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .status()
        .unwrap();
    assert!(st.success());
    for e in std::fs::read_dir(support::repo().join("man")).unwrap() {
        let p = e.unwrap().path();
        if p.is_file() {
            let name = p.file_name().unwrap();
            assert_eq!(
                std::fs::read_to_string(&p).unwrap(),
                std::fs::read_to_string(dir.path().join(name)).unwrap(),
                "{} is stale: run cargo run --example gen-docs",
                p.display()
            );
        }
    }
}

/// The backtest the README and progress-detect(1) show is the real one's last line: they said
/// `backtest: 18/18 labels hold` long after the fixtures held 35 labels.
#[test]
fn the_readme_and_man_page_backtest_is_the_real_output() {
    let shown = "$ progress-detect --check fixtures/labelled.jsonl | tail -1\n";
    let home = support::Home::new();
    let fixtures = support::repo().join("fixtures/labelled.jsonl");
    let r = home
        .cmd("progress-detect")
        .args(["--check", fixtures.to_str().unwrap()])
        .run();
    r.ok();
    let out = r.stdout();
    let last = out.lines().last().unwrap();
    let readme = std::fs::read_to_string(support::repo().join("README.md")).unwrap();
    let man = std::fs::read_to_string(support::repo().join("man/progress-detect.1")).unwrap();
    for (doc, text, line) in [
        ("README.md", readme, last.to_string()),
        // roff writes a - as \-
        ("man/progress-detect.1", man, last.replace('-', "\\-")),
    ] {
        let at = text
            .find(&if doc == "README.md" {
                shown.to_string()
            } else {
                shown.replace('-', "\\-")
            })
            .unwrap_or_else(|| panic!("{doc} no longer shows {shown}"));
        let next = text[at..].lines().nth(1).unwrap();
        assert_eq!(next, line, "{doc}");
    }
}

/// The `wd-store loops` tables the README and wd-store(1) show are the real output, at 100
/// columns (a pipe's) and at COLUMNS=80, of the fixture's failing-check loop ticked alone at
/// 2026-12-01 09:00 UTC: they showed the 19 columns that now need --wide (issue 40).
#[test]
fn the_readme_and_man_page_loops_tables_are_the_real_output() {
    let home = support::Home::new();
    let db = home.join("w.db").display().to_string();
    let now = "1796115600000";
    let session = "ses_dcf2b97b7ffeI31AERUGiKZ1bf";
    let fixture = std::fs::read_to_string(support::repo().join("fixtures/labelled.jsonl")).unwrap();
    let lines: String = fixture
        .lines()
        .filter(|l| l.contains(session))
        .map(|l| format!("{l}\n"))
        .collect();
    let verdicts = home
        .cmd("progress-detect")
        .args(["--now", now])
        .stdin(lines)
        .run();
    verdicts.ok();
    let ticked = home
        .cmd("wd-store")
        .args(["--db", &db, "--now", now, "tick"])
        .stdin(verdicts.stdout())
        .run();
    ticked.ok();
    home.cmd("wd-alert")
        .args(["--db", &db, "--now", now])
        .stdin(ticked.stdout())
        .run()
        .ok();
    let mut shown = String::new();
    for (command, columns) in [
        ("$ wd-store loops --format table", None),
        ("$ COLUMNS=80 wd-store loops --format table", Some("80")),
    ] {
        let mut c = home
            .cmd("wd-store")
            .env("TZ", "UTC")
            .args(["--db", &db, "--now", now, "loops", "--format", "table"]);
        if let Some(w) = columns {
            c = c.env("COLUMNS", w);
        }
        let r = c.run();
        r.ok();
        shown += &format!("{command}\n{}", r.stdout());
    }
    assert!(
        shown.contains("\nwarning  ses_dcf2b97b7ffeI31AERUGiKZ1bf  "),
        "{shown}"
    );
    let readme = std::fs::read_to_string(support::repo().join("README.md")).unwrap();
    assert!(
        readme.contains(&shown),
        "README.md does not show the real output:\n{shown}"
    );
    let page = oc_watchdog::docs::PAGES
        .iter()
        .find(|p| p.name == "wd-store")
        .unwrap();
    assert!(
        page.examples.contains(&shown),
        "wd-store(1) does not show the real output:\n{shown}"
    );
}

/// The verdicts tables progress-detect(1) shows are the real output of two of the fixture's
/// sessions, at 100 columns (a pipe's) and at COLUMNS=150: it showed a table of an older
/// layout (no loop column, a top target for unflagged sessions) from a run nobody can rerun.
#[test]
fn the_man_page_verdicts_tables_are_the_real_output() {
    let home = support::Home::new();
    let fixture = std::fs::read_to_string(support::repo().join("fixtures/labelled.jsonl")).unwrap();
    let lines: String = fixture
        .lines()
        .filter(|l| {
            l.contains("ses_dcf2b97b7ffeI31AERUGiKZ1bf")
                || l.contains("ses_dcf2ea35effevcMFGQUxL5QRtk")
        })
        .map(|l| format!("{l}\n"))
        .collect();
    let grep = "$ grep -h -e ses_dcf2b97b7ffeI31AERUGiKZ1bf -e ses_dcf2ea35effevcMFGQUxL5QRtk fixtures/labelled.jsonl | ";
    let mut shown = String::new();
    for (command, columns) in [
        ("progress-detect --format table", None),
        ("COLUMNS=150 progress-detect --format table", Some("150")),
    ] {
        let mut c = home
            .cmd("progress-detect")
            .args(["--format", "table"])
            .stdin(lines.clone());
        if let Some(w) = columns {
            c = c.env("COLUMNS", w);
        }
        let r = c.run();
        r.ok();
        shown += &format!("{grep}{command}\n{}", r.stdout());
    }
    assert!(
        shown.contains("  flag ok     bash python3 tools/check.py\n"),
        "{shown}"
    );
    let page = oc_watchdog::docs::PAGES
        .iter()
        .find(|p| p.name == "progress-detect")
        .unwrap();
    assert!(
        page.examples.contains(&shown),
        "progress-detect(1) does not show the real output:\n{shown}"
    );
}

/// What bash offers for `words`, from the committed completion script.
fn bash_completes(words: &[&str]) -> Vec<String> {
    let script = support::repo().join("man/completions/wd-store.bash");
    let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
    let prog = format!(
        "source '{}'; COMP_WORDS=({}); COMP_CWORD={}; _wd__store wd-store '{}' '{}'; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
        script.display(),
        quoted.join(" "),
        words.len() - 1,
        words[words.len() - 1],
        words[words.len() - 2],
    );
    let o = std::process::Command::new("bash")
        .args(["--norc", "-c", &prog])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter(|l| !l.is_empty())
        .map(String::from)
        .collect()
}

/// bash offered nothing after a wd-store subcommand (clap_complete 4.6 names the arms of a
/// hyphenated binary's subcommands one way and walks to them another), and offered the hidden
/// `notify-on-action`.
#[test]
fn bash_completes_a_wd_store_subcommands_options_and_not_the_hidden_one() {
    assert_eq!(
        bash_completes(&["wd-store", "loops", "--"]),
        ["--recent", "--wide", "--db", "--config", "--format", "--now", "--help"]
    );
    assert_eq!(
        bash_completes(&["wd-store", "channels", "set", "desktop", "--"]),
        [
            "--enabled",
            "--min-severity",
            "--db",
            "--config",
            "--format",
            "--now",
            "--help"
        ]
    );
    assert_eq!(bash_completes(&["wd-store", "no"]), Vec::<String>::new());
    assert!(bash_completes(&["wd-store", ""]).contains(&"loops".to_string()));
}
