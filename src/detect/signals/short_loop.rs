//! `short_loop`: a session still under `min_calls` calls that works one target at least
//! `short_top_min` times, making up `short_share_min` of its calls (under `top_min`, which `top`
//! covers). While it applies the region is short: a call counts its own target in it, and only
//! a call leaving the window (a window under `min_calls`) makes it count them all again.

use super::thresholds::{key, Key};
use super::{Case, Cx, Rule};
use crate::detect::region::{Obs, RegionEntry};
use crate::record::{Reading, Signal};

const MIN_CALLS: usize = key("min_calls");
const TOP_MIN: usize = key("top_min");
const SHORT_TOP_MIN: usize = key("short_top_min");
const SHORT_SHARE_MIN: usize = key("short_share_min");

pub struct ShortLoop;

#[derive(Default, Clone)]
pub struct ShortLoopState {
    /// Calls of the region's most-worked target, while the session is short.
    top: u32,
}

/// (count, key) of the region's most-worked target; ties go to the earliest.
fn leader(cx: &Cx) -> (u32, u64) {
    let tg = &cx.region.target;
    let mut best = (0, 0);
    for &k in tg {
        let n = tg.iter().filter(|&&x| x == k).count() as u32;
        if n > best.0 {
            best = (n, k);
        }
    }
    best
}

fn applies(cx: &Cx) -> bool {
    cx.calls < cx.cfg.count(MIN_CALLS) as u64
}

impl Rule for ShortLoop {
    const NAME: Signal = Signal::ShortLoop;
    const KEYS: &'static [Key] = &[
        Key::count(
            "short_top_min",
            8,
            "Under min_calls: repeats of one target that flag a short session ...",
        ),
        Key::share(
            "short_share_min",
            0.6,
            "... making up this share of its calls",
        ),
    ];
    const ABOUT: &'static str = "a short session that works one target most of the time";
    const READING: bool = false;
    type State = ShortLoopState;

    fn call(st: &mut ShortLoopState, _c: &Obs, cx: &Cx) {
        if !applies(cx) {
            return;
        }
        st.top = st.top.max(cx.region.target_n);
    }
    fn left(st: &mut ShortLoopState, _exact: u64, _target: u64, _e: &RegionEntry, cx: &Cx) {
        if applies(cx) {
            st.top = leader(cx).0;
        }
    }
    fn fires(st: &ShortLoopState, cx: &Cx) -> bool {
        if !applies(cx) || cx.region.len() < cx.cfg.count(SHORT_TOP_MIN) {
            return false;
        }
        let top = st.top;
        top < cx.cfg.count(TOP_MIN) as u32
            && top >= cx.cfg.count(SHORT_TOP_MIN) as u32
            && top as f64 / cx.calls as f64 >= cx.cfg.get(SHORT_SHARE_MIN)
    }
    fn reading(st: &ShortLoopState, _cx: &Cx) -> Reading {
        Reading {
            value: st.top as f64,
            what: None,
        }
    }
    fn case(_st: &ShortLoopState, cx: &Cx) -> Case {
        Case::of(cx.region.calls_with(&cx.region.target, leader(cx).1))
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{c, Bench};
    use super::*;
    use serde_json::json;

    #[test]
    fn eight_of_ten_fires_eight_of_twenty_does_not() {
        let mut b = Bench::<ShortLoop>::default();
        b.feed(c("glob", json!({"pattern": "*.js"})));
        b.feed(c("read", json!({"filePath": "/a"})));
        b.times(8, || c("grep", json!({"pattern": "len", "path": "/t"})));
        assert!(b.fires());
        assert_eq!(b.st.top, leader(&b.cx()).0);
        for i in 0..10 {
            b.feed(c("read", json!({ "filePath": format!("/f{i}") })));
        }
        assert!(!b.fires());
    }
}
