//! progress-detect: the backtest over the labelled fixture of real sessions, verdict shape,
//! bad input, pass-through, and the real pipeline from a live opencode.

use crate::support::ocsim::Sim;
use crate::support::{repo, Home};
use serde_json::Value;

fn fixture() -> String {
    repo().join("fixtures/labelled.jsonl").display().to_string()
}

fn verdict_titled<'a>(vs: &'a [Value], title: &str) -> &'a Value {
    vs.iter()
        .find(|v| v["title"] == title)
        .unwrap_or_else(|| panic!("no verdict titled {title:?}"))
}

#[test]
fn backtest_every_label_holds() {
    let home = Home::new();
    let r = home
        .cmd("progress-detect")
        .args(["--check", &fixture()])
        .run();
    r.ok();
    let out = r.stdout();
    // per session: where its loop started and where it was first flagged
    assert!(
        out.contains("ok   ses_dcf2addb3ffeWOz81LrTeUCnRB \"navbar worker: exports\": expect flag got flag: loop from call 42, first flag at call 50 (call 9 of the loop)\n"),
        "{out}"
    );
    assert!(
        out.contains("ok   ses_dcf27e1f5ffeiON4Bn8DHLl71L \"calc, test first\": expect no_flag got no_flag\n"),
        "{out}"
    );
    assert!(
        out.ends_with(
            "first flag over 23 loops: median call 6 of the loop (from 1 to 21)\nbacktest: 35/35 labels hold\n"
        ),
        "{out}"
    );
}

#[test]
fn backtest_fails_with_exit_1_naming_the_broken_label() {
    let home = Home::new();
    let text = std::fs::read_to_string(fixture()).unwrap();
    // claim the healthy item 5 worker must flag
    let broken: String = text
        .lines()
        .map(|l| {
            if l.contains("\"title\":\"item 5 worker\"") {
                l.replace("\"expect\":\"no_flag\"", "\"expect\":\"flag\"")
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    let r = home
        .cmd("progress-detect")
        .args(["--check"])
        .stdin(broken)
        .run();
    r.expect_code(1);
    let out = r.stdout();
    assert!(
        out.contains("\"item 5 worker\": expect flag got no_flag"),
        "{out}"
    );
    assert!(out.ends_with("backtest: 34/35 labels hold\n"), "{out}");
}

#[test]
fn verdicts_name_signals_targets_and_the_first_flag_point() {
    let home = Home::new();
    let r = home.cmd("progress-detect").args([&fixture()]).run();
    r.ok();
    let vs = r.kind("verdict");
    let nav = verdict_titled(&vs, "item 2 worker: fix the navbar");
    assert_eq!(nav["flagged"], true);
    assert_eq!(nav["agent"], "build");
    assert_eq!(nav["calls"], 70);
    assert_eq!(nav["signals"]["top_target"], "read src/navbar.js");
    assert_eq!(nav["signals"]["slow_call"], "read src/navbar.js");
    assert_eq!(nav["landed_in_window"], false);
    assert_eq!(nav["calls_since_landed"], 70);
    assert_eq!(nav["first_flag"]["index"], 7);
    assert_eq!(nav["evidence"]["loop_start"]["index"], 1);
    assert_eq!(nav["evidence"]["last_landed"], Value::Null);
    assert_eq!(nav["evidence"]["calls"].as_array().unwrap().len(), 12);
    assert_eq!(nav["digest"].as_array().unwrap().len(), 12);
    assert_eq!(nav["root"], nav["session"]);
    assert_eq!(nav["model"], "sim/sim-model");
    assert_eq!(nav["ok"], true);
    assert!(nav["cost_since_landed"].as_f64().unwrap() > 0.0);
    // a subagent names its parent as root, and read-only agents are marked
    let deleted = vs
        .iter()
        .find(|v| v["agent"] == "explore" && v["flagged"] == true)
        .unwrap();
    assert_eq!(deleted["read_only"], true);
    assert_ne!(deleted["root"], deleted["session"]);
    // reads of the deleted file and globs for it tie at 12; the latest wins the tie
    assert_eq!(deleted["signals"]["top"], 12);
    assert_eq!(deleted["signals"]["top_target"], "glob docs/*old*");
    assert_eq!(deleted["signals"]["slow_call"], "read docs/old_api.md");
    // the planner is caught by coverage and circling, through shifting offsets
    let planner = verdict_titled(&vs, "planner: navbar spec");
    assert_eq!(
        planner["reasons"],
        serde_json::json!(["coverage", "circling"])
    );
    assert_eq!(planner["first_flag"]["index"], 12);
    assert_eq!(planner["signals"]["coverage_file"], "docs/spec.md");
    assert_eq!(planner["signals"]["top"], 1);
    // Atlas works well for 63 calls and must not flag before its loop
    let atlas = verdict_titled(&vs, "Atlas: navbar returns");
    assert!(
        atlas["first_flag"]["index"].as_u64().unwrap() > 63,
        "{atlas}"
    );
    // edits that undo each other are not progress
    let flip = verdict_titled(&vs, "header comment worker");
    assert_eq!(flip["flagged"], true);
    assert_eq!(flip["landed_in_window"], false);
    // a loop after a dozen landed edits and a commit: judged from the commit on
    let work = verdict_titled(&vs, "navbar worker: exports");
    assert_eq!(work["reasons"], serde_json::json!(["dup", "cycle"]));
    assert_eq!(work["signals"]["cycle"], 4);
    assert_eq!(work["evidence"]["last_landed"]["index"], 41);
    assert_eq!(work["evidence"]["loop_start"]["index"], 42);
    assert_eq!(work["first_flag"]["index"], 50);
    // edits land, each checked at once, the check fails the same way: the 3rd failure flags
    // (call 7; same_failure_checked_min)
    let same = verdict_titled(&vs, "check.py comment fixer");
    assert_eq!(same["reasons"], serde_json::json!(["same_failure"]));
    assert_eq!(
        same["signals"]["same_failure_call"],
        "bash python3 tools/check.py"
    );
    assert_eq!(same["first_flag"]["index"], 7);
    assert_eq!(same["landed_in_window"], true);
    // its counter-case: the check's output changes every round and ends passing
    let tdd = verdict_titled(&vs, "calc, test first");
    assert_eq!(tdd["first_flag"], Value::Null);
    let run = verdict_titled(&vs, "readme reader");
    assert_eq!(run["reasons"], serde_json::json!(["run"]));
    assert_eq!(run["first_flag"]["index"], 5);
    let circling = verdict_titled(&vs, "guide reader");
    assert_eq!(circling["reasons"], serde_json::json!(["circling"]));
    assert_eq!(circling["signals"]["circling"], 3.0);
    assert_eq!(circling["signals"]["circling_file"], "docs/guide.md");
    assert_eq!(circling["first_flag"]["index"], 21);
}

#[test]
fn each_call_sent_twice_gives_the_same_verdicts() {
    let home = Home::new();
    let now = "1796200000000";
    let once = home
        .cmd("progress-detect")
        .args(["--now", now, &fixture()])
        .run();
    once.ok();
    let text = std::fs::read_to_string(fixture()).unwrap();
    let calls = text
        .lines()
        .filter(|l| l.contains("\"kind\":\"call\""))
        .count();
    let doubled: String = text
        .lines()
        .flat_map(|l| {
            let n = if l.contains("\"kind\":\"call\"") {
                2
            } else {
                1
            };
            std::iter::repeat(format!("{l}\n")).take(n)
        })
        .collect();
    let twice = home
        .cmd("progress-detect")
        .args(["--now", now])
        .stdin(doubled)
        .run();
    twice.ok();
    assert!(once.kind("verdict") == twice.kind("verdict"));
    assert!(
        twice.stderr().contains(&format!(
            "progress-detect: {calls} call(s) seen before (same session and id) were skipped"
        )),
        "{}",
        twice.stderr()
    );
}

#[test]
fn ids_ses_a_1_and_ses_a_18_are_two_calls() {
    let home = Home::new();
    let input = r#"{"kind":"session","id":"ses_a","parent":null,"agent":"build","title":"x","created":1,"updated":2}
{"kind":"call","session":"ses_a","id":"ses_a_1","t":1000,"tool":"read","args":{"filePath":"/a"},"status":"completed","exit":null,"landed":false,"file_lines":10,"out":null}
{"kind":"call","session":"ses_a","id":"ses_a_18","t":2000,"tool":"read","args":{"filePath":"/b"},"status":"completed","exit":null,"landed":false,"file_lines":10,"out":null}
"#;
    let r = home.cmd("progress-detect").stdin(input).run();
    r.ok();
    let v = r.kind("verdict");
    assert_eq!(v.len(), 1);
    assert_eq!(v[0]["calls"], 2);
    assert_eq!(r.stderr(), "");
}

#[test]
fn check_says_a_session_flagged_then_cleared() {
    let home = Home::new();
    // the 5th identical read in a row flags (the run), then a landed write clears it
    let mut input = String::from(
        r#"{"kind":"session","id":"s","parent":null,"agent":"build","title":"cleared","created":1,"updated":2,"expect":"no_flag"}"#,
    );
    input.push('\n');
    for i in 1..=6 {
        input += &format!(
            r#"{{"kind":"call","session":"s","id":"p{i}","t":{i}000,"tool":"read","args":{{"filePath":"/a"}},"status":"completed","landed":false,"file_lines":10}}"#
        );
        input.push('\n');
    }
    input += r#"{"kind":"call","session":"s","id":"p7","t":7000,"tool":"write","args":{"filePath":"/b","content":"sha1:1"},"status":"completed","landed":true}"#;
    input.push('\n');
    let r = home
        .cmd("progress-detect")
        .args(["--check"])
        .stdin(input)
        .run();
    r.expect_code(1);
    assert_eq!(
        r.stdout(),
        "FAIL s \"cleared\": expect no_flag got flag, then cleared: loop from call 1, first flag at call 5 (call 5 of the loop)\nbacktest: 0/1 labels hold\n"
    );
}

#[test]
fn bad_lines_are_named_skipped_and_the_rest_judged() {
    let home = Home::new();
    let input = concat!(
        r#"{"kind":"session","id":"ses_a","agent":"build"}"#,
        "\n",
        r#"{"kind":"call","session":"ses_a","id":"p1","t":1,"tool":"read","args":{"filePath":"/x"}}"#,
        "\n",
        "{not json\n",
        r#"{"kind":"call","id":"p2","t":2,"tool":"read","args":{}}"#,
        "\n",
        r#"{"kind":"source","source":"http://127.0.0.1:4096","sessions":1}"#,
        "\n",
        r#"{"kind":"call","session":"ses_b","id":"p3","t":3,"tool":"bash","args":{"command":"ls"}}"#,
        "\n",
    );
    let r = home.cmd("progress-detect").stdin(input).run();
    r.expect_code(2);
    let err = r.stderr();
    assert!(
        err.contains("progress-detect: stdin:3: key must be a string at line 1 column 2"),
        "{err}"
    );
    assert!(
        err.contains("progress-detect: stdin:4: call without \"session\""),
        "{err}"
    );
    let recs = r.records();
    assert_eq!(
        recs[0]["kind"], "source",
        "unknown kinds pass through first"
    );
    let vs = r.kind("verdict");
    assert_eq!(vs.len(), 2);
    assert_eq!(vs[0]["session"], "ses_a");
    assert_eq!(vs[0]["calls"], 1);
    // a call with no session record is judged with defaults
    assert_eq!(vs[1]["session"], "ses_b");
    assert_eq!(vs[1]["agent"], Value::Null);
    assert_eq!(vs[1]["root"], "ses_b");
}

#[test]
fn every_emits_each_flag_transition_as_it_happens() {
    let home = Home::new();
    let mut input = String::from("{\"kind\":\"session\",\"id\":\"s\",\"agent\":\"build\"}\n");
    for i in 0..10 {
        input += &format!(
            "{{\"kind\":\"call\",\"session\":\"s\",\"id\":\"p{i}\",\"t\":{i},\"tool\":\"bash\",\"args\":{{\"command\":\"make test\"}}}}\n"
        );
    }
    input += "{\"kind\":\"call\",\"session\":\"s\",\"id\":\"w\",\"t\":99,\"tool\":\"write\",\"args\":{\"filePath\":\"/a\"},\"landed\":true}\n";
    let r = home
        .cmd("progress-detect")
        .args(["--every"])
        .stdin(input)
        .run();
    r.ok();
    let vs = r.kind("verdict");
    let flags: Vec<bool> = vs.iter().map(|v| v["flagged"].as_bool().unwrap()).collect();
    // flagged at the 5th repeat in a row, cleared by the landing write, then the final verdict
    assert_eq!(flags, [true, false, false]);
    assert_eq!(vs[0]["first_flag"]["index"], 5);
    assert_eq!(vs[0]["reasons"], serde_json::json!(["run"]));
    assert_eq!(vs[0]["calls"], 5);
    assert_eq!(vs[1]["calls"], 11);
}

#[test]
fn a_live_stream_gets_its_flag_when_the_call_arrives_not_at_the_end_of_a_batch() {
    // progress-detect parses lines a batch at a time; `--line-buffered` (a live pipe) must
    // still judge each line as it comes. stdin stays open while the verdict is awaited.
    use std::io::{BufRead, Write};
    let home = Home::new();
    let mut child = home
        .cmd("progress-detect")
        .args(["--every", "--line-buffered"])
        .spawn();
    let mut sin = child.stdin.take().unwrap();
    writeln!(sin, r#"{{"kind":"session","id":"s","agent":"build"}}"#).unwrap();
    for i in 0..5 {
        writeln!(
            sin,
            r#"{{"kind":"call","session":"s","id":"p{i}","t":{i},"tool":"bash","args":{{"command":"make test"}}}}"#
        )
        .unwrap();
    }
    sin.flush().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = std::io::BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    let got = rx.recv_timeout(std::time::Duration::from_secs(20));
    drop(sin);
    let _ = child.wait();
    let line = got.expect("no verdict while the stream was open");
    let v: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(v["kind"], "verdict");
    assert_eq!(v["flagged"], true);
    assert_eq!(v["first_flag"]["index"], 5);
    assert_eq!(v["calls"], 5);
}

#[test]
fn errors_name_the_file_and_line_across_batches_and_files_in_line_order() {
    // more lines than one batch (256) in the first file, with a line that is not JSON and one
    // that is not UTF-8 (the reading thread finds the one, the judging thread the other); the
    // second file's error in its own name
    let home = Home::new();
    let mut a = b"{\"kind\":\"session\",\"id\":\"s\",\"agent\":\"build\"}\n".to_vec();
    for i in 1..=300 {
        match i {
            270 => a.extend_from_slice(b"{not json\n"),
            280 => a.extend_from_slice(b"{\"kind\":\"call\",\"tool\":\"\xff\"}\n"),
            _ => a.extend_from_slice(format!(
                "{{\"kind\":\"call\",\"session\":\"s\",\"id\":\"p{i}\",\"t\":{i},\"tool\":\"read\",\"args\":{{\"filePath\":\"/f{i}\"}}}}\n"
            ).as_bytes()),
        }
    }
    let b = "{\"kind\":\"call\",\"session\":\"s\",\"id\":\"q1\",\"t\":400,\"tool\":\"read\",\"args\":{\"filePath\":\"/g\"}}\n{\"kind\":\"call\",\"id\":\"q2\",\"t\":401,\"tool\":\"read\",\"args\":{}}\n";
    std::fs::write(home.join("a.jsonl"), a).unwrap();
    std::fs::write(home.join("b.jsonl"), b).unwrap();
    let (fa, fb) = (
        home.join("a.jsonl").display().to_string(),
        home.join("b.jsonl").display().to_string(),
    );
    let r = home.cmd("progress-detect").args([&fa, &fb]).run();
    r.expect_code(2);
    let err = r.stderr();
    assert_eq!(
        err.lines().collect::<Vec<_>>(),
        [
            format!("progress-detect: {fa}:271: key must be a string at line 1 column 2"),
            format!(
                "progress-detect: {fa}:281: not UTF-8 (invalid byte at column 24); line skipped"
            ),
            format!("progress-detect: {fb}:2: call without \"session\""),
        ],
        "{err}"
    );
    let vs = r.kind("verdict");
    assert_eq!(vs.len(), 1);
    // 298 good calls of the first file and 1 of the second
    assert_eq!(vs[0]["calls"], 299);
}

#[test]
fn thresholds_come_from_flags_and_the_config_file() {
    let home = Home::new();
    let r = home
        .cmd("progress-detect")
        .args(["--top-min", "100", "--short-top-min-is-not-a-flag"])
        .run();
    r.expect_code(2);
    // a threshold of 0 would flag every session: refused like the config's
    let refused_run_min_0 = |how: &[&str]| {
        let r = home
            .cmd("progress-detect")
            .args(how.iter().copied().chain([fixture().as_str()]))
            .run();
        r.expect_code(2);
        assert!(
            r.stderr().contains(
                "progress-detect: detector.run_min: 0 is below 1, the least it can be (from the flag or the config)"
            ),
            "{}",
            r.stderr()
        );
    };
    refused_run_min_0(&["--run-min", "0"]);
    let cfg = home.join("wd.toml");
    std::fs::write(&cfg, "[detector]\nread_only_agents = [\"general\"]\n").unwrap();
    let r = home
        .cmd("progress-detect")
        .args(["--config", cfg.to_str().unwrap(), &fixture()])
        .run();
    r.ok();
    let printer = r
        .kind("verdict")
        .into_iter()
        .find(|v| v["agent"] == "general" && v["signals"]["top_target"] == "bash cat docs/spec.md")
        .unwrap();
    assert_eq!(printer["read_only"], true);
    let r = home
        .cmd("progress-detect")
        .args(["--check", "--run-min", "100", &fixture()])
        .run();
    r.expect_code(1);
    assert!(
        r.stdout()
            .contains("\"readme reader\": expect flag got no_flag"),
        "{}",
        r.stdout()
    );
    // --set takes any threshold by its config key: the same backtest, the same verdicts
    let named = r.stdout();
    let r = home
        .cmd("progress-detect")
        .args(["--check", "--set", "run_min=100", &fixture()])
        .run();
    r.expect_code(1);
    assert_eq!(r.stdout(), named);
    // and is checked like the flag and the config
    refused_run_min_0(&["--set", "run_min=0"]);
    let r = home
        .cmd("progress-detect")
        .args(["--set", "run_mni=3", &fixture()])
        .run();
    r.expect_code(2);
    assert!(
        r.stderr().contains(
            "progress-detect: --set run_mni=3: \"run_mni\" is not a detector threshold (one of window, min_calls, dup_min,"
        ),
        "{}",
        r.stderr()
    );
}

#[test]
fn the_real_pipeline_flags_a_real_short_loop() {
    let sim = Sim::shared();
    let ran = sim.run("reread");
    let home = Home::new();
    let calls = home
        .cmd("oc-calls")
        .args(["--server", &sim.url, &ran.id])
        .run();
    calls.ok();
    let r = home.cmd("progress-detect").stdin(calls.stdout()).run();
    r.ok();
    let v = &r.kind("verdict")[0];
    assert_eq!(v["session"], ran.id.as_str());
    assert_eq!(v["flagged"], true);
    assert_eq!(v["reasons"], serde_json::json!(["short_loop", "run"]));
    assert_eq!(v["calls"], 8);
    assert_eq!(v["first_flag"]["index"], 5);
    assert_eq!(v["evidence"]["loop_start"]["index"], 1);
    assert_eq!(v["signals"]["top_target"], "read docs/spec.md");
    assert_eq!(v["signals"]["coverage"], 8.0);
}

#[test]
fn table_format_is_for_people() {
    let home = Home::new();
    let r = home
        .cmd("progress-detect")
        .args(["--check", "--format", "table", &fixture()])
        .run();
    r.ok();
    let out = r.stdout();
    assert!(out.starts_with("session "), "{out}");
    assert!(out.contains(" FLAG "), "{out}");
    assert!(out.contains("no_flag ok"), "{out}");
}

#[test]
fn the_verdicts_table_fits_80_and_120_columns_instead_of_207() {
    // issue 40: `progress-detect --format table` was up to 207 columns on the fixture,
    // whatever the terminal: 13 columns, the reasons and the top target whole
    let home = Home::new();
    let table = |columns: &str| {
        let r = home
            .cmd("progress-detect")
            .env("COLUMNS", columns)
            .args(["--format", "table", &fixture()])
            .run();
        r.ok();
        r.stdout()
    };
    let widest = |t: &str| t.lines().map(|l| l.chars().count()).max().unwrap();
    let row = |t: &str, session: &str| -> String {
        t.lines()
            .find(|l| l.starts_with(session))
            .unwrap_or_else(|| panic!("{t}"))
            .to_string()
    };
    let at80 = table("80");
    assert_eq!(widest(&at80), 80, "{at80}");
    assert_eq!(at80.lines().count(), 45, "{at80}");
    // the figures and the reasons go; the session, its calls, flag and label and the target stay
    assert_eq!(
        at80.lines().next().unwrap(),
        "session                         calls  flag  label       top target"
    );
    assert_eq!(
        row(&at80, "ses_dcf3493daffeR7MnIh19wwG7mo"),
        "ses_dcf3493daffeR7MnIh19wwG7mo  45     FLAG  flag ok     bash python3 -c 'impor…"
    );
    let at120 = table("120");
    assert_eq!(widest(&at120), 120, "{at120}");
    assert_eq!(
        at120.lines().next().unwrap(),
        "session                         agent    calls  flag  reasons     top  loop  first  label       top target"
    );
    assert_eq!(
        row(&at120, "ses_dcf35e24fffe1bGS6SIumamAlj"),
        "ses_dcf35e24fffe1bGS6SIumamAlj  build    70     FLAG  dup,top,s…  34   1     7      flag ok     read src/navbar.js"
    );
    // the JSONL is untouched: the reasons whole
    let r = home
        .cmd("progress-detect")
        .env("COLUMNS", "80")
        .args([&fixture()])
        .run();
    let v = verdict_titled(&r.records(), "item 2 worker: fix the navbar").clone();
    assert_eq!(v["reasons"].as_array().unwrap().len(), 5, "{v}");
}

#[test]
fn check_and_flag_rate_max_honour_format_csv() {
    let home = Home::new();
    let r = home
        .cmd("progress-detect")
        .args(["--check", "--format", "csv", &fixture()])
        .run();
    r.ok();
    let out = r.stdout();
    let mut rows = csv::Reader::from_reader(out.as_bytes());
    assert_eq!(
        rows.headers().unwrap(),
        vec!["session", "title", "expect", "got", "held", "loop", "first", "of_loop"]
    );
    let rows: Vec<csv::StringRecord> = rows.records().map(Result::unwrap).collect();
    assert_eq!(rows.len(), 35);
    assert_eq!(
        &rows[1],
        vec![
            "ses_dcf3493daffeR7MnIh19wwG7mo",
            "item 2 worker, 1st attempt",
            "flag",
            "flag",
            "ok",
            "1",
            "6",
            "6"
        ]
    );
    assert!(
        r.stderr().ends_with("backtest: 35/35 labels hold\n"),
        "{}",
        r.stderr()
    );
    // the flagged run of a fixture as a "productive" corpus: one row per flagged session
    let r = home
        .cmd("progress-detect")
        .args(["--flag-rate-max", "100", "--format", "csv", &fixture()])
        .run();
    r.ok();
    let out = r.stdout();
    assert!(
        out.starts_with("session,title,reasons,loop,first,calls\n"),
        "{out}"
    );
    assert!(
        out.contains("\nses_dcf3493daffeR7MnIh19wwG7mo,\"item 2 worker, 1st attempt\","),
        "{out}"
    );
    assert!(
        r.stderr().starts_with("productive runs: "),
        "{}",
        r.stderr()
    );
}

#[test]
fn follow_writes_a_sweeps_verdicts_and_the_sweep_with_the_stream_open_and_names_a_bad_line() {
    // the five runs of a failing test flag at the sweep after them, not at the end of input; a
    // call without an id (line 7) is named and costs nothing else
    use std::io::{BufRead, Write};
    let home = Home::new();
    let mut child = home.cmd("progress-detect").args(["--follow"]).spawn();
    let mut sin = child.stdin.take().unwrap();
    writeln!(sin, r#"{{"kind":"session","id":"s","agent":"build"}}"#).unwrap();
    for i in 0..5 {
        writeln!(
            sin,
            r#"{{"kind":"call","session":"s","id":"p{i}","t":{i},"tool":"bash","args":{{"command":"make test"}},"status":"completed","exit":2}}"#
        )
        .unwrap();
    }
    writeln!(
        sin,
        r#"{{"kind":"call","session":"s","t":9,"tool":"bash"}}"#
    )
    .unwrap();
    writeln!(sin, r#"{{"kind":"sweep","n":1,"t":10000,"full":false}}"#).unwrap();
    sin.flush().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let _ = tx.send(line.unwrap());
        }
    });
    let mut got = Vec::new();
    while got.len() < 3 {
        let l = rx
            .recv_timeout(std::time::Duration::from_secs(20))
            .expect("the sweep's lines did not come while the stream was open");
        got.push(serde_json::from_str::<Value>(&l).unwrap());
    }
    drop(sin);
    let status = child.wait().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    let kinds: Vec<&str> = got.iter().map(|v| v["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["blind", "verdict", "sweep"]);
    assert_eq!(
        (
            &got[1]["flagged"],
            &got[1]["calls"],
            &got[1]["first_flag"]["index"]
        ),
        (&Value::from(true), &Value::from(5), &Value::from(5))
    );
    assert_eq!(err, "progress-detect: stdin:7: call without \"id\"\n");
    assert!(status.success());
}
