//! The loop detector: a pure, incremental judge of each session's tool calls.
//!
//! Calls enter one at a time ([`Detector::call`]); each session keeps only its last `window`
//! calls and a bounded count of exact repeats, so memory grows with sessions times the window,
//! never with the length of the input. Every call re-evaluates its session, so the first flag
//! point is exact. [`Detector::verdicts`] gives one verdict per session at the end.
//!
//! Signals over the window (thresholds in [`DetectorConfig`]):
//! - dup: share of calls that repeat an earlier call exactly (tool + canonical args);
//! - top: count of the most-worked target (file + slice for reads, files + numbers for bash,
//!   pattern + path for grep/glob, the file for edits and writes);
//! - slow: one exact call repeated since the last landed change;
//! - coverage: lines requested from one file divided by its length (strictly above the bound);
//! - landed: a landed change by the session, or any descendant, within the window. Edits that
//!   undo each other cancel, and redoing an undone edit lands nothing.

pub mod cmd;
pub mod target;

use crate::config::DetectorConfig;
use crate::record::{CallRef, Expect, Session, Signal, Signals, Verdict};
use serde_json::{Map, Value};
use std::collections::{HashMap, HashSet, VecDeque};
use target::{IdMap, Keys};

/// A call as the detector needs it.
pub struct CallIn<'a> {
    pub session: &'a str,
    pub id: &'a str,
    pub t: i64,
    pub tool: &'a str,
    pub args: &'a Map<String, Value>,
    pub landed: bool,
    pub file_lines: Option<i64>,
    pub model: Option<&'a str>,
    pub cost: Option<f64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct EditSig {
    file: u32,
    old: u32,
    new: u32,
}

struct Entry {
    file: Option<(u64, u32)>,
    landed: bool,
    edit: Option<EditSig>,
    t: i64,
}

#[derive(Default)]
struct Sess {
    meta: Option<Session>,
    window: VecDeque<Entry>,
    /// The window's exact-call and target keys, apart from `window` so a scan over them reads
    /// a few contiguous cache lines (cheaper than hash probes across thousands of sessions).
    ex: VecDeque<u64>,
    tg: VecDeque<u64>,
    /// Distinct exact calls in the window.
    distinct: u32,
    /// Descriptions of targets worked at least twice (a target seen once is nobody's top).
    tdesc: IdMap<String>,
    /// How many targets have each count, so the top count is kept without a scan.
    count_hist: Vec<u32>,
    top: u32,
    /// Effective landed edits in the window, to find an undo without a scan.
    landed_edits: HashMap<EditSig, u32>,
    read_only: Option<bool>,
    files: IdMap<(i64, i64, String)>,
    own_landed: u32,
    /// Exact-call counts since the last landed change, bounded.
    cum: IdMap<u32>,
    /// Descriptions of exact calls repeated at least once.
    cdesc: IdMap<String>,
    cum_max: (u32, u64),
    undone: HashSet<EditSig>,
    /// Effective landings: (call index, cost total at that point).
    landings: Vec<(u64, f64)>,
    desc_landed_t: Option<i64>,
    tree_landed_t: Option<i64>,
    calls: u64,
    cost: f64,
    last_t: i64,
    model: Option<String>,
    flagged: bool,
    first_flag: Option<CallRef>,
}

pub struct Detector {
    cfg: DetectorConfig,
    /// Session id to its index in `sessions` (the order first seen).
    ids: HashMap<String, usize, std::hash::BuildHasherDefault<target::Fx>>,
    sessions: Vec<Sess>,
}

/// Rounded to 6 decimals; numbers too large to scale are already whole.
fn round6(x: f64) -> f64 {
    let r = (x * 1e6).round() / 1e6;
    if r.is_finite() {
        r
    } else {
        x
    }
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

impl Detector {
    pub fn new(cfg: DetectorConfig) -> Detector {
        Detector {
            cfg,
            ids: HashMap::default(),
            sessions: Vec::new(),
        }
    }

    fn index(&mut self, id: &str) -> usize {
        if let Some(&i) = self.ids.get(id) {
            return i;
        }
        let n = self.sessions.len();
        let w = self.cfg.window;
        self.sessions.push(Sess {
            window: VecDeque::with_capacity(w),
            ex: VecDeque::with_capacity(w),
            tg: VecDeque::with_capacity(w),
            count_hist: vec![0; w + 2],
            ..Sess::default()
        });
        self.ids.insert(id.to_string(), n);
        n
    }

    fn sess(&mut self, id: &str) -> &mut Sess {
        let i = self.index(id);
        &mut self.sessions[i]
    }

    fn get(&self, id: &str) -> Option<&Sess> {
        self.ids.get(id).map(|&i| &self.sessions[i])
    }

    /// Records a session's metadata. A later record for the same id replaces the earlier one.
    pub fn session(&mut self, s: Session) {
        let parent = s.parent.clone();
        let id = s.id.clone();
        let landed = {
            let st = self.sess(&id);
            st.meta = Some(s);
            st.read_only = None;
            st.tree_landed_t
        };
        if let (Some(p), Some(t)) = (parent, landed) {
            self.propagate_landing(&p, t);
        }
    }

    fn parent_of(&self, id: &str) -> Option<String> {
        self.get(id)?.meta.as_ref()?.parent.clone()
    }

    fn propagate_landing(&mut self, from: &str, t: i64) {
        let mut cur = Some(from.to_string());
        let mut guard = 0;
        while let Some(id) = cur {
            let st = self.sess(&id);
            st.desc_landed_t = Some(st.desc_landed_t.map_or(t, |x| x.max(t)));
            st.tree_landed_t = Some(st.tree_landed_t.map_or(t, |x| x.max(t)));
            cur = self.parent_of(&id);
            guard += 1;
            if guard > 1000 {
                break;
            }
        }
    }

    /// The top of a session's parent chain, as far as it is known.
    pub fn root_of(&self, id: &str) -> String {
        let mut cur = id.to_string();
        for _ in 0..1000 {
            match self.parent_of(&cur) {
                Some(p) => cur = p,
                None => break,
            }
        }
        cur
    }

    fn is_read_only(&self, st: &Sess) -> bool {
        st.read_only.unwrap_or_else(|| self.read_only_of(st))
    }

    fn read_only_of(&self, st: &Sess) -> bool {
        let Some(m) = &st.meta else { return false };
        let list = &self.cfg.read_only_agents;
        let hit = |s: &str| {
            let s = s.to_ascii_lowercase();
            list.iter().any(|k| s.contains(&k.to_ascii_lowercase()))
        };
        match m.agent.as_deref() {
            Some(a) if !a.is_empty() => hit(a),
            _ => m.title.as_deref().is_some_and(hit),
        }
    }

    /// Takes one call; returns whether the session's flag state changed with it.
    pub fn call(&mut self, c: &CallIn) -> bool {
        let window = self.cfg.window;
        let cum_cap = (window * 2).max(64);
        let keys: Keys = target::keys(c.tool, c.args);
        let si = self.index(c.session);
        let st = &mut self.sessions[si];
        st.calls += 1;
        // a cost that is not a finite amount is no cost; a sum past f64::MAX stays at f64::MAX
        // (never inf, which JSON cannot carry)
        let cost = c.cost.filter(|x| x.is_finite() && *x > 0.0).unwrap_or(0.0);
        st.cost = (st.cost + cost).min(f64::MAX);
        st.last_t = c.t;
        if let Some(m) = c.model {
            if st.model.as_deref() != Some(m) {
                st.model = Some(m.to_string());
            }
        }
        // landed, net of undone edits
        let edit = edit_sig(c);
        let mut landed = c.landed;
        if landed {
            if let Some(sig) = edit {
                let inverse = EditSig {
                    file: sig.file,
                    old: sig.new,
                    new: sig.old,
                };
                if st.undone.contains(&sig) {
                    landed = false;
                } else if let Some(e) = st
                    .landed_edits
                    .contains_key(&inverse)
                    .then(|| {
                        st.window
                            .iter_mut()
                            .rev()
                            .find(|e| e.landed && e.edit == Some(inverse))
                    })
                    .flatten()
                {
                    e.landed = false;
                    dec_sig(&mut st.landed_edits, inverse);
                    st.own_landed -= 1;
                    st.undone.insert(sig);
                    st.undone.insert(inverse);
                    if st.undone.len() > cum_cap {
                        st.undone.clear();
                    }
                    if let Some(pos) = st.landings.iter().rposition(|_| true) {
                        st.landings.remove(pos);
                    }
                    landed = false;
                }
            }
        }
        // the window
        let file = match (c.tool, c.file_lines) {
            ("read", Some(n)) if n > 0 => {
                let path = c.args.get("filePath").and_then(Value::as_str).unwrap_or("");
                Some((
                    target::hash_str(path),
                    target::lines_requested(c.args, n).min(u32::MAX as i64) as u32,
                ))
            }
            _ => None,
        };
        if st.window.len() == window {
            let old = st.window.pop_front().unwrap();
            let k0 = st.ex.pop_front().unwrap();
            if !st.ex.contains(&k0) {
                st.distinct -= 1;
            }
            let t0 = st.tg.pop_front().unwrap();
            // its count went from cnt to cnt - 1
            let cnt = st.tg.iter().filter(|&&t| t == t0).count() + 1;
            st.count_hist[cnt] -= 1;
            st.count_hist[cnt - 1] += 1;
            if st.top as usize == cnt && st.count_hist[cnt] == 0 {
                st.top -= 1;
            }
            if cnt == 1 {
                st.tdesc.remove(&t0);
            }
            if old.landed {
                if let Some(sig) = old.edit {
                    dec_sig(&mut st.landed_edits, sig);
                }
            }
            if let Some((fh, n)) = old.file {
                if let Some(f) = st.files.get_mut(&fh) {
                    f.0 -= n as i64;
                    if f.0 <= 0 {
                        st.files.remove(&fh);
                    }
                }
            }
            if old.landed {
                st.own_landed -= 1;
            }
        }
        if !st.ex.contains(&keys.exact) {
            st.distinct += 1;
        }
        st.ex.push_back(keys.exact);
        let dir = st.meta.as_ref().and_then(|m| m.directory.as_deref());
        let cnt = st.tg.iter().filter(|&&t| t == keys.target).count() + 1;
        st.tg.push_back(keys.target);
        if st.count_hist.len() <= cnt {
            st.count_hist.resize(cnt + 1, 0);
        }
        st.count_hist[cnt - 1] = st.count_hist[cnt - 1].saturating_sub(1);
        st.count_hist[cnt] += 1;
        st.top = st.top.max(cnt as u32);
        // described only once worked twice: a target seen once is nobody's top target
        if cnt == 2 && !st.tdesc.contains_key(&keys.target) {
            st.tdesc
                .insert(keys.target, target::describe(c.tool, c.args, dir));
        }
        if let (Some((fh, n)), Some(total)) = (file, c.file_lines) {
            let e = st.files.entry(fh).or_insert_with(|| {
                let p = c.args.get("filePath").and_then(Value::as_str).unwrap_or("");
                let shown = match dir {
                    Some(d) => p
                        .strip_prefix(d)
                        .map(|r| r.trim_start_matches('/'))
                        .unwrap_or(p),
                    None => p,
                };
                (0, total, shown.to_string())
            });
            e.0 += n as i64;
            e.1 = total;
        }
        if landed {
            st.own_landed += 1;
            if let Some(sig) = edit {
                *st.landed_edits.entry(sig).or_insert(0) += 1;
            }
            st.landings.push((st.calls, st.cost));
            if st.landings.len() > 64 {
                st.landings.drain(..32);
            }
            st.cum.clear();
            st.cdesc.clear();
            st.cum_max = (0, 0);
        } else {
            if st.cum.len() >= cum_cap && !st.cum.contains_key(&keys.exact) {
                st.cum.retain(|_, v| *v > 1);
                if st.cum.len() >= cum_cap {
                    st.cum.clear();
                    st.cum_max = (0, 0);
                }
                let cum = &st.cum;
                st.cdesc.retain(|k, _| cum.contains_key(k));
            }
            let e = st.cum.entry(keys.exact).or_insert(0);
            *e += 1;
            let n = *e;
            if n == 2 {
                st.cdesc
                    .insert(keys.exact, target::describe(c.tool, c.args, dir));
            }
            if n > st.cum_max.0 {
                st.cum_max = (n, keys.exact);
            }
        }
        st.window.push_back(Entry {
            file,
            landed,
            edit,
            t: c.t,
        });
        if landed {
            st.tree_landed_t = Some(st.tree_landed_t.map_or(c.t, |x| x.max(c.t)));
            if let Some(p) = self.parent_of(c.session) {
                self.propagate_landing(&p, c.t);
            }
        }
        let st = &self.sessions[si];
        let ro = self.is_read_only(st);
        let flagged = self.flagged(st);
        let st = &mut self.sessions[si];
        st.read_only = Some(ro);
        let changed = flagged != st.flagged;
        st.flagged = flagged;
        if flagged && st.first_flag.is_none() {
            st.first_flag = Some(CallRef {
                index: st.calls,
                t: c.t,
                id: c.id.to_string(),
            });
        }
        changed
    }

    fn landed_in_window(st: &Sess) -> bool {
        st.own_landed > 0
            || match (st.desc_landed_t, st.window.front()) {
                (Some(t), Some(first)) => t >= first.t,
                (Some(_), None) => true,
                _ => false,
            }
    }

    /// The flag decision alone, cheap enough for every call.
    fn flagged(&self, st: &Sess) -> bool {
        let n = st.window.len().max(1);
        let dup = (st.window.len() - st.distinct as usize) as f64 / n as f64;
        let top = st.top;
        let slow = st.cum_max.0;
        let coverage = st
            .files
            .values()
            .map(|(lines, total, _)| *lines as f64 / (*total).max(1) as f64)
            .fold(0.0, f64::max);
        self.reasons(st, dup, top, slow, coverage) != 0
    }

    /// Applies the rules to a session's current window, with the signals that decided.
    fn judge(&self, st: &Sess) -> (bool, Vec<Signal>, Signals) {
        let n = st.window.len().max(1);
        let dup = (st.window.len() - st.distinct as usize) as f64 / n as f64;
        // (count, last position) per target; ties go to the latest
        let mut counts: IdMap<(u32, usize)> = IdMap::default();
        for (i, t) in st.tg.iter().enumerate() {
            let e = counts.entry(*t).or_insert((0, 0));
            e.0 += 1;
            e.1 = i;
        }
        let (top, top_target) = counts
            .iter()
            .max_by_key(|(_, v)| **v)
            .map(|(k, v)| (v.0, st.tdesc.get(k).cloned()))
            .unwrap_or((0, None));
        let (slow, slow_call) = match st.cum.get(&st.cum_max.1) {
            Some(&n) if st.cum_max.0 > 0 => (n, st.cdesc.get(&st.cum_max.1).cloned()),
            _ => (0, None),
        };
        let (coverage, coverage_file) = st
            .files
            .values()
            .map(|(lines, total, name)| (*lines as f64 / (*total).max(1) as f64, name))
            .max_by(|a, b| a.0.total_cmp(&b.0))
            .map(|(c, f)| (c, Some(f.clone())))
            .unwrap_or((0.0, None));
        let bits = self.reasons(st, dup, top, slow, coverage);
        let reasons: Vec<Signal> = Signal::ALL
            .iter()
            .enumerate()
            .filter(|(i, _)| bits & (1 << i) != 0)
            .map(|(_, r)| *r)
            .collect();
        let mut signals = Signals::default();
        signals.set(Signal::Dup, round3(dup), None);
        signals.set(Signal::Top, top as f64, top_target);
        signals.set(Signal::Slow, slow as f64, slow_call);
        signals.set(Signal::Coverage, round3(coverage), coverage_file);
        (!reasons.is_empty(), reasons, signals)
    }

    /// The rules, as a bit set over [`Signal::ALL`] (no allocation: this runs at every call).
    fn reasons(&self, st: &Sess, dup: f64, top: u32, slow: u32, coverage: f64) -> u8 {
        let cfg = &self.cfg;
        let big = st.calls >= cfg.min_calls as u64;
        let mut r = 0u8;
        let mut set = |i: usize, on: bool| {
            if on {
                r |= 1 << i;
            }
        };
        if self.is_read_only(st) {
            set(1, top >= cfg.top_min_ro as u32);
            set(2, slow >= cfg.cum_min as u32);
            set(3, big && coverage > cfg.cover_min);
        } else if !Self::landed_in_window(st) {
            set(0, big && dup >= cfg.dup_min);
            set(1, top >= cfg.top_min as u32);
            set(2, slow >= cfg.cum_min as u32);
            set(3, big && coverage > cfg.cover_min);
            set(
                4,
                !big && top < cfg.top_min as u32
                    && top >= cfg.short_top_min as u32
                    && top as f64 / st.calls as f64 >= cfg.short_share_min,
            );
        }
        r
    }

    /// The verdict on one session now.
    pub fn verdict(&self, id: &str) -> Option<Verdict> {
        let st = self.get(id)?;
        let (flagged, reasons, signals) = self.judge(st);
        let meta = st.meta.as_ref();
        let (calls_since, cost_since) = match st.landings.last() {
            Some(&(i, c)) => (st.calls - i, st.cost - c),
            None => (st.calls, st.cost),
        };
        let expect = meta.and_then(|m| m.expect);
        let ok = expect.map(|e| match e {
            Expect::Flag => {
                flagged
                    && match (meta.and_then(|m| m.flag_after), &st.first_flag) {
                        (Some(after), Some(f)) => f.t >= after,
                        _ => true,
                    }
            }
            Expect::NoFlag => st.first_flag.is_none(),
        });
        Some(Verdict {
            session: id.to_string(),
            root: self.root_of(id),
            parent: meta.and_then(|m| m.parent.clone()),
            agent: meta.and_then(|m| m.agent.clone()),
            title: meta.and_then(|m| m.title.clone()),
            read_only: self.is_read_only(st),
            calls: st.calls,
            flagged,
            reasons,
            signals,
            landed_in_window: Self::landed_in_window(st),
            calls_since_landed: calls_since,
            cost_since_landed: round6(cost_since),
            first_flag: st.first_flag.clone(),
            model: st
                .model
                .clone()
                .or_else(|| meta.and_then(|m| m.model.clone())),
            t: (st.calls > 0).then_some(st.last_t),
            source: meta.and_then(|m| m.source.clone()),
            expect,
            ok,
            ..Verdict::default()
        })
    }

    /// Every session seen, in the order first seen.
    pub fn verdicts(&self) -> Vec<Verdict> {
        let mut ids: Vec<(&String, usize)> = self.ids.iter().map(|(k, &i)| (k, i)).collect();
        ids.sort_by_key(|x| x.1);
        ids.into_iter()
            .filter_map(|(id, _)| self.verdict(id))
            .collect()
    }

    /// Session metadata, when a record arrived.
    pub fn meta(&self, id: &str) -> Option<&Session> {
        self.get(id)?.meta.as_ref()
    }
}

fn dec_sig(m: &mut HashMap<EditSig, u32>, k: EditSig) {
    if let Some(v) = m.get_mut(&k) {
        *v -= 1;
        if *v == 0 {
            m.remove(&k);
        }
    }
}

fn edit_sig(c: &CallIn) -> Option<EditSig> {
    if c.tool != "edit" {
        return None;
    }
    let s = |k: &str| {
        c.args
            .get(k)
            .and_then(Value::as_str)
            .map(|v| target::hash_str(v) as u32)
    };
    Some(EditSig {
        file: s("filePath")?,
        old: s("oldString")?,
        new: s("newString")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    struct Feed {
        d: Detector,
        n: i64,
    }

    impl Feed {
        fn new() -> Feed {
            Feed {
                d: Detector::new(DetectorConfig::default()),
                n: 0,
            }
        }
        fn session(&mut self, id: &str, parent: Option<&str>, agent: &str) {
            self.d.session(Session {
                id: id.into(),
                parent: parent.map(String::from),
                agent: Some(agent.into()),
                ..Session::default()
            });
        }
        fn call(&mut self, s: &str, tool: &str, args: Value, landed: bool, lines: Option<i64>) {
            self.n += 1;
            let a = args.as_object().unwrap().clone();
            self.d.call(&CallIn {
                session: s,
                id: &format!("prt_{}", self.n),
                t: self.n * 1000,
                tool,
                args: &a,
                landed,
                file_lines: lines,
                model: Some("p/m"),
                cost: Some(0.01),
            });
        }
        fn v(&self, s: &str) -> Verdict {
            self.d.verdict(s).unwrap()
        }
    }

    #[test]
    fn the_kept_top_count_always_equals_a_recount() {
        let mut f = Feed::new();
        f.session("s", None, "build");
        let mut x: u64 = 7;
        for _ in 0..2000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let file = format!("/f{}", (x >> 33) % 9);
            f.call("s", "read", json!({ "filePath": file }), false, Some(100));
            let st = f.d.get("s").unwrap();
            let mut counts = std::collections::HashMap::new();
            for t in &st.tg {
                *counts.entry(*t).or_insert(0u32) += 1;
            }
            let recount = counts.values().copied().max().unwrap_or(0);
            let distinct = st.ex.iter().collect::<std::collections::HashSet<_>>().len();
            assert_eq!(st.distinct as usize, distinct);
            assert_eq!(st.top, recount);
        }
    }

    #[test]
    fn fourteen_repeats_in_sixteen_calls_is_a_loop() {
        let mut f = Feed::new();
        f.session("s", None, "build");
        f.call("s", "glob", json!({"pattern": "*.js"}), false, None);
        f.call("s", "read", json!({"filePath": "/a"}), false, Some(10));
        for _ in 0..14 {
            f.call(
                "s",
                "bash",
                json!({"command": "python3 check.py"}),
                false,
                None,
            );
        }
        let v = f.v("s");
        assert!(v.flagged);
        assert_eq!(v.reasons, [Signal::Top]);
        // the short-loop rule fired first: 8 repeats in 10 calls
        assert_eq!(v.first_flag.unwrap().index, 10);
    }

    #[test]
    fn short_healthy_session_with_a_few_rereads_is_not_flagged() {
        let mut f = Feed::new();
        f.session("s", None, "build");
        for i in 0..3 {
            f.call("s", "read", json!({"filePath": "/s.py"}), false, Some(12));
            f.call(
                "s",
                "bash",
                json!({"command": format!("python3 s.py {i}")}),
                false,
                None,
            );
        }
        assert!(!f.v("s").flagged);
        assert!(f.v("s").first_flag.is_none());
    }

    #[test]
    fn edits_that_undo_each_other_are_not_progress() {
        let mut f = Feed::new();
        f.session("s", None, "build");
        let ab = json!({"filePath": "/n.js", "oldString": "sha1:aaa", "newString": "sha1:bbb"});
        let ba = json!({"filePath": "/n.js", "oldString": "sha1:bbb", "newString": "sha1:aaa"});
        f.call("s", "edit", ab.clone(), true, None);
        assert!(f.v("s").landed_in_window);
        f.call("s", "edit", ba.clone(), true, None);
        assert!(!f.v("s").landed_in_window, "the undo cancels the edit");
        f.call("s", "edit", ab, true, None);
        assert!(
            !f.v("s").landed_in_window,
            "redoing an undone edit is no progress"
        );
        assert_eq!(f.v("s").calls_since_landed, 3);
    }

    #[test]
    fn a_subagents_landing_credits_its_parent_not_the_reverse() {
        let mut f = Feed::new();
        f.session("p", None, "build");
        f.session("c", Some("p"), "general");
        for _ in 0..13 {
            f.call("p", "read", json!({"filePath": "/x"}), false, Some(5));
        }
        assert!(f.v("p").flagged);
        f.call(
            "c",
            "write",
            json!({"filePath": "/y", "content": "sha1:1"}),
            true,
            None,
        );
        let p = f.v("p");
        assert!(p.landed_in_window);
        assert!(!p.flagged, "{p:?}");
        assert_eq!(f.v("c").root, "p");
    }

    #[test]
    fn read_only_agents_flag_on_top_alone() {
        let mut f = Feed::new();
        f.session("e", None, "explore");
        for _ in 0..8 {
            f.call("e", "read", json!({"filePath": "/gone.md"}), false, None);
            f.call("e", "glob", json!({"pattern": "docs/*"}), false, None);
        }
        let v = f.v("e");
        assert!(v.read_only);
        assert!(v.flagged);
        assert_eq!(v.signals.value(Signal::Top), 8.0);
    }

    #[test]
    fn coverage_exactly_at_the_bound_does_not_flag() {
        // regression for the old >= comparison: 4.0x is the boundary, not a flag
        let mut f = Feed::new();
        f.session("s", None, "plan");
        for i in 0..40 {
            let off = 1 + i * 2;
            f.call(
                "s",
                "read",
                json!({"filePath": "/spec.md", "offset": off, "limit": 10}),
                false,
                Some(100),
            );
        }
        let v = f.v("s");
        assert_eq!(v.signals.value(Signal::Coverage), 4.0);
        assert!(!v.flagged, "{v:?}");
        f.call(
            "s",
            "read",
            json!({"filePath": "/spec.md", "offset": 90, "limit": 10}),
            false,
            Some(100),
        );
        let v = f.v("s");
        assert_eq!(v.reasons, [Signal::Coverage]);
    }
}
