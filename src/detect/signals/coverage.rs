//! `coverage`: lines requested from one file since the last landed change (within the window),
//! over its length; flags strictly above `cover_min`, once `min_calls` calls are in the window.

use super::files::Files;
use super::thresholds::{key, Key};
use super::{Case, Cx, Rule};
use crate::detect::region::{Obs, RegionEntry};
use crate::record::{Reading, Signal};

const COVER_MIN: usize = key("cover_min");
const MIN_CALLS: usize = key("min_calls");

pub struct Coverage;

/// The files read in the window, and the most covered one.
#[derive(Default, Clone)]
pub struct CoverageState(Files);

impl Rule for Coverage {
    const NAME: Signal = Signal::Coverage;
    const KEYS: &'static [Key] = &[Key::above0(
        "cover_min",
        4.0,
        "times a file's length",
        "Coverage (lines requested from one file / its length) above which a session flags",
    )];
    const ABOUT: &'static str =
        "lines read from one file over its length, since the last landed change";
    const WHAT: Option<&'static str> = Some("coverage_file");
    const COUNT: bool = false;
    type State = CoverageState;

    fn call(st: &mut CoverageState, c: &Obs, _cx: &Cx) {
        if let Some(r) = c.read {
            st.0.add(c, r);
        }
    }
    fn left(st: &mut CoverageState, _exact: u64, _target: u64, e: &RegionEntry, _cx: &Cx) {
        if let Some(r) = e.read {
            st.0.remove(r);
        }
    }
    fn landed(st: &mut CoverageState) {
        st.0.clear();
    }
    fn fires(st: &CoverageState, cx: &Cx) -> bool {
        cx.region.len() >= cx.cfg.count(MIN_CALLS)
            && st.0.leader().is_some_and(|l| l.0 > cx.cfg.get(COVER_MIN))
    }
    fn reading(st: &CoverageState, _cx: &Cx) -> Reading {
        st.0.reading()
    }
    fn case(st: &CoverageState, cx: &Cx) -> Case {
        st.0.case(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{read, Bench};
    use super::*;

    #[test]
    fn coverage_exactly_at_the_bound_does_not_fire() {
        // regression for the old >= comparison: 4.0x is the boundary, not a flag
        let mut b = Bench::<Coverage>::default();
        for i in 0..40 {
            b.feed(read("/spec.md", 1 + i * 2, 10, 100));
        }
        assert_eq!(b.reading().value, 4.0);
        assert!(!b.fires());
        b.feed(read("/spec.md", 90, 10, 100));
        assert!(b.fires());
        assert_eq!(b.reading().what.as_deref(), Some("/spec.md"));
    }
}
