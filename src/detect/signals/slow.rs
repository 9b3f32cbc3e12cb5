//! `slow`: one exact call repeated since the last landed change, however spread out (`cum_min`).
//! The counts are bounded: past `2 x window` distinct calls the ones seen once are forgotten.

use super::thresholds::{key, Key};
use super::{Case, Cx, Rule};
use crate::detect::region::Obs;
use crate::detect::target::IdMap;
use crate::record::{Reading, Signal};

const CUM_MIN: usize = key("cum_min");

pub struct Slow;

#[derive(Default, Clone)]
pub struct SlowState {
    counts: IdMap<u32>,
    /// Descriptions of exact calls repeated at least once.
    described: IdMap<Box<str>>,
    /// (count, key) of the most repeated call.
    best: (u32, u64),
}

impl Rule for Slow {
    const NAME: Signal = Signal::Slow;
    const KEYS: &'static [Key] = &[Key::count(
        "cum_min",
        15,
        "Repeats of one exact call since the last landed change that flag",
    )];
    const ABOUT: &'static str = "repeats of one exact call since the last landed change";
    const WHAT: Option<&'static str> = Some("slow_call");
    type State = SlowState;

    fn call(st: &mut SlowState, c: &Obs, cx: &Cx) {
        let cap = (cx.cfg.window() * 2).max(64);
        if st.counts.len() >= cap && !st.counts.contains_key(&c.exact) {
            st.counts.retain(|_, v| *v > 1);
            if st.counts.len() >= cap {
                st.counts.clear();
                st.best = (0, 0);
            }
            let counts = &st.counts;
            st.described.retain(|k, _| counts.contains_key(k));
        }
        let n = st.counts.entry(c.exact).or_insert(0);
        *n += 1;
        let n = *n;
        if n == 2 {
            st.described.insert(c.exact, c.describe());
        }
        if n > st.best.0 {
            st.best = (n, c.exact);
        }
    }
    fn landed(st: &mut SlowState) {
        // emptied in place: a session that landed once lands again
        st.counts.clear();
        st.described.clear();
        st.best = (0, 0);
    }
    fn fires(st: &SlowState, cx: &Cx) -> bool {
        st.best.0 >= cx.cfg.count(CUM_MIN) as u32
    }
    fn reading(st: &SlowState, _cx: &Cx) -> Reading {
        Reading {
            value: st.best.0 as f64,
            what: st.described.get(&st.best.1).map(|d| d.to_string()),
        }
    }
    fn case(st: &SlowState, cx: &Cx) -> Case {
        Case::of(cx.region.calls_with(&cx.region.exact, st.best.1))
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{c, Bench};
    use super::*;
    use serde_json::json;

    #[test]
    fn fifteen_spread_out_repeats_fire_and_a_landing_forgets_them() {
        let mut b = Bench::<Slow>::default();
        for i in 0..15 {
            b.feed(c("bash", json!({"command": "make test"})));
            for j in 0..5 {
                b.feed(c("grep", json!({ "pattern": format!("p{i}_{j}") })));
            }
        }
        assert!(b.fires());
        assert_eq!(b.reading().what.as_deref(), Some("bash make test"));
        b.land();
        assert_eq!(b.reading().value, 0.0);
    }
}
