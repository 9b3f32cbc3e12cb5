//! The labelled fixture: real opencode sessions re-creating the shapes of the original incident,
//! exported with `oc-calls` and labelled. `fixtures/regenerate` runs the ignored test below; the
//! backtest tests replay the committed file. `fixtures/regenerate SCRIPT...` runs only the named
//! scenarios in a fresh project and appends their sessions to the file instead.

use crate::support::ocsim::{Opts, Sim};
use crate::support::{repo, Home};
use serde_json::{json, Value};

/// One labelled scenario: script(s), how to run it, and which session carries which label.
struct Labelled {
    script: &'static str,
    title: &'static str,
    agent: Option<&'static str>,
    then: &'static [&'static str],
    summarize: bool,
    /// Label the first child (a subagent) instead of the root.
    label_child: bool,
    expect: &'static str,
    /// The label `flag_after` is the start of call number N (0-based) of the labelled session.
    flag_after_call: Option<usize>,
    /// The label `flag_by` is the start of call number N (0-based): flagged at that call or before.
    flag_by_call: Option<usize>,
    /// What the session does, in a few words, for whoever reads a failing label (`why`).
    why: Option<&'static str>,
    /// A label for the first child as well (the root keeps `expect`).
    child_expect: Option<&'static str>,
}

const fn l(script: &'static str, title: &'static str, expect: &'static str) -> Labelled {
    Labelled {
        script,
        title,
        agent: None,
        then: &[],
        summarize: false,
        label_child: false,
        expect,
        flag_after_call: None,
        flag_by_call: None,
        why: None,
        child_expect: None,
    }
}

pub const FIXTURE: &str = "fixtures/labelled.jsonl";

fn scenarios() -> Vec<Labelled> {
    vec![
        l("fx_navbar61", "item 2 worker: fix the navbar", "flag"),
        l("fx_first_attempt_a", "item 2 worker, 1st attempt", "flag"),
        l("fx_first_attempt_b", "item 3 worker, 1st attempt", "flag"),
        l("fx_failing_command", "item 4 worker", "flag"),
        Labelled {
            label_child: true,
            ..l("fx_explore_deleted_parent", "item 4 orchestrator", "flag")
        },
        Labelled {
            label_child: true,
            ..l("fx_spec_printer_parent", "item 5 orchestrator", "flag")
        },
        Labelled {
            then: &["fx_atlas_loop"],
            flag_after_call: Some(63),
            ..l("fx_atlas", "Atlas: navbar returns", "flag")
        },
        Labelled {
            agent: Some("plan"),
            ..l("fx_planner_spec68", "planner: navbar spec", "flag")
        },
        l("fx_retry_ok", "item 3 retry", "no_flag"),
        Labelled {
            then: &["fx_compact_2"],
            summarize: true,
            ..l("fx_compact_1", "item 3 compact", "no_flag")
        },
        l("fx_healthy_a", "item 5 worker", "no_flag"),
        l("fx_healthy_b", "item 6 worker", "no_flag"),
        Labelled {
            label_child: true,
            ..l("fx_explore_sliced_parent", "dispatcher survey", "no_flag")
        },
        Labelled {
            label_child: true,
            ..l("fx_explore_other_parent", "project survey", "no_flag")
        },
        Labelled {
            agent: Some("plan"),
            ..l("fx_planner_writes", "cockpit planner", "no_flag")
        },
        l("fx_flipflop", "header comment worker", "flag"),
        l("fx_short_loop", "check fixer", "flag"),
        l("fx_short_healthy", "stats demo", "no_flag"),
        // detector v2 (issue 12)
        Labelled {
            flag_after_call: Some(41),
            flag_by_call: Some(41 + 14),
            ..l("fx_work_then_loop", "navbar worker: exports", "flag")
        },
        Labelled {
            flag_by_call: Some(5),
            ..l("fx_identical_run", "readme reader", "flag")
        },
        Labelled {
            flag_by_call: Some(12),
            ..l("fx_edit_same_failure", "check.py comment fixer", "flag")
        },
        l("fx_tdd_passes", "calc, test first", "no_flag"),
        Labelled {
            flag_by_call: Some(20),
            ..l("fx_circling", "guide reader", "flag")
        },
    ]
    .into_iter()
    .chain(shapes())
    .collect()
}

/// Issue 26: one session per loop shape seen in other agents' real runs, and two hard negatives
/// (scripts in tests/support/shapes.py).
fn shapes() -> Vec<Labelled> {
    vec![
        Labelled {
            flag_by_call: Some(12),
            why: Some("1: one identical edit sent 22 times; each lands by adding another copy of its guard"),
            ..l("shape_same_landing_edit", "cart guard", "flag")
        },
        Labelled {
            flag_by_call: Some(16),
            why: Some("2: deletes and re-inserts the same 12-line block, 12 rounds, anchored differently each time"),
            ..l("shape_edit_undo", "routes table", "flag")
        },
        Labelled {
            flag_by_call: Some(20),
            why: Some("3: 20 comment edits, each followed by the same passing check with the same output"),
            ..l("shape_edit_same_pass", "summary rounding", "flag")
        },
        Labelled {
            flag_by_call: Some(16),
            why: Some("3: 16 edits of a constant, each followed by the same py_compile failure"),
            ..l("shape_edit_same_compile_failure", "report compile", "flag")
        },
        Labelled {
            flag_by_call: Some(16),
            why: Some("4: 58 different commands with an unmatched quote, answered by the same two bash errors"),
            ..l("shape_same_error", "amount search, quoting", "flag")
        },
        Labelled {
            flag_after_call: Some(10),
            flag_by_call: Some(24),
            why: Some("5: a round of 10 searches and reads, then the identical round twice more"),
            ..l("shape_same_round", "billing and routing survey", "flag")
        },
        Labelled {
            flag_by_call: Some(16),
            why: Some("6: six spellings of a search for parse_amount, cycled four times"),
            ..l("shape_symbol_search", "parse_amount search", "flag")
        },
        Labelled {
            why: Some("7: the same explore task (agent, description, prompt) spawned six times; each child reads what the last one read"),
            child_expect: Some("no_flag"),
            ..l("shape_respawn_parent", "amount parsing orchestrator", "flag")
        },
        Labelled {
            flag_by_call: Some(20),
            why: Some("8: three full passes over a 300-line file through shifting windows, 21 reads, nothing edited"),
            ..l("shape_paging_passes", "runbook reader", "flag")
        },
        Labelled {
            why: Some("hard negative: `cd X && ls -a` over 17 directories, every output different"),
            ..l("shape_tree_walk", "package tree walk", "no_flag")
        },
        Labelled {
            why: Some("hard negative: 8 real fixes, the test re-run after each with one failure fewer, then a commit"),
            ..l("shape_tests_change", "unit conversions", "no_flag")
        },
    ]
}

/// Regenerates fixtures/labelled.jsonl from fresh real sessions (about 10 minutes).
#[test]
#[ignore = "regenerates the committed fixture; run fixtures/regenerate"]
fn regenerate_fixtures() {
    // fixtures/regenerate SCRIPT... passes the names on; without them, everything is regenerated
    let only: Vec<String> = std::env::var("OC_FIXTURE_APPEND")
        .unwrap_or_default()
        .split_whitespace()
        .map(String::from)
        .collect();
    let all = scenarios();
    for name in &only {
        assert!(
            all.iter().any(|sc| sc.script == name),
            "fixtures/regenerate: no labelled scenario {name:?}"
        );
    }
    let sim = Sim::start();
    let home = Home::new();
    let mut lines: Vec<String> = Vec::new();
    for sc in all
        .into_iter()
        .filter(|sc| only.is_empty() || only.iter().any(|n| n == sc.script))
    {
        let t0 = std::time::Instant::now();
        let ran = sim.run_with(
            sc.script,
            Opts {
                title: Some(sc.title.to_string()),
                agent: sc.agent.map(String::from),
                then: sc.then.iter().map(|s| s.to_string()).collect(),
                summarize_between: sc.summarize,
                ..Opts::default()
            },
        );
        let labelled = if sc.label_child {
            ran.children.first().expect("a subagent session").clone()
        } else {
            ran.id.clone()
        };
        let mut ids = vec![ran.id.clone()];
        ids.extend(ran.children.iter().cloned());
        let r = home
            .cmd("oc-calls")
            .args(["--server", &sim.url])
            .args(&ids)
            .run();
        r.ok();
        let recs = r.records();
        let calls_of_labelled: Vec<&Value> = recs
            .iter()
            .filter(|c| c["kind"] == "call" && c["session"] == labelled.as_str())
            .collect();
        for mut rec in recs.clone() {
            if rec["kind"] == "session" && rec["id"] == labelled.as_str() {
                rec["expect"] = json!(sc.expect);
                if let Some(n) = sc.flag_after_call {
                    rec["flag_after"] = calls_of_labelled[n]["t"].clone();
                }
                if let Some(n) = sc.flag_by_call {
                    rec["flag_by"] = calls_of_labelled[n]["t"].clone();
                }
                if let Some(why) = sc.why {
                    rec["why"] = json!(why);
                }
            }
            if let (Some(e), Some(child)) = (sc.child_expect, ran.children.first()) {
                if rec["kind"] == "session" && rec["id"] == child.as_str() {
                    rec["expect"] = json!(e);
                }
            }
            lines.push(serde_json::to_string(&rec).unwrap());
        }
        eprintln!(
            "{:28} {} {:>4} calls  {:?}",
            sc.script,
            labelled,
            calls_of_labelled.len(),
            t0.elapsed()
        );
    }
    let path = repo().join(FIXTURE);
    let mut text = if only.is_empty() {
        String::new()
    } else {
        std::fs::read_to_string(&path).unwrap()
    };
    text += &(lines.join("\n") + "\n");
    std::fs::write(path, text).unwrap();
}
