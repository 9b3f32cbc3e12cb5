//! `dup`: the share of calls since the last landed change (at most `window`) that repeat an
//! earlier one exactly. Needs `min_calls` such calls; read-only agents are exempt (they re-read
//! by trade).

use super::thresholds::{key, Key};
use super::{round3, Case, Cx, Rule};
use crate::detect::region::{Obs, RegionEntry};
use crate::record::{Reading, Signal};

const DUP_MIN: usize = key("dup_min");
const MIN_CALLS: usize = key("min_calls");

pub struct Dup;

#[derive(Default, Clone)]
pub struct DupState {
    /// Distinct exact calls in the region.
    distinct: u32,
}

fn share(st: &DupState, cx: &Cx) -> f64 {
    let n = cx.region.len();
    if n == 0 {
        return 0.0;
    }
    (n - st.distinct as usize) as f64 / n as f64
}

impl Rule for Dup {
    const NAME: Signal = Signal::Dup;
    const KEYS: &'static [Key] = &[Key::share(
        "dup_min",
        0.25,
        "Share of exact repeats in the window that flags",
    )];
    const ABOUT: &'static str =
        "share of exact repeats among the calls since the last landed change";
    const COUNT: bool = false;
    type State = DupState;

    fn call(st: &mut DupState, c: &Obs, cx: &Cx) {
        let ex = &cx.region.exact;
        if !ex.range(..ex.len() - 1).any(|&k| k == c.exact) {
            st.distinct += 1;
        }
    }
    fn left(st: &mut DupState, exact: u64, _target: u64, _e: &RegionEntry, cx: &Cx) {
        if !cx.region.exact.contains(&exact) {
            st.distinct -= 1;
        }
    }
    fn fires(st: &DupState, cx: &Cx) -> bool {
        !cx.read_only
            && cx.region.len() >= cx.cfg.count(MIN_CALLS)
            && share(st, cx) >= cx.cfg.get(DUP_MIN)
    }
    fn reading(st: &DupState, cx: &Cx) -> Reading {
        Reading {
            value: round3(share(st, cx)),
            what: None,
        }
    }
    fn case(_st: &DupState, cx: &Cx) -> Case {
        // the repeats: calls whose exact call came before in the region
        let r = cx.region;
        let mut calls = Vec::new();
        for (i, (k, e)) in r.exact.iter().zip(&r.entries).enumerate() {
            if r.exact.range(..i).any(|x| x == k) {
                calls.push(e.at());
            }
        }
        Case {
            start: r.entries.front().map(RegionEntry::at),
            calls,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{c, Bench};
    use super::*;
    use serde_json::json;

    #[test]
    fn a_quarter_of_repeats_over_forty_calls_fires_and_the_window_forgets() {
        let mut b = Bench::<Dup>::default();
        for i in 0..30 {
            b.feed(c("grep", json!({ "pattern": format!("p{i}") })));
        }
        b.times(10, || c("read", json!({"filePath": "/a"})));
        assert_eq!(b.reading().value, 0.225);
        assert!(!b.fires());
        b.times(3, || c("read", json!({"filePath": "/a"})));
        assert_eq!(b.reading().value, 0.279);
        assert!(b.fires());
        for i in 0..60 {
            b.feed(c("grep", json!({ "pattern": format!("q{i}") })));
        }
        assert_eq!(b.reading().value, 0.0);
        b.land();
        assert_eq!(b.reading().value, 0.0);
    }
}
