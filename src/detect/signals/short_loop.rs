//! `short_loop`: a session still under `min_calls` calls that works one target at least
//! `short_top_min` times, making up `short_share_min` of its calls (under `top_min`, which `top`
//! covers). Stateless: it counts over the region, which is short while it applies.

use super::{Case, Cx, Rule};
use crate::record::{Reading, Signal};

pub struct ShortLoop;

/// (count, key) of the region's most-worked target.
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

impl Rule for ShortLoop {
    const NAME: Signal = Signal::ShortLoop;
    const KEYS: &'static [&'static str] = &["short_top_min", "short_share_min", "min_calls"];
    const ABOUT: &'static str = "a short session that works one target most of the time";
    const READING: bool = false;
    type State = ();

    fn call(_st: &mut (), _c: &crate::detect::region::Obs, _cx: &Cx) {}
    fn fires(_st: &(), cx: &Cx) -> bool {
        if cx.calls >= cx.cfg.min_calls as u64 || cx.region.len() < cx.cfg.short_top_min {
            return false;
        }
        let (top, _) = leader(cx);
        top < cx.cfg.top_min as u32
            && top >= cx.cfg.short_top_min as u32
            && top as f64 / cx.calls as f64 >= cx.cfg.short_share_min
    }
    fn reading(_st: &(), cx: &Cx) -> Reading {
        Reading {
            value: leader(cx).0 as f64,
            what: None,
        }
    }
    fn case(_st: &(), cx: &Cx) -> Case {
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
        for i in 0..10 {
            b.feed(c("read", json!({ "filePath": format!("/f{i}") })));
        }
        assert!(!b.fires());
    }
}
