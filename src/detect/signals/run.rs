//! `run`: the same exact call, back to back, `run_min` times since the last landed change.
//! A call whose known output differs from the previous one's is polling, not a repeat: it
//! starts a new run. An unknown output (null) proves nothing either way.

use super::thresholds::{key, Key};
use super::{Case, Cx, Rule};
use crate::detect::region::Obs;
use crate::record::{Reading, Signal};

const RUN_MIN: usize = key("run_min");

pub struct Run;

#[derive(Default, Clone)]
pub struct RunState {
    exact: u64,
    out: Option<u64>,
    len: u32,
    /// Call index of the run's first call.
    start: u64,
    described: Option<Box<str>>,
}

impl Rule for Run {
    const NAME: Signal = Signal::Run;
    const KEYS: &'static [Key] = &[Key::count(
        "run_min",
        5,
        "Identical calls back to back that flag",
    )];
    const ABOUT: &'static str = "one exact call repeated back to back, its output unchanged";
    const WHAT: Option<&'static str> = Some("run_call");
    type State = RunState;

    fn call(st: &mut RunState, c: &Obs, _cx: &Cx) {
        let polled = matches!((st.out, c.out), (Some(a), Some(b)) if a != b);
        if st.len > 0 && st.exact == c.exact && !polled {
            st.len += 1;
            if st.len == 2 {
                st.described = Some(c.describe());
            }
        } else {
            st.exact = c.exact;
            st.len = 1;
            st.start = c.index;
            st.described = None;
        }
        if c.out.is_some() {
            st.out = c.out;
        }
    }
    fn fires(st: &RunState, cx: &Cx) -> bool {
        st.len >= cx.cfg.count(RUN_MIN) as u32
    }
    fn reading(st: &RunState, _cx: &Cx) -> Reading {
        Reading {
            value: st.len as f64,
            what: st.described.as_deref().map(String::from),
        }
    }
    fn case(st: &RunState, cx: &Cx) -> Case {
        Case::of(cx.region.calls_from(st.start))
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{c, Bench, C};
    use super::*;
    use serde_json::json;

    fn readme(out: Option<u64>) -> C {
        C {
            out,
            ..c("read", json!({"filePath": "/w/README.md"}))
        }
    }

    #[test]
    fn the_fifth_identical_call_in_a_row_fires() {
        let mut b = Bench::<Run>::default();
        b.feed(c("glob", json!({"pattern": "*"})));
        b.times(4, || readme(Some(7)));
        assert!(!b.fires());
        b.feed(readme(None));
        assert!(b.fires());
        assert_eq!(b.reading().value, 5.0);
        assert_eq!(b.case().start.unwrap().index, 2);
        assert_eq!(b.case().calls.len(), 5);
    }

    #[test]
    fn polling_with_changing_output_is_no_run() {
        let mut b = Bench::<Run>::default();
        for i in 0..10 {
            b.feed(readme(Some(i)));
        }
        assert!(!b.fires());
        assert_eq!(b.reading().value, 1.0);
    }

    #[test]
    fn anything_between_breaks_the_run() {
        let mut b = Bench::<Run>::default();
        for i in 0..10 {
            b.feed(readme(None));
            if i % 4 == 3 {
                b.feed(c("grep", json!({ "pattern": "x" })));
            }
        }
        assert!(!b.fires());
    }
}
