//! `same_failure`: one check answers with the same output `same_failure_min` times, whatever
//! landed between. Edits that land but do not move the outcome are not progress. A check is a
//! call that failed, or a command whose exit is unknown (runs recorded without exit codes: a
//! compile failing the same way after every edit reads as one). A known pass is no check (a
//! quiet test passing the same way after each real edit is how work goes; the same pass after
//! edits that rework one spot is `unmoved`). Only known outputs count: a null output (unknown)
//! never matches, and a different outcome ends the streak.
//!
//! A failure the agent's changes do not move flags sooner (`same_failure_checked_min`): the
//! same call failed for sure (an error, a non-zero exit) with the same output each time right
//! after a new change landed (edit, check, edit, check: every change checked at once and the
//! check answering as before). A change made again ([`Obs::relanded`]) is no new change, and a
//! check that comes back only after other work (reads, searches) is the agent exploring
//! between tries: both keep `same_failure_min`.
//!
//! The evidence is the same call coming back with the same answer. Different calls answered
//! alike are an agent trying things (new searches that each find nothing, different fixes a
//! harness rejects with one text) and count only when the answer is a known failure status, an
//! exit code, that the same tool keeps getting (58 malformed commands failing with one of two
//! shell errors), since the last landed change. A streak of one call back to back, nothing
//! between, is `run`'s to judge on its own threshold.

use super::thresholds::{key, Key};
use super::{Case, Cx, Rule};
use crate::detect::region::{room, Obs};
use crate::detect::target;
use crate::record::{CallRef, Reading, Signal};
use crate::vocab::Tool;

const SAME_FAILURE_MIN: usize = key("same_failure_min");
const CHECKED_MIN: usize = key("same_failure_checked_min");

pub struct SameFailure;

/// Checks followed at once; more distinct failing calls than this forget the oldest.
pub(super) const CHECKS: usize = 4;
/// Calls of a streak kept as evidence.
const KEPT: usize = 12;

#[derive(Default, Clone)]
pub struct Streak {
    pub(super) exact: u64,
    pub(super) out: u64,
    pub(super) calls: Vec<CallRef>,
    pub(super) len: u32,
    pub(super) described: Box<str>,
    /// Other calls came between two of its calls (a landed edit, another command): a streak
    /// of one call back to back is `run`'s to judge, on its own threshold.
    pub(super) apart: bool,
    /// Each of its calls failed for sure (an error or a non-zero exit) and checked, at once, a
    /// new change that landed since the one before: the changes do not move the failure.
    pub(super) checked: bool,
    /// A new change landed since its last call.
    pub(super) changed: bool,
}

#[derive(Default, Clone)]
pub struct SameFailureState {
    /// By check (`exact`): its streak of one same output.
    checks: Vec<Streak>,
    /// By output: the checks answered with it since the last landing (`exact` unused).
    answers: Vec<Streak>,
}

fn longest(st: &SameFailureState) -> Option<&Streak> {
    st.checks.iter().chain(&st.answers).max_by_key(|s| s.len)
}

/// The longest streak that makes a case: long enough, and not one call back to back.
fn firing<'a>(st: &'a SameFailureState, cx: &Cx) -> Option<&'a Streak> {
    let min = cx.cfg.count(SAME_FAILURE_MIN) as u32;
    let checked = cx.cfg.count(CHECKED_MIN) as u32;
    st.checks
        .iter()
        .chain(&st.answers)
        .filter(|s| s.apart && s.len >= if s.checked { checked } else { min })
        .max_by_key(|s| s.len)
}

/// One more call of a streak.
pub(super) fn extend(s: &mut Streak, c: &Obs) {
    s.apart |= s.calls.last().is_some_and(|l| l.index + 1 != c.index);
    s.checked &= c.failed && s.changed && s.calls.last().is_some_and(|l| c.index == l.index + 2);
    s.changed = false;
    s.len += 1;
    if s.calls.len() == KEPT {
        s.calls.remove(0);
    }
    s.calls.push(c.at());
}

/// A new streak of call `c` in `list`, the oldest forgotten when it holds [`CHECKS`].
pub(super) fn start(list: &mut Vec<Streak>, c: &Obs, out: u64) {
    if list.len() == CHECKS {
        list.remove(0);
    }
    room(list);
    list.push(Streak {
        exact: c.exact,
        out,
        calls: vec![c.at()],
        len: 1,
        described: c.describe(),
        apart: false,
        checked: c.failed,
        changed: false,
    });
}

impl Rule for SameFailure {
    const NAME: Signal = Signal::SameFailure;
    const KEYS: &'static [Key] = &[
        Key::count(
            "same_failure_min",
            4,
            "Times in a row one check fails with the same output that flag",
        ),
        Key::count(
            "same_failure_checked_min",
            3,
            "... or, each time right after a new change landed, that flag",
        ),
    ];
    const ABOUT: &'static str =
        "one check failing with the same output again and again, whatever landed between";
    const WHAT: Option<&'static str> = Some("same_failure_call");
    type State = SameFailureState;

    fn call(st: &mut SameFailureState, c: &Obs, _cx: &Cx) {
        let at = st.checks.iter().position(|s| s.exact == c.exact);
        // a pass while edits rework one spot is `unmoved`'s
        let check = c.failed || (c.args.tool == Tool::Bash && c.exit.is_none());
        let (true, Some(out)) = (check, c.out) else {
            if let Some(i) = at {
                st.checks.remove(i);
            }
            // an output that a pass gives is no failure's
            st.answers.retain(|s| Some(s.out) != c.out);
            return;
        };
        match at {
            Some(i) if st.checks[i].out == out => extend(&mut st.checks[i], c),
            _ => {
                if let Some(i) = at {
                    st.checks.remove(i);
                }
                start(&mut st.checks, c, out);
            }
        }
        // different calls with one answer are an agent trying things, unless the answer is a
        // known failure status (an exit code) that the same kind of action keeps getting
        if !c.exit.is_some_and(|e| e != 0) {
            return;
        }
        let kind = target::hash_str(c.tool);
        match st.answers.iter().position(|s| s.out == out && s.exact == kind) {
            Some(i) => {
                extend(&mut st.answers[i], c);
                // different calls, whether or not back to back
                st.answers[i].apart = true;
            }
            None => {
                start(&mut st.answers, c, out);
                if let Some(s) = st.answers.last_mut() {
                    s.exact = kind;
                    s.checked = false;
                }
            }
        }
    }
    /// A landed change does not end a check's streak: only a different outcome does. Answers
    /// from different checks are counted since the last landing.
    fn landed(st: &mut SameFailureState) {
        st.answers.clear();
        for s in &mut st.checks {
            s.changed = true;
        }
    }
    fn fires(st: &SameFailureState, cx: &Cx) -> bool {
        firing(st, cx).is_some()
    }
    fn reading(st: &SameFailureState, _cx: &Cx) -> Reading {
        match longest(st) {
            Some(s) => Reading {
                value: s.len as f64,
                what: Some(s.described.to_string()),
            },
            None => Reading::default(),
        }
    }
    fn case(st: &SameFailureState, cx: &Cx) -> Case {
        firing(st, cx)
            .or_else(|| longest(st))
            .map_or_else(Case::default, |s| Case::of(s.calls.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{c, Bench, C};
    use super::*;
    use serde_json::json;

    fn check(out: Option<u64>, failed: bool) -> C {
        C {
            out,
            failed,
            exit: Some(failed as i64),
            ..c("bash", json!({"command": "python3 tools/check.py"}))
        }
    }

    #[test]
    fn a_failure_each_new_change_leaves_as_it_was_fires_on_the_third_check() {
        // fixtures/labelled.jsonl ses_dc572f240ffe2uVOD6UPCeWhWv: a read, then 16 rounds of an
        // edit that lands and `python3 -m py_compile tools/report.py` failing (exit 1) alike;
        // flagged at call 7 (the third check) where `same_failure_min` gave call 9
        let mut b = Bench::<SameFailure>::default();
        b.feed(c("read", json!({"filePath": "/w/tools/report.py"})));
        for round in 1..=3 {
            b.land().feed(check(Some(7), true));
            assert_eq!(b.fires(), round == 3, "round {round}");
        }
        assert_eq!(b.cx().calls, 7);
        assert_eq!(b.reading().value, 3.0);
        assert_eq!(
            b.reading().what.as_deref(),
            Some("bash python3 tools/check.py")
        );
        assert_eq!(b.case().calls.len(), 3);
    }

    #[test]
    fn a_failure_between_exploration_or_after_a_change_made_again_needs_four() {
        // external-dev ses_oh_pytest_dev__pytest_6202 (resolved): the test fails, 23 calls of
        // reads and finds, then edit, the same failure, another edit, the same failure, and
        // the fix. The check came back after exploring, not right after a change.
        let mut b = Bench::<SameFailure>::default();
        b.feed(check(Some(7), true));
        for f in 0..3 {
            b.feed(c("read", json!({"filePath": format!("/w/testing/t{f}.py")})));
        }
        for round in 2..=4 {
            b.land().feed(check(Some(7), true));
            assert_eq!(b.fires(), round == 4, "round {round}");
        }
        // external4 ses_ra_experiment_494_Lang_36 (its loop starts later): a rejected fix
        // alternating with one accepted fix made again and again; no new change between
        let mut b = Bench::<SameFailure>::default();
        let rejected = || C {
            out: Some(8),
            failed: true,
            ..c("edit", json!({"filePath": "/w/N.java", "changes": "sha1:6639"}))
        };
        let again = || C {
            relanded: true,
            ..c("edit", json!({"filePath": "/w/N.java", "changes": "sha1:c4c6"}))
        };
        b.feed(rejected()).land().feed(rejected()).feed(again());
        b.feed(rejected());
        assert!(!b.fires(), "three rejections, one new change between them");
        b.feed(again()).feed(rejected());
        assert!(b.fires(), "the fourth");
    }

    #[test]
    fn shape_3_a_compile_without_exit_codes_failing_alike_after_each_edit_fires() {
        // a run recorded without exit codes: the same output after each landed edit
        let mut b = Bench::<SameFailure>::default();
        let compile = || C {
            out: Some(7),
            ..c("bash", json!({"command": "javac Repro.java"}))
        };
        for round in 1..=4 {
            b.land().feed(compile());
            assert_eq!(b.fires(), round == 4, "round {round}");
        }
        // a known pass, the same each time, is no check
        let mut b = Bench::<SameFailure>::default();
        for _ in 0..8 {
            b.land().feed(check(Some(7), false));
        }
        assert!(!b.fires());
    }

    #[test]
    fn a_changing_outcome_a_pass_or_an_unknown_output_ends_the_streak() {
        let mut b = Bench::<SameFailure>::default();
        for out in [1, 2, 3, 4, 5, 6] {
            b.land().feed(check(Some(out), true));
        }
        assert!(!b.fires());
        let mut b = Bench::<SameFailure>::default();
        b.times(3, || check(Some(1), true))
            .feed(check(Some(1), false));
        b.times(3, || check(Some(1), true));
        assert!(!b.fires());
        let mut b = Bench::<SameFailure>::default();
        b.times(3, || check(Some(1), true)).feed(check(None, true));
        b.land().feed(check(Some(1), true));
        assert!(!b.fires());
    }

    #[test]
    fn shape_4_different_commands_failing_with_the_same_exit_and_error_fire() {
        let mut b = Bench::<SameFailure>::default();
        for i in 0..4 {
            b.feed(C {
                out: Some(42),
                failed: true,
                exit: Some(2),
                ..c("bash", json!({ "command": format!("DISCUSSION {i}") }))
            });
            assert_eq!(b.fires(), i == 3, "call {}", i + 1);
        }
        assert_eq!(b.reading().value, 4.0);
        // a landing starts the count again
        b.land();
        assert!(!b.fires());
    }

    #[test]
    fn hard_negative_exploration_with_searches_that_each_find_nothing_does_not_fire() {
        // SWE-agent 1.x and RepairAgent record no exit code: each new search that finds nothing
        // is an error with one same text. Different calls, one answer: the agent is exploring
        let mut b = Bench::<SameFailure>::default();
        for q in ["acceptStep", "event reset", "derivative", "handler", "reset state", "step"] {
            b.feed(C {
                out: Some(11),
                failed: true,
                ..c("grep", json!({ "pattern": q }))
            });
            assert!(!b.fires(), "{q}");
        }
    }

    #[test]
    fn hard_negative_different_fixes_rejected_with_one_text_do_not_fire_until_one_is_resent() {
        // RepairAgent rejects each fix that misses the buggy lines with one fixed text: six
        // different fixes are six tries, not a loop
        let mut b = Bench::<SameFailure>::default();
        let fix = |n: u32| C {
            out: Some(0x2ce1),
            failed: true,
            ..c("edit", json!({"filePath": "F.java", "changes": format!("sha1:{n}")}))
        };
        for n in 0..6 {
            b.feed(fix(n));
            assert!(!b.fires(), "fix {n}");
        }
        // a new fix re-sent back to back is a run (run_min), not a failure streak of its own:
        // four in a row still say nothing here
        for _ in 0..4 {
            b.feed(fix(6));
        }
        assert!(!b.fires());
        // re-sent with another call between, it is the same check failing the same way again
        b.feed(c("read", json!({"filePath": "F.java"})));
        b.feed(fix(6));
        assert!(b.fires());
        assert_eq!(b.reading().value, 5.0);
    }

    #[test]
    fn hard_negative_test_re_runs_between_real_edits_whose_output_changes_do_not_fire() {
        // a test run after each of 12 landed edits, failing, each time with another output (the
        // edits fix one test after another), then passing
        let mut b = Bench::<SameFailure>::default();
        let test = |out: u64, failed: bool| C {
            out: Some(out),
            failed,
            exit: Some(failed as i64),
            ..c("bash", json!({"command": "python3 -m pytest tests -x"}))
        };
        for round in 0..12 {
            b.land().feed(test(100 + round, true));
            assert!(!b.fires(), "round {round}");
        }
        b.land().feed(test(200, false));
        assert!(!b.fires());
        assert_eq!(b.reading().value, 0.0);
    }
}
