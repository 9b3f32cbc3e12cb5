//! `circling`: one file paged through `circle_passes_min` full passes since the last landed
//! change, in at least `circle_reads_min` reads, with nothing landed. Counted over the calls
//! since the last landed change (not the window), with no minimum session length, so a session
//! that only circles a file is seen on its third pass.

use super::coverage::shown;
use super::{find_or_add, round3, Case, Cx, Rule};
use crate::detect::region::{Entry, Obs};
use crate::detect::thresholds::{key, Key};
use crate::record::{Reading, Signal};

const CIRCLE_PASSES_MIN: usize = key("circle_passes_min");
const CIRCLE_READS_MIN: usize = key("circle_reads_min");

pub struct Circling;

pub struct File {
    key: u64,
    lines: u64,
    total: u32,
    reads: u32,
    name: Box<str>,
}

/// The files read since the last landed change, first read first (a handful: a scan is cheaper
/// than a map), and what they add up to, kept as reads come.
#[derive(Default)]
pub struct State {
    files: Vec<File>,
    leader: Option<(f64, u64)>,
    firing: bool,
}

fn passes(f: &File) -> f64 {
    f.lines as f64 / f.total.max(1) as f64
}

/// The file with the most passes: (passes, key); of equals, the one first read last.
fn leader(st: &State) -> Option<(f64, u64)> {
    st.leader
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
    type State = State;

    fn call(st: &mut State, c: &Obs, cx: &Cx) {
        if let Some(r) = c.read {
            let f = find_or_add(
                &mut st.files,
                |f| f.key == r.file,
                || File {
                    key: r.file,
                    lines: 0,
                    total: 0,
                    reads: 0,
                    name: shown(c),
                },
            );
            f.lines += r.lines as u64;
            f.total = r.total;
            f.reads += 1;
            // a file's length can change, so its passes can fall: judge them all again
            st.leader = st
                .files
                .iter()
                .map(|f| (passes(f), f.key))
                .max_by(|a, b| a.0.total_cmp(&b.0));
            st.firing = st.files.iter().any(|f| {
                f.reads >= cx.cfg.count(CIRCLE_READS_MIN) as u32
                    && passes(f) >= cx.cfg.get(CIRCLE_PASSES_MIN)
            });
        }
    }
    fn landed(st: &mut State) {
        st.files.clear();
        st.leader = None;
        st.firing = false;
    }
    fn fires(st: &State, _cx: &Cx) -> bool {
        st.firing
    }
    fn reading(st: &State, _cx: &Cx) -> Reading {
        match leader(st) {
            Some((p, k)) => Reading {
                value: round3(p),
                what: st
                    .files
                    .iter()
                    .find(|f| f.key == k)
                    .map(|f| f.name.to_string()),
            },
            None => Reading::default(),
        }
    }
    fn case(st: &State, cx: &Cx) -> Case {
        let Some((_, k)) = leader(st) else {
            return Case::default();
        };
        Case::of(
            cx.region
                .entries
                .iter()
                .filter(|e| e.read.is_some_and(|r| r.file == k))
                .map(Entry::at)
                .collect(),
        )
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
