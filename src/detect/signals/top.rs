//! `top`: how often the most-worked target (file and slice for reads, files and numbers for bash,
//! pattern and path for grep and glob, the file for edits) was worked since the last landed
//! change, within the window. `top_min`, or `top_min_ro` for read-only agents.

use super::thresholds::{key, Key};
use super::{Case, Cx, Rule};
use crate::detect::region::{Obs, RegionEntry};
use crate::detect::target::IdMap;
use crate::record::{Reading, Signal};

const TOP_MIN: usize = key("top_min");
const TOP_MIN_RO: usize = key("top_min_ro");

pub struct Top;

#[derive(Default, Clone)]
pub struct TopState {
    /// How many targets have each count, so the top count is kept without a scan.
    count_hist: Vec<u32>,
    top: u32,
    /// Descriptions of targets worked at least twice (a target seen once is nobody's top).
    described: IdMap<Box<str>>,
}

impl TopState {
    pub fn top(&self) -> u32 {
        self.top
    }
}

fn limit(cx: &Cx) -> u32 {
    (if cx.read_only {
        cx.cfg.count(TOP_MIN_RO)
    } else {
        cx.cfg.count(TOP_MIN)
    }) as u32
}

/// The most-worked target of the region: (count, key); ties go to the latest.
fn leader(cx: &Cx) -> Option<(u32, u64)> {
    let tg = &cx.region.target;
    let mut best: Option<(u32, u64, usize)> = None;
    for (i, &k) in tg.iter().enumerate().rev() {
        if best.is_some_and(|b| b.1 == k) {
            continue;
        }
        let n = tg.iter().filter(|&&x| x == k).count() as u32;
        if best.map_or(true, |b| n > b.0) {
            best = Some((n, k, i));
        }
    }
    best.map(|b| (b.0, b.1))
}

impl Rule for Top {
    const NAME: Signal = Signal::Top;
    const KEYS: &'static [Key] = &[
        Key::count(
            "top_min",
            12,
            "Count of the most-worked target that flags a normal agent",
        ),
        Key::count(
            "top_min_ro",
            8,
            "Count of the most-worked target that flags a read-only agent",
        ),
    ];
    const ABOUT: &'static str = "count of the most-worked target since the last landed change";
    const WHAT: Option<&'static str> = Some("top_target");
    type State = TopState;

    fn call(st: &mut TopState, c: &Obs, cx: &Cx) {
        let cnt = cx.region.target_n as usize;
        if st.count_hist.len() <= cnt {
            st.count_hist.resize(cnt + 1, 0);
        }
        st.count_hist[cnt - 1] = st.count_hist[cnt - 1].saturating_sub(1);
        st.count_hist[cnt] += 1;
        st.top = st.top.max(cnt as u32);
        if cnt == 2 && !st.described.contains_key(&c.target) {
            st.described.insert(c.target, c.describe());
        }
    }
    fn landed(st: &mut TopState) {
        // emptied in place: a session that landed once lands again
        st.count_hist.clear();
        st.top = 0;
        st.described.clear();
    }
    fn left(st: &mut TopState, _exact: u64, target: u64, _e: &RegionEntry, cx: &Cx) {
        // its count went from cnt to cnt - 1
        let cnt = cx.region.count_target(target) + 1;
        st.count_hist[cnt] -= 1;
        st.count_hist[cnt - 1] += 1;
        if st.top as usize == cnt && st.count_hist[cnt] == 0 {
            st.top -= 1;
        }
        if cnt == 2 {
            st.described.remove(&target);
        }
    }
    fn fires(st: &TopState, cx: &Cx) -> bool {
        st.top >= limit(cx)
    }
    fn reading(st: &TopState, cx: &Cx) -> Reading {
        let what = leader(cx).and_then(|(_, k)| st.described.get(&k).map(|d| d.to_string()));
        Reading {
            value: st.top as f64,
            what,
        }
    }
    fn case(_st: &TopState, cx: &Cx) -> Case {
        match leader(cx) {
            Some((_, k)) => Case::of(cx.region.calls_with(&cx.region.target, k)),
            None => Case::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{c, Bench};
    use super::*;
    use serde_json::json;

    #[test]
    fn the_kept_top_count_always_equals_a_recount() {
        let mut b = Bench::<Top>::default();
        let mut x: u64 = 7;
        let mut file = String::new();
        for _ in 0..4000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            // runs of one file (the region counts those without a scan) and jumps between nine
            if file.is_empty() || (x >> 40) % 10 < 4 {
                file = format!("/f{}", (x >> 33) % 9);
            }
            b.feed(c("read", json!({ "filePath": &file })));
            let last = *b.region.target.back().unwrap();
            let n = b.region.target.iter().filter(|&&t| t == last).count();
            assert_eq!(b.region.target_n as usize, n);
            let cx = b.region.target.iter().fold(
                std::collections::HashMap::<u64, u32>::new(),
                |mut m, t| {
                    *m.entry(*t).or_default() += 1;
                    m
                },
            );
            assert_eq!(b.st.top, cx.values().copied().max().unwrap_or(0));
        }
    }

    #[test]
    fn twelve_reads_of_one_file_fire_and_name_it() {
        let mut b = Bench::<Top>::default();
        for i in 0..12 {
            b.feed(c("read", json!({"filePath": "/w/nav.js"})));
            b.feed(c("grep", json!({ "pattern": format!("p{i}") })));
        }
        assert!(b.fires());
        assert_eq!(b.reading().value, 12.0);
        assert_eq!(b.reading().what.as_deref(), Some("read /w/nav.js"));
        let case = b.case();
        assert_eq!(case.calls.len(), 12);
        assert_eq!(case.start.unwrap().index, 1);
        b.land();
        assert!(!b.fires());
    }

    #[test]
    fn hard_negative_a_sweep_of_new_searches_each_with_a_new_answer_is_no_repeat() {
        // OpenHands sweeping a tree with `find | xargs grep -l`, a new pattern each time: the
        // calls share a target, but each answer is new. Only answers seen before repeat
        static WORDS: [&str; 30] = [
            "compile", "regexp", "rgx", "pattern", "regex", "match", "search", "sub", "split",
            "escape", "flags", "group", "span", "finditer", "fullmatch", "purge", "template",
            "verbose", "dotall", "ignorecase", "multiline", "unicode", "ascii", "locale", "debug",
            "error", "scanner", "sre", "parse", "csv",
        ];
        let mut d = crate::detect::Detector::new(Default::default());
        fn feed(d: &mut crate::detect::Detector, n: usize, out: &str) {
            let text = json!({ "command": format!("find . -name '*.py' | xargs grep -l {}", WORDS[n % 30]) })
                .to_string();
            let a: crate::detect::target::ArgList = serde_json::from_str(&text).unwrap();
            let id = format!("prt_{n}");
            d.call(&crate::detect::CallIn {
                session: "s",
                id: &id,
                t: n as i64,
                tool: "bash",
                args: &a,
                status: "completed",
                landed: false,
                exit: None,
                file_lines: None,
                model: None,
                cost: None,
                out: Some(out),
            });
        }
        for n in 0..30 {
            feed(&mut d, n, &format!("sha1:new{n}"));
        }
        let v = d.verdict("s").unwrap();
        assert!(!v.flagged, "{:?}", v.reasons);
        assert_eq!(v.signals.0[&Signal::Top].value, 1.0);
        // the same sweep coming back with the same answers repeats its target
        for n in 30..42 {
            feed(&mut d, n, &format!("sha1:new{}", n % 30));
        }
        let v = d.verdict("s").unwrap();
        assert!(v.reasons.contains(&Signal::Top), "{:?}", v.reasons);
        assert_eq!(v.signals.0[&Signal::Top].value, 13.0);

        // different searches that each find nothing (one same answer, no exit code): trying
        // things, until the searches themselves come back
        let mut d = crate::detect::Detector::new(Default::default());
        for n in 0..20 {
            feed(&mut d, n, "sha1:nothing");
        }
        let v = d.verdict("s").unwrap();
        assert!(!v.flagged, "{:?}", v.reasons);
        assert_eq!(v.signals.0[&Signal::Top].value, 1.0);
        for n in 20..31 {
            feed(&mut d, n % 20, "sha1:nothing");
        }
        let v = d.verdict("s").unwrap();
        assert_eq!(v.signals.0[&Signal::Top].value, 12.0);
        assert!(v.reasons.contains(&Signal::Top), "{:?}", v.reasons);
    }
}
