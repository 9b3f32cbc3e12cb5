//! `failed_again`: calls that failed are made again and fail the same way, `failed_again_min`
//! times since the last landed change, whatever came between. The evidence is the same call
//! coming back (tool and arguments) with the same failure (an error or a non-zero exit, and the
//! same output): a fix a harness rejects, sent again; a malformed command retried; two rejected
//! fixes alternated. Each return counts once, whichever call it repeats, so an agent cycling
//! through a few rejected fixes builds it up as surely as one re-sending a single fix, without
//! having to repeat them back to back (that is `run`) or in a fixed order (that is `cycle`).
//!
//! What never counts: a call made for the first time, however it fails (different fixes
//! rejected with one text, new searches that find nothing: exploration); a call that passes; a
//! repeat whose output changed (something moved); an unknown output or outcome. A landed change
//! starts the count again, and calls leaving the window take their repeats with them.

use super::thresholds::{key, Key};
use super::{Case, Cx, Rule};
use crate::detect::region::{room, Obs, RegionEntry};
use crate::record::{CallRef, Reading, Signal};

const FAILED_AGAIN_MIN: usize = key("failed_again_min");

/// Distinct failing calls followed; more forget the oldest (and its repeats).
const FOLLOWED: usize = 16;
/// Repeats kept as the case.
const KEPT: usize = 12;

pub struct FailedAgain;

/// One failing call and how often it failed that way in the region.
#[derive(Clone)]
struct Failing {
    exact: u64,
    out: u64,
    times: u32,
    described: Box<str>,
}

#[derive(Default, Clone)]
pub struct FailedAgainState {
    failing: Vec<Failing>,
    /// Returns in the region: each failing call's times past its first.
    repeats: u32,
    /// The latest returns, oldest first.
    calls: Vec<CallRef>,
}

impl FailedAgainState {
    /// The call that came back most often.
    fn most(&self) -> Option<&Failing> {
        self.failing
            .iter()
            .filter(|f| f.times > 1)
            .max_by_key(|f| f.times)
    }
}

impl Rule for FailedAgain {
    const NAME: Signal = Signal::FailedAgain;
    const KEYS: &'static [Key] = &[Key::count(
        "failed_again_min",
        5,
        "Failing calls made again and failing the same way since the last landed change that flag",
    )];
    const ABOUT: &'static str =
        "calls that failed made again and failing the same way, since the last landed change";
    const WHAT: Option<&'static str> = Some("failed_again_call");
    type State = FailedAgainState;

    fn call(st: &mut FailedAgainState, c: &Obs, _cx: &Cx) {
        let (true, Some(out)) = (c.failed, c.out) else {
            return;
        };
        match st
            .failing
            .iter_mut()
            .find(|f| f.exact == c.exact && f.out == out)
        {
            Some(f) => {
                f.times += 1;
                st.repeats += 1;
                if st.calls.len() == KEPT {
                    st.calls.remove(0);
                }
                st.calls.push(c.at());
            }
            None => {
                if st.failing.len() == FOLLOWED {
                    let gone = st.failing.remove(0);
                    st.repeats -= gone.times - 1;
                }
                room(&mut st.failing);
                st.failing.push(Failing {
                    exact: c.exact,
                    out,
                    times: 1,
                    described: c.describe(),
                });
            }
        }
    }
    fn left(st: &mut FailedAgainState, exact: u64, _target: u64, e: &RegionEntry, _cx: &Cx) {
        let (true, Some(out)) = (e.failed, e.out) else {
            return;
        };
        if let Some(i) = st
            .failing
            .iter()
            .position(|f| f.exact == exact && f.out == out)
        {
            let f = &mut st.failing[i];
            if f.times > 1 {
                f.times -= 1;
                st.repeats -= 1;
            } else {
                st.failing.remove(i);
            }
        }
        st.calls.retain(|r| r.index > e.index);
    }
    fn fires(st: &FailedAgainState, cx: &Cx) -> bool {
        st.repeats >= cx.cfg.count(FAILED_AGAIN_MIN) as u32
    }
    fn reading(st: &FailedAgainState, _cx: &Cx) -> Reading {
        Reading {
            value: st.repeats as f64,
            what: st.most().map(|f| f.described.to_string()),
        }
    }
    fn case(st: &FailedAgainState, _cx: &Cx) -> Case {
        Case::of(st.calls.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{c, Bench, C};
    use super::*;
    use serde_json::json;

    /// RepairAgent's `write_fix` of fix `n`, rejected with its one text.
    fn rejected(n: u32) -> C {
        C {
            failed: true,
            out: Some(0xd5f0),
            ..c(
                "edit",
                json!({"filePath": "TypeValidator.java", "changes": format!("sha1:{n}")}),
            )
        }
    }

    #[test]
    fn rejected_fixes_sent_again_in_any_order_fire_at_the_fifth_return() {
        // Closure_117's shape: new fixes, then two of them alternated, every one rejected
        let mut b = Bench::<FailedAgain>::default();
        for n in [1, 2, 3, 4] {
            b.feed(rejected(n));
        }
        for n in [3, 4, 3, 4] {
            b.feed(rejected(n));
        }
        assert!(!b.fires());
        assert_eq!(b.reading().value, 4.0);
        b.feed(rejected(3));
        assert!(b.fires());
        assert_eq!(b.reading().value, 5.0);
        assert_eq!(
            b.reading().what.as_deref(),
            Some("edit TypeValidator.java")
        );
        let case: Vec<u64> = b.case().calls.iter().map(|r| r.index).collect();
        assert_eq!(case, [5, 6, 7, 8, 9]);
    }

    #[test]
    fn different_fixes_rejected_with_one_text_are_exploration() {
        let mut b = Bench::<FailedAgain>::default();
        for n in 0..30 {
            b.feed(rejected(n));
        }
        assert!(!b.fires());
        assert_eq!(b.reading().value, 0.0);
    }

    #[test]
    fn a_repeat_that_passes_or_answers_otherwise_is_no_return() {
        let mut b = Bench::<FailedAgain>::default();
        b.feed(rejected(1));
        for i in 0..10 {
            // the same call, now accepted, or rejected with another text
            b.feed(C {
                failed: i % 2 == 0,
                out: Some(i),
                ..rejected(1)
            });
        }
        assert_eq!(b.reading().value, 0.0);
        // an unknown output proves nothing
        for _ in 0..10 {
            b.feed(C {
                out: None,
                ..rejected(1)
            });
        }
        assert!(!b.fires());
    }

    #[test]
    fn a_landed_change_starts_the_count_again() {
        // Math_44's shape: four returns of one rejected fix, then fixes land
        let mut b = Bench::<FailedAgain>::default();
        b.feed(rejected(1));
        b.times(4, || rejected(1));
        assert_eq!(b.reading().value, 4.0);
        b.land();
        b.feed(rejected(1));
        assert!(!b.fires());
        assert_eq!(b.reading().value, 0.0);
    }
}
