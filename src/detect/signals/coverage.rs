//! `coverage`: lines requested from one file since the last landed change (within the window),
//! over its length; flags strictly above `cover_min`, once `min_calls` calls are in the window.

use super::{round3, Case, Cx, Rule};
use crate::detect::region::{Entry, Obs};
use crate::detect::target::IdMap;
use crate::record::{Reading, Signal};

pub struct Coverage;

#[derive(Default)]
pub struct State {
    /// Per file: lines requested, its length, its name as shown.
    files: IdMap<(i64, i64, Box<str>)>,
}

/// The most covered file: (coverage, key).
fn leader(st: &State) -> Option<(f64, u64)> {
    st.files
        .iter()
        .map(|(k, (lines, total, _))| (*lines as f64 / (*total).max(1) as f64, *k))
        .max_by(|a, b| a.0.total_cmp(&b.0))
}

/// A read's file path as shown: relative to the session's directory when under it.
pub fn shown(c: &Obs) -> Box<str> {
    let p = c
        .args
        .get("filePath")
        .and_then(serde_json::Value::as_str)
        .unwrap_or("");
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
    const KEYS: &'static [&'static str] = &["cover_min", "min_calls"];
    const ABOUT: &'static str =
        "lines read from one file over its length, since the last landed change";
    const WHAT: Option<&'static str> = Some("coverage_file");
    const COUNT: bool = false;
    type State = State;

    fn call(st: &mut State, c: &Obs, _cx: &Cx) {
        if let Some(r) = c.read {
            let e = st
                .files
                .entry(r.file)
                .or_insert_with(|| (0, r.total as i64, shown(c)));
            e.0 += r.lines as i64;
            e.1 = r.total as i64;
        }
    }
    fn left(st: &mut State, _exact: u64, _target: u64, e: &Entry, _cx: &Cx) {
        if let Some(r) = e.read {
            if let Some(f) = st.files.get_mut(&r.file) {
                f.0 -= r.lines as i64;
                if f.0 <= 0 {
                    st.files.remove(&r.file);
                }
            }
        }
    }
    fn fires(st: &State, cx: &Cx) -> bool {
        cx.region.len() >= cx.cfg.min_calls && leader(st).is_some_and(|l| l.0 > cx.cfg.cover_min)
    }
    fn reading(st: &State, _cx: &Cx) -> Reading {
        match leader(st) {
            Some((c, k)) => Reading {
                value: round3(c),
                what: st.files.get(&k).map(|f| f.2.to_string()),
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
