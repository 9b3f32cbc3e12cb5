//! `circling`: one file paged through `circle_passes_min` full passes since the last landed
//! change, in at least `circle_reads_min` reads, with nothing landed. Counted over the calls
//! since the last landed change (not the window), with no minimum session length, so a session
//! that only circles a file is seen on its third pass.

use super::files::Files;
use super::thresholds::{key, Key};
use super::{Case, Cx, Rule};
use crate::detect::region::Obs;
use crate::record::{Reading, Signal};

const CIRCLE_PASSES_MIN: usize = key("circle_passes_min");
const CIRCLE_READS_MIN: usize = key("circle_reads_min");

pub struct Circling;

/// The files read since the last landed change (their lines over their length are passes), and
/// whether one of them has been circled.
#[derive(Default, Clone)]
pub struct CirclingState {
    files: Files,
    firing: bool,
}

impl Rule for Circling {
    const NAME: Signal = Signal::Circling;
    const KEYS: &'static [Key] = &[
        Key::above0(
            "circle_passes_min",
            3.0,
            "full passes over a file",
            "Full passes over one file since the last landed change that flag ...",
        ),
        Key::count("circle_reads_min", 12, "... in at least this many reads"),
    ];
    const ABOUT: &'static str =
        "full passes over one file in many reads, since the last landed change";
    const WHAT: Option<&'static str> = Some("circling_file");
    const COUNT: bool = false;
    type State = CirclingState;

    fn call(st: &mut CirclingState, c: &Obs, cx: &Cx) {
        if let Some(r) = c.read {
            st.files.add(c, r);
            st.firing = st.files.files.iter().any(|f| {
                f.reads >= cx.cfg.count(CIRCLE_READS_MIN) as u32
                    && f.ratio() >= cx.cfg.get(CIRCLE_PASSES_MIN)
            });
        }
    }
    fn landed(st: &mut CirclingState) {
        st.files.clear();
        st.firing = false;
    }
    fn fires(st: &CirclingState, _cx: &Cx) -> bool {
        st.firing
    }
    fn reading(st: &CirclingState, _cx: &Cx) -> Reading {
        st.files.reading()
    }
    fn case(st: &CirclingState, cx: &Cx) -> Case {
        st.files.case(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{read, Bench};
    use super::*;

    #[test]
    fn the_third_paged_pass_fires_three_whole_reads_do_not() {
        let mut b = Bench::<Circling>::default();
        for i in 0..7 {
            b.feed(read("/w/guide.md", 1 + 43 * i, 43, 300));
        }
        for i in 0..6 {
            b.feed(read("/w/guide.md", 1 + 50 * i, 50, 300));
        }
        for i in 0..7 {
            b.feed(read("/w/guide.md", 1 + 40 * i, 40, 300));
        }
        assert!(!b.fires(), "{}", b.reading().value);
        b.feed(read("/w/guide.md", 281, 40, 300));
        assert!(b.fires());
        assert_eq!(b.reading().value, 3.0);
        assert_eq!(b.case().calls.len(), 21);
        let mut b = Bench::<Circling>::default();
        for _ in 0..3 {
            b.feed(read("/w/rst.py", 1, 2000, 300));
        }
        assert!(!b.fires());
    }

    #[test]
    fn shape_8_paging_passes_through_shifting_windows_fire_on_the_third_pass() {
        // three passes over a 300-line file in 21 reads of 45 lines, each pass's windows shifted
        // 5 lines on from the last one's, nothing landed
        let mut b = Bench::<Circling>::default();
        let mut fired_at = None;
        for pass in 0..3 {
            for k in 0..7 {
                b.feed(read("/w/ledger.py", 1 + 43 * k + 5 * pass, 45, 300));
                if fired_at.is_none() && b.fires() {
                    fired_at = Some(b.calls);
                }
            }
        }
        // 6 x 45 lines a pass and a last window cut short by the file's end (42, 37, 32 lines):
        // 889 lines after 20 reads, 921 (3.07 passes) after the 21st
        assert_eq!(fired_at, Some(21));
        assert_eq!(b.reading().value, 3.07);
        assert_eq!(b.reading().what.as_deref(), Some("/w/ledger.py"));
        assert_eq!(b.case().calls.len(), 21);
    }

    #[test]
    fn hard_negative_a_new_role_re_reading_once_the_windows_just_read_does_not_fire() {
        // a planner pages through the file once, then the builder it hands over to reads the
        // same windows once more: two passes, not a circle
        let mut b = Bench::<Circling>::default();
        for _role in 0..2 {
            for k in 0..7 {
                b.feed(read("/w/ledger.py", 1 + 43 * k, 43, 300));
            }
        }
        assert!(!b.fires());
        assert_eq!(b.reading().value, 2.0);
        let mut b = Bench::<super::super::coverage::Coverage>::default();
        for _role in 0..2 {
            for k in 0..7 {
                b.feed(read("/w/ledger.py", 1 + 43 * k, 43, 300));
            }
        }
        assert!(!b.fires());
        assert_eq!(b.reading().value, 2.0);
    }
}
