//! `cycle`: a block of 2 to 12 different calls repeated back to back since the last landed change
//! (read, failing edit, test; read, grep, grep, read; ...), for `cycle_calls_min` calls and at
//! least two full rounds and the start of a third (a new role re-reading, once, what the last
//! one just read is two rounds that stop). Two full rounds are enough when a call of the block
//! failed: the same call failed again with the same answer, which no re-reading does. Nothing landed, so a round repeats the last one exactly: its calls can
//! only give the same answers. Known outputs that differ from the round before are polling and
//! break the cycle; unknown outputs prove nothing either way.

use super::thresholds::{key, Key};
use super::{Case, Cx, Rule};
use crate::detect::region::{room_ring, Obs};
use crate::record::{Reading, Signal};
use std::collections::VecDeque;

const CYCLE_CALLS_MIN: usize = key("cycle_calls_min");

pub struct Cycle;

/// The longest block looked for.
pub const PERIOD_MAX: usize = 12;

#[derive(Default, Clone)]
pub struct CycleState {
    /// The last `PERIOD_MAX` calls: (exact, output, failed).
    recent: VecDeque<(u64, Option<u64>, bool)>,
    /// Per period p: how many of the latest calls equal the call p before them.
    matched: [u16; PERIOD_MAX + 1],
    /// How many of the latest calls are the same exact call (at most `PERIOD_MAX`): a block
    /// of p calls holds two different ones when this is under p.
    same: u8,
    /// Call index of the latest call.
    last: u64,
}

/// Calls a cycle of period p needs in all: two rounds and the start of a third, or two rounds
/// when the block holds a call that failed (with a known answer, the same in both rounds).
fn needed(p: usize, failing: bool, cx: &Cx) -> usize {
    let rounds = if failing { 2 * p } else { 2 * p + 1 };
    cx.cfg.count(CYCLE_CALLS_MIN).max(rounds)
}

/// The shortest period that is cycling: (period, calls in the cycle).
fn cycling(st: &CycleState, cx: &Cx) -> Option<(usize, usize)> {
    (2..=PERIOD_MAX).find_map(|p| {
        let calls = st.matched[p] as usize + p;
        let n = st.recent.len();
        let failing = p <= n && st.recent.range(n - p..).any(|&(_, _, f)| f);
        if st.matched[p] == 0 || calls < needed(p, failing, cx) {
            return None;
        }
        // a block of one call repeated is a run, not a cycle (a period matched holds more than
        // p calls)
        ((st.same as usize) < p).then_some((p, calls))
    })
}

impl Rule for Cycle {
    const NAME: Signal = Signal::Cycle;
    const KEYS: &'static [Key] = &[Key::count(
        "cycle_calls_min",
        6,
        "Calls in a block of 2-12 calls repeated back to back that flag",
    )];
    const ABOUT: &'static str =
        "a block of 2-12 calls repeated back to back, nothing landed, outputs unchanged";
    type State = CycleState;

    fn call(st: &mut CycleState, c: &Obs, _cx: &Cx) {
        let n = st.recent.len();
        for p in 2..=PERIOD_MAX {
            let same = p <= n && {
                let (k, out, _) = st.recent[n - p];
                k == c.exact && !matches!((out, c.out), (Some(a), Some(b)) if a != b)
            };
            st.matched[p] = if same {
                st.matched[p].saturating_add(1)
            } else {
                0
            };
        }
        st.same = match st.recent.back() {
            Some(&(k, _, _)) if k == c.exact => (st.same + 1).min(PERIOD_MAX as u8),
            _ => 1,
        };
        if n == PERIOD_MAX {
            st.recent.pop_front();
        }
        room_ring(&mut st.recent);
        st.recent.push_back((c.exact, c.out, c.failed && c.out.is_some()));
        st.last = c.index;
    }
    fn landed(st: &mut CycleState) {
        // emptied in place: a session that landed once lands again
        st.recent.clear();
        st.matched = Default::default();
        st.same = 0;
        st.last = 0;
    }
    fn fires(st: &CycleState, cx: &Cx) -> bool {
        cycling(st, cx).is_some()
    }
    fn reading(st: &CycleState, cx: &Cx) -> Reading {
        Reading {
            value: cycling(st, cx).map_or(0.0, |(p, _)| p as f64),
            what: None,
        }
    }
    fn case(st: &CycleState, cx: &Cx) -> Case {
        match cycling(st, cx) {
            Some((_, calls)) => Case::of(cx.region.calls_from(st.last + 1 - calls as u64)),
            None => Case::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{c, Bench, C};
    use super::*;
    use serde_json::json;

    fn a() -> C {
        c("read", json!({"filePath": "/w/stats.py"}))
    }
    fn b() -> C {
        c("bash", json!({"command": "python3 -c 'import stats'"}))
    }
    fn e() -> C {
        c(
            "edit",
            json!({"filePath": "/w/stats.py", "oldString": "x", "newString": "y"}),
        )
    }

    #[test]
    fn two_rounds_of_three_and_one_call_more_fire_on_the_seventh_call() {
        let mut s = Bench::<Cycle>::default();
        s.feed(c("glob", json!({"pattern": "*"})));
        for _ in 0..5 {
            s.feed(a()).feed(e()).feed(b());
        }
        // the cycle begins at call 2; its 7th call is call 8
        let mut s2 = Bench::<Cycle>::default();
        s2.feed(c("glob", json!({"pattern": "*"})));
        s2.feed(a())
            .feed(e())
            .feed(b())
            .feed(a())
            .feed(e())
            .feed(b());
        assert!(!s2.fires(), "two rounds only: a new role re-reading once");
        s2.feed(a());
        assert!(s2.fires());
        assert_eq!(s2.reading().value, 3.0);
        assert_eq!(s2.case().start.unwrap().index, 2);
        assert!(s.fires());
        assert_eq!(s.case().calls.len(), 15);
    }

    #[test]
    fn shape_5_the_same_round_of_ten_again() {
        // ten searches and reads over a few files, then the same ten again
        let round: Vec<C> = (0..10)
            .map(|i| match i % 2 {
                0 => c("grep", json!({"pattern": format!("sym{}", i / 2)})),
                _ => c("read", json!({"filePath": format!("/w/f{}.java", i / 4)})),
            })
            .collect();
        let mut s = Bench::<Cycle>::default();
        for (n, x) in round.iter().chain(&round).chain(&round).enumerate() {
            s.feed(C {
                tool: x.tool,
                args: x.args.clone(),
                ..c(x.tool, json!({}))
            });
            assert_eq!(s.fires(), n + 1 >= 21, "call {}", n + 1);
        }
        assert_eq!(s.reading().value, 10.0);
    }

    #[test]
    fn one_call_repeated_is_a_run_and_a_block_with_a_repeat_in_it_is_a_cycle() {
        let mut s = Bench::<Cycle>::default();
        s.times(12, a);
        assert!(!s.fires(), "a run of one call is `run`'s, not a cycle");
        // read, read, test, three times: a block of three with two different calls in it
        let mut s = Bench::<Cycle>::default();
        s.feed(a())
            .feed(a())
            .feed(b())
            .feed(a())
            .feed(a())
            .feed(b());
        assert!(!s.fires());
        s.feed(a());
        assert!(s.fires());
        assert_eq!(s.reading().value, 3.0);
        assert_eq!(s.case().start.unwrap().index, 1);
    }

    #[test]
    fn a_block_with_a_failing_call_fires_after_two_full_rounds() {
        // the fixture's "header comment worker": read five lines, two edits whose oldString is
        // not there (each fails with the same error), again and again
        let failing = |h: &str| C {
            out: Some(5),
            failed: true,
            ..c(
                "edit",
                json!({"filePath": "/w/navbar.js", "oldString": "sha1:old", "newString": h}),
            )
        };
        let head = || C {
            out: Some(1),
            ..c("read", json!({"filePath": "/w/navbar.js", "limit": 5}))
        };
        let mut s = Bench::<Cycle>::default();
        s.feed(head())
            .feed(failing("sha1:f2")) 
            .feed(failing("sha1:ec"))
            .feed(head())
            .feed(failing("sha1:f2"));
        assert!(!s.fires());
        s.feed(failing("sha1:ec"));
        assert!(s.fires(), "two rounds with a failure in them");
        assert_eq!(s.case().start.unwrap().index, 1);
        // the same block whose edits are not known to fail needs the start of a third round
        let passing = |h: &str| C {
            failed: false,
            ..failing(h)
        };
        let mut s = Bench::<Cycle>::default();
        s.feed(head())
            .feed(passing("sha1:f2"))
            .feed(passing("sha1:ec"))
            .feed(head())
            .feed(passing("sha1:f2"))
            .feed(passing("sha1:ec"));
        assert!(!s.fires());
        s.feed(head());
        assert!(s.fires());
    }

    #[test]
    fn alternating_pairs_need_three_rounds() {
        let mut s = Bench::<Cycle>::default();
        s.feed(a()).feed(b()).feed(a()).feed(b()).feed(a());
        assert!(!s.fires());
        s.feed(b());
        assert!(s.fires());
    }

    #[test]
    fn polling_whose_output_changes_and_landed_work_are_no_cycle() {
        let mut s = Bench::<Cycle>::default();
        for i in 0..6 {
            s.feed(C {
                out: Some(i),
                ..b()
            });
            s.feed(c("bash", json!({"command": "sleep 5"})));
        }
        assert!(!s.fires());
        let mut s = Bench::<Cycle>::default();
        for _ in 0..6 {
            s.feed(a()).feed(b()).land();
        }
        assert!(!s.fires());
    }

    #[test]
    fn an_identical_run_is_left_to_run() {
        let mut s = Bench::<Cycle>::default();
        s.times(10, a);
        assert!(!s.fires());
    }

    #[test]
    fn shape_6_near_identical_searches_for_one_symbol_cycled() {
        // six ways of asking where `parse_amount` is, the same six again and again (the fixture's
        // "parse_amount search"): no two calls alike, outputs the same each round
        let round = || {
            [
                (c("grep", json!({"pattern": "parse_amount"})), 1),
                (c("grep", json!({"pattern": "parse_amount\\("})), 1),
                (c("grep", json!({"pattern": "def parse_amount"})), 2),
                (
                    c("bash", json!({"command": "grep -rn parse_amount src"})),
                    3,
                ),
                (
                    c(
                        "grep",
                        json!({"include": "*.py", "pattern": "\\bparse_amount\\b"}),
                    ),
                    1,
                ),
                (
                    c("bash", json!({"command": "grep -rn 'def parse_amount' ."})),
                    4,
                ),
            ]
        };
        let mut s = Bench::<Cycle>::default();
        let mut fired_at = None;
        for _ in 0..3 {
            for (x, out) in round() {
                s.feed(C {
                    out: Some(out),
                    ..x
                });
                if fired_at.is_none() && s.fires() {
                    fired_at = Some(s.calls);
                }
            }
        }
        // two rounds and the first call of a third
        assert_eq!(fired_at, Some(13));
        assert_eq!(s.reading().value, 6.0);
        assert_eq!(s.case().start.unwrap().index, 1);
    }

    #[test]
    fn hard_negative_a_new_role_re_reading_once_the_windows_just_read_is_no_cycle() {
        // a planner reads a file in four windows; the builder after it reads the same four once
        let mut s = Bench::<Cycle>::default();
        for _role in 0..2 {
            for k in 0..4 {
                s.feed(c(
                    "read",
                    json!({"filePath": "/w/ledger.py", "offset": 1 + 75 * k, "limit": 75}),
                ));
            }
        }
        assert!(!s.fires());
    }
}
