//! `coverage`: lines requested from one file since the last landed change (within the window),
//! over its length; flags strictly above `cover_min`, once `min_calls` calls are in the window.

use super::{find_or_add, round3, Case, Cx, Rule};
use crate::detect::region::{Entry, Obs};
use crate::detect::thresholds::{key, Key};
use crate::record::{Reading, Signal};

const COVER_MIN: usize = key("cover_min");
const MIN_CALLS: usize = key("min_calls");

pub struct Coverage;

/// One file read in the region.
pub struct File {
    key: u64,
    lines: i64,
    total: i64,
    name: Box<str>,
}

fn coverage(f: &File) -> f64 {
    f.lines as f64 / f.total.max(1) as f64
}

/// The files read in the region, first read first (a handful: a scan is cheaper than a map),
/// and the most covered one, kept as reads come and go.
#[derive(Default)]
pub struct State {
    files: Vec<File>,
    leader: Option<(f64, u64)>,
}

/// The most covered file: (coverage, key); of equals, the one first read last.
fn leader(st: &State) -> Option<(f64, u64)> {
    st.leader
}

impl State {
    fn elect(&mut self) {
        self.leader = self
            .files
            .iter()
            .map(|f| (coverage(f), f.key))
            .max_by(|a, b| a.0.total_cmp(&b.0));
    }
}

/// A read's file path as shown: relative to the session's directory when under it.
pub fn shown(c: &Obs) -> Box<str> {
    let p = c.args.file();
    match c.dir {
        Some(d) if !d.is_empty() => p
            .strip_prefix(d)
            .map(|r| r.trim_start_matches('/'))
            .unwrap_or(p),
        _ => p,
    }
    .into()
}

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
    type State = State;

    fn call(st: &mut State, c: &Obs, _cx: &Cx) {
        if let Some(r) = c.read {
            let f = find_or_add(
                &mut st.files,
                |f| f.key == r.file,
                || File {
                    key: r.file,
                    lines: 0,
                    total: r.total as i64,
                    name: shown(c),
                },
            );
            f.lines += r.lines as i64;
            f.total = r.total as i64;
            st.elect();
        }
    }
    fn left(st: &mut State, _exact: u64, _target: u64, e: &Entry, _cx: &Cx) {
        if let Some(r) = e.read {
            if let Some(i) = st.files.iter().position(|f| f.key == r.file) {
                st.files[i].lines -= r.lines as i64;
                if st.files[i].lines <= 0 {
                    st.files.remove(i);
                }
                st.elect();
            }
        }
    }
    fn landed(st: &mut State) {
        st.files.clear();
        st.leader = None;
    }
    fn fires(st: &State, cx: &Cx) -> bool {
        cx.region.len() >= cx.cfg.count(MIN_CALLS)
            && leader(st).is_some_and(|l| l.0 > cx.cfg.get(COVER_MIN))
    }
    fn reading(st: &State, _cx: &Cx) -> Reading {
        match leader(st) {
            Some((c, k)) => Reading {
                value: round3(c),
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
