//! The loop detector: a pure, incremental judge of each session's tool calls.
//!
//! Calls enter one at a time ([`Detector::call`]). Each session keeps its calls since its last
//! landed change (at most `window`, see [`region`]) and each signal's own small state (see
//! [`signals`]: one file per signal, registered in one list), so memory grows with sessions
//! times the window, never with the length of the input. Every call re-evaluates its session,
//! so the first flag point is exact. [`Detector::verdicts`] gives one [`Verdict`] per session at
//! the end, with the evidence (where the loop started, the last landed change, the repeats) and
//! the digest of its last calls.
//!
//! Progress is judged since the last landed change, not per window: a landed change (by the
//! session or any descendant; edits that undo each other cancel) empties the region and ends
//! every loop but one (`same_failure`: edits that land but leave a check failing the same way).
//! A call seen before (same id, fed twice) is skipped.

pub mod cmd;
pub mod progress;
pub mod region;
pub mod signals;
pub mod target;
pub mod thresholds;

use crate::record::{CallRef, Evidence, Expect, Session, Verdict, DIGEST_CALLS};
use progress::{EditSig, Progress};
use region::{Obs, Read, Region};
use signals::{Cx, States};
use std::collections::{HashMap, VecDeque};
use thresholds::DetectorConfig;

/// A call as the detector needs it.
pub struct CallIn<'a> {
    pub session: &'a str,
    pub id: &'a str,
    pub t: i64,
    pub tool: &'a str,
    pub args: &'a target::ArgList<'a>,
    /// `pending`, `running`, `completed` or `error`.
    pub status: &'a str,
    pub landed: bool,
    pub exit: Option<i64>,
    pub file_lines: Option<i64>,
    pub model: Option<&'a str>,
    pub cost: Option<f64>,
    /// `sha1:...` of the output, if known.
    pub out: Option<&'a str>,
}

/// Call ids remembered per session to recognise a call fed twice.
const RECENT_IDS: usize = 16;

/// What a verdict needs of a session record (not its pass-through fields: liveness evidence is
/// read by `cmd`, and a session record's other fields would cost every session they sit in).
#[derive(Default)]
struct Meta {
    parent: Option<Box<str>>,
    agent: Option<Box<str>>,
    title: Option<Box<str>>,
    directory: Option<Box<str>>,
    source: Option<Box<str>>,
    model: Option<Box<str>>,
    sources: Vec<String>,
    expect: Option<Expect>,
    flag_after: Option<i64>,
    flag_by: Option<i64>,
}

fn boxed(s: Option<String>) -> Option<Box<str>> {
    s.map(String::into_boxed_str)
}

fn owned(s: &Option<Box<str>>) -> Option<String> {
    s.as_deref().map(String::from)
}

impl From<Session> for Meta {
    fn from(s: Session) -> Meta {
        Meta {
            parent: boxed(s.parent),
            agent: boxed(s.agent),
            title: boxed(s.title),
            directory: boxed(s.directory),
            source: boxed(s.source),
            model: boxed(s.model),
            sources: s.sources,
            expect: s.expect,
            flag_after: s.flag_after,
            flag_by: s.flag_by,
        }
    }
}

/// A flagged session's first flag, and its loop (only flagged sessions carry it).
#[derive(Default)]
struct Flag {
    first: Option<CallRef>,
    /// The case as it stood at the first flag.
    first_case: Option<Evidence>,
    /// Where the current loop started, fixed when it is first flagged; a landing clears it.
    loop_start: Option<CallRef>,
}

/// The latest [`RECENT_IDS`] calls' id hashes and times, in place: a ring, the oldest at
/// `head` once it is full. The hashes sit apart from the times, so the check reads two cache
/// lines of hashes, and one time.
#[derive(Default)]
struct Recent {
    ids: [u64; RECENT_IDS],
    ts: [i64; RECENT_IDS],
    len: u8,
    head: u8,
}

#[derive(Default)]
struct SessionState {
    meta: Option<Box<Meta>>,
    read_only: bool,
    calls: u64,
    cost: f64,
    last_t: i64,
    model: Option<Box<str>>,
    /// The hash of `model`.
    model_h: u64,
    /// Made at the first landing: most sessions of a busy day never land a change (the
    /// 200,000-session bench: a session state of 1,064 bytes fell in mimalloc's next size
    /// class, 1,280; without it, 960 fit the 1,024 class).
    progress: Option<Box<Progress>>,
    region: Region,
    signals: States,
    /// The last calls, one line each, for the digest.
    digest: Digest,
    /// The latest calls' ids, to skip a call sent twice.
    recent: Recent,
    /// The session's id.
    id: region::Id,
    flagged: bool,
    flag: Option<Box<Flag>>,
}

impl SessionState {
    fn cx<'a>(&'a self, cfg: &'a DetectorConfig) -> Cx<'a> {
        Cx {
            region: &self.region,
            calls: self.calls,
            read_only: self.read_only,
            cfg,
        }
    }

    /// Whether a call with this id was seen: its id among the latest, or older than all of them.
    fn seen(&mut self, id: &str, t: i64) -> bool {
        let h = target::hash_str(id);
        let r = &mut self.recent;
        let (n, head) = (r.len as usize, r.head as usize);
        if r.ids[..n].contains(&h) || (n == RECENT_IDS && t < r.ts[head]) {
            return true;
        }
        if n == RECENT_IDS {
            (r.ids[head], r.ts[head]) = (h, t);
            r.head = ((head + 1) % RECENT_IDS) as u8;
        } else {
            (r.ids[n], r.ts[n]) = (h, t);
            r.len += 1;
        }
        false
    }

    /// The loop ended: a change landed.
    fn landed(&mut self) {
        self.region.clear();
        self.signals.landed();
        if let Some(f) = &mut self.flag {
            f.loop_start = None;
        }
    }

    fn evidence(&self, cfg: &DetectorConfig) -> Evidence {
        let cx = self.cx(cfg);
        let cases: Vec<signals::Case> = self
            .signals
            .reasons(&cx)
            .into_iter()
            .map(|r| self.signals.case(r, &cx))
            .collect();
        let loop_start = self
            .flag
            .as_ref()
            .and_then(|f| f.loop_start.clone())
            .or_else(|| {
                cases
                    .iter()
                    .filter_map(|c| c.start.clone())
                    .min_by_key(|s| s.index)
            });
        let mut calls = cases
            .into_iter()
            .next()
            .map(|c| c.calls)
            .unwrap_or_default();
        if calls.len() > DIGEST_CALLS {
            calls.drain(..calls.len() - DIGEST_CALLS);
        }
        Evidence {
            loop_start,
            last_landed: self.progress.as_ref().and_then(|p| p.last()),
            calls,
        }
    }
}

pub struct Detector {
    cfg: DetectorConfig,
    /// Session id's hash to the session's index in `sessions` (the order first seen); the
    /// state holds the id, to tell two ids of one hash apart.
    ids: target::IdMap<usize>,
    /// Ids whose hash an earlier session's id has.
    clash: HashMap<String, usize>,
    /// Boxed: a vector of 200,000 states carried a third of them again as room to grow
    /// (measured: 216 MB of a 620 MB peak in the 200,000-session bench; boxed, 161 MB).
    #[allow(clippy::vec_box)]
    sessions: Vec<Box<SessionState>>,
    /// Calls skipped because they were seen before.
    pub repeated: u64,
    /// What recent bash commands normalise to.
    commands: target::Commands,
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

fn read_only_of(meta: Option<&Meta>, cfg: &DetectorConfig) -> bool {
    let Some(m) = meta else { return false };
    let hit = |s: &str| {
        let s = s.to_ascii_lowercase();
        cfg.read_only_agents
            .iter()
            .any(|k| s.contains(&k.to_ascii_lowercase()))
    };
    match m.agent.as_deref() {
        Some(a) if !a.is_empty() => hit(a),
        _ => m.title.as_deref().is_some_and(hit),
    }
}

impl Detector {
    pub fn new(cfg: DetectorConfig) -> Detector {
        Detector {
            cfg,
            ids: Default::default(),
            clash: HashMap::new(),
            sessions: Vec::new(),
            repeated: 0,
            commands: Default::default(),
        }
    }

    fn index(&mut self, id: &str) -> usize {
        let h = target::hash_str(id);
        let n = self.sessions.len();
        match self.ids.get(&h) {
            Some(&i) if self.sessions[i].id.bytes() == id.as_bytes() => return i,
            Some(_) => {
                if let Some(&i) = self.clash.get(id) {
                    return i;
                }
                self.clash.insert(id.to_string(), n);
            }
            None => {
                self.ids.insert(h, n);
            }
        }
        self.sessions.push(Box::new(SessionState {
            id: region::Id::new(id),
            ..SessionState::default()
        }));
        n
    }

    fn get(&self, id: &str) -> Option<&SessionState> {
        let i = match self.ids.get(&target::hash_str(id)) {
            Some(&i) if self.sessions[i].id.bytes() == id.as_bytes() => i,
            Some(_) => *self.clash.get(id)?,
            None => return None,
        };
        Some(&self.sessions[i])
    }

    /// Records a session's metadata; returns the session's number (in the order first seen).
    /// A later record for the same id replaces the earlier one.
    pub fn session(&mut self, s: Session) -> usize {
        let i = self.index(&s.id);
        let st = &mut self.sessions[i];
        let meta = Meta::from(s);
        st.read_only = read_only_of(Some(&meta), &self.cfg);
        st.meta = Some(Box::new(meta));
        i
    }

    fn parent_of(&self, id: &str) -> Option<&str> {
        self.get(id)?.meta.as_ref()?.parent.as_deref()
    }

    /// A descendant landed a change at `t`: the loops of its ancestors that had begun by then end.
    fn credit_ancestors(&mut self, from: &str, t: i64) {
        let mut cur = self.parent_of(from).map(String::from);
        for _ in 0..1000 {
            let Some(id) = cur else { break };
            let i = self.index(&id);
            let st = &mut self.sessions[i];
            st.progress.get_or_insert_with(Box::default).descendant = Some((t, st.calls));
            if st.region.entries.front().is_some_and(|e| e.t <= t) {
                st.landed();
            }
            st.flagged = st.signals.firing(&st.cx(&self.cfg));
            cur = st.meta.as_ref().and_then(|m| owned(&m.parent));
        }
    }

    /// The top of a session's parent chain, as far as it is known.
    pub fn root_of(&self, id: &str) -> String {
        let mut cur = id.to_string();
        for _ in 0..1000 {
            match self.parent_of(&cur) {
                Some(p) => cur = p.to_string(),
                None => break,
            }
        }
        cur
    }

    /// Takes one call; returns whether the session's flag state changed with it.
    pub fn call(&mut self, c: &CallIn) -> bool {
        let si = self.index(c.session);
        let cfg = &self.cfg;
        let st = &mut self.sessions[si];
        if st.seen(c.id, c.t) {
            self.repeated += 1;
            return false;
        }
        st.calls += 1;
        // a cost that is not a finite amount is no cost; a sum past f64::MAX stays at f64::MAX
        // (never inf, which JSON cannot carry)
        let cost = c.cost.filter(|x| x.is_finite() && *x > 0.0).unwrap_or(0.0);
        st.cost = (st.cost + cost).min(f64::MAX);
        st.last_t = c.t;
        if let Some(m) = c.model {
            // by its hash: the name itself sits elsewhere on the heap, one more cache line a call
            let h = target::hash_str(m);
            if st.model.is_none() || st.model_h != h {
                st.model = Some(m.into());
                st.model_h = h;
            }
        }
        let mut args = target::Args::of_list(c.tool, c.args);
        let norm = self.commands.normalize(c.tool, &mut args);
        args.command = &norm;
        let landed = c.landed
            && st.progress.get_or_insert_with(Box::default).land(
                true,
                edit_sig(c.tool, &args),
                (st.calls, c.t, c.id),
                st.cost,
            );
        let keys = target::keys_of(c.tool, &args);
        let dir = st.meta.as_ref().and_then(|m| m.directory.as_deref());
        let obs = Obs {
            index: st.calls,
            t: c.t,
            id: c.id,
            tool: c.tool,
            args,
            exact: keys.exact,
            target: keys.target,
            read: match (c.tool, c.file_lines) {
                ("read", Some(n)) if n > 0 => Some(Read {
                    file: args.file_h,
                    lines: target::lines_of(&args, n).min(u32::MAX as i64) as u32,
                    total: n.min(u32::MAX as i64) as u32,
                }),
                _ => None,
            },
            out: c.out.map(target::hash_str),
            failed: c.status == "error" || c.exit.is_some_and(|e| e != 0),
            dir,
        };
        st.digest.push(&obs, c.exit);
        let flagged = if landed {
            st.landed();
            st.signals.firing(&st.cx(cfg))
        } else {
            if st.region.len() >= cfg.window() {
                if let Some((exact, target, e)) = st.region.pop() {
                    let cx = Cx {
                        region: &st.region,
                        calls: st.calls,
                        read_only: st.read_only,
                        cfg,
                    };
                    st.signals.left(exact, target, &e, &cx);
                }
            }
            st.region.push(&obs);
            let cx = Cx {
                region: &st.region,
                calls: st.calls,
                read_only: st.read_only,
                cfg,
            };
            st.signals.call(&obs, &cx)
        };
        let changed = flagged != st.flagged;
        st.flagged = flagged;
        if flagged {
            if st.flag.as_ref().map_or(true, |f| f.loop_start.is_none()) {
                let start = st.evidence(cfg).loop_start;
                st.flag.get_or_insert_with(Box::default).loop_start = start;
            }
            if st.flag.as_ref().map_or(true, |f| f.first.is_none()) {
                let case = st.evidence(cfg);
                let f = st.flag.get_or_insert_with(Box::default);
                f.first = Some(CallRef {
                    index: st.calls,
                    t: c.t,
                    id: c.id.to_string(),
                });
                f.first_case = Some(case);
            }
        }
        if landed {
            self.credit_ancestors(c.session, c.t);
        }
        changed
    }

    /// The verdict on one session now.
    pub fn verdict(&self, id: &str) -> Option<Verdict> {
        let st = self.get(id)?;
        let cfg = &self.cfg;
        let cx = st.cx(cfg);
        let reasons = st.signals.reasons(&cx);
        let flagged = !reasons.is_empty();
        let meta = st.meta.as_ref();
        let last_at = st.progress.as_ref().and_then(|p| p.last_at());
        let (calls_since, cost_since) = match last_at {
            Some((i, c)) => (st.calls - i, st.cost - c),
            None => (st.calls, st.cost),
        };
        let window = cfg.window() as u64;
        let landed_in_window = calls_since < window.min(st.calls + 1) && last_at.is_some()
            || st
                .progress
                .as_ref()
                .and_then(|p| p.descendant)
                .is_some_and(|(_, at)| st.calls - at < window);
        let expect = meta.and_then(|m| m.expect);
        let first = st.flag.as_ref().and_then(|f| f.first.as_ref());
        let ok = expect.map(|e| match e {
            Expect::Flag => {
                flagged
                    && first.is_some_and(|f| {
                        meta.and_then(|m| m.flag_after).map_or(true, |a| a <= f.t)
                            && meta.and_then(|m| m.flag_by).map_or(true, |by| f.t <= by)
                    })
            }
            Expect::NoFlag => first.is_none(),
        });
        let evidence = if flagged {
            Some(st.evidence(cfg))
        } else {
            st.flag.as_ref().and_then(|f| f.first_case.clone())
        };
        Some(Verdict {
            session: id.to_string(),
            root: self.root_of(id),
            parent: meta.and_then(|m| owned(&m.parent)),
            agent: meta.and_then(|m| owned(&m.agent)),
            title: meta.and_then(|m| owned(&m.title)),
            read_only: st.read_only,
            calls: st.calls,
            flagged,
            reasons,
            signals: st.signals.signals(&cx),
            landed_in_window,
            calls_since_landed: calls_since,
            cost_since_landed: round6(cost_since),
            first_flag: first.cloned(),
            model: st
                .model
                .as_deref()
                .map(String::from)
                .or_else(|| meta.and_then(|m| owned(&m.model))),
            t: (st.calls > 0).then_some(st.last_t),
            source: meta.and_then(|m| owned(&m.source)),
            sources: meta.map(|m| m.sources.clone()).unwrap_or_default(),
            evidence,
            digest: if flagged {
                st.digest.lines().map(String::from).collect()
            } else {
                Vec::new()
            },
            expect,
            ok,
            ..Verdict::default()
        })
    }

    /// Every session's verdict, one at a time, in the order first seen (with its number): a
    /// caller writes each as it comes, so all of them never sit in memory at once.
    pub fn verdicts(&self) -> impl Iterator<Item = (usize, Verdict)> + '_ {
        self.sessions
            .iter()
            .enumerate()
            .filter_map(|(i, st)| Some((i, self.verdict(st.id.as_str())?)))
    }
}

/// The last [`DIGEST_CALLS`] calls, one line each: what the call worked on and how it ended,
/// never content. The lines sit in one buffer (a call costs no allocation once it is warm).
#[derive(Default)]
struct Digest {
    /// The lines from byte `head` on; what is before it has been dropped.
    text: String,
    head: usize,
    /// Byte length of each line from `head`, oldest first.
    lens: VecDeque<u32>,
}

impl Digest {
    fn push(&mut self, c: &Obs, exit: Option<i64>) {
        if self.lens.len() == DIGEST_CALLS {
            self.head += self.lens.pop_front().unwrap_or(0) as usize;
            // the dropped lines are moved out once they are as long as the kept ones
            if self.head > self.text.len() / 2 {
                self.text.drain(..self.head);
                self.head = 0;
            }
        }
        let start = self.text.len();
        target::describe_into(&mut self.text, c.tool, &c.args, c.dir);
        if let Some(e) = exit {
            self.text.push_str(" [exit ");
            target::push_int(&mut self.text, e);
            self.text.push(']');
        } else if c.failed {
            self.text.push_str(" [error]");
        }
        region::room_ring(&mut self.lens);
        self.lens.push_back((self.text.len() - start) as u32);
    }

    fn lines(&self) -> impl Iterator<Item = &str> {
        let mut at = self.head;
        self.lens.iter().map(move |&n| {
            let l = &self.text[at..at + n as usize];
            at += n as usize;
            l
        })
    }
}

fn edit_sig(tool: &str, a: &target::Args) -> Option<EditSig> {
    if tool != "edit" {
        return None;
    }
    let s = |v: Option<&str>, h: u64| v.map(|_| h as u32);
    Some(EditSig {
        file: s(a.file_path, a.file_h)?,
        old: s(a.old_string, a.old_h)?,
        new: s(a.new_string, a.new_h)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Signal;
    use serde_json::{json, Value};

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
            let text = args.to_string();
            let a: target::ArgList = serde_json::from_str(&text).unwrap();
            self.d.call(&CallIn {
                session: s,
                id: &format!("prt_{}", self.n),
                t: self.n * 1000,
                tool,
                args: &a,
                status: "completed",
                landed,
                exit: None,
                file_lines: lines,
                model: Some("p/m"),
                cost: Some(0.01),
                out: None,
            });
        }
        fn v(&self, s: &str) -> Verdict {
            self.d.verdict(s).unwrap()
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
        assert_eq!(v.reasons, [Signal::Top, Signal::Run]);
        // the run fired first: the 5th identical call in a row
        assert_eq!(v.first_flag.unwrap().index, 7);
        let e = v.evidence.unwrap();
        assert_eq!(e.loop_start.unwrap().index, 3);
        assert_eq!(e.calls.len(), 12);
        assert_eq!(v.digest.len(), 12);
        assert_eq!(v.digest[11], "bash python3 check.py");
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
    fn a_loop_after_real_work_is_judged_from_its_first_call() {
        let mut f = Feed::new();
        f.session("s", None, "build");
        for i in 0..15 {
            f.call(
                "s",
                "read",
                json!({"filePath": "/n.js", "offset": i * 5 + 1, "limit": 5}),
                false,
                Some(300),
            );
            let e = json!({"filePath": "/n.js", "oldString": format!("sha1:{i}"), "newString": format!("sha1:{i}x")});
            f.call("s", "edit", e, true, None);
            f.call("s", "bash", json!({"command": "node -e 1"}), false, None);
        }
        assert!(f.v("s").first_flag.is_none());
        for _ in 0..3 {
            f.call(
                "s",
                "read",
                json!({"filePath": "/n.js", "offset": 281, "limit": 20}),
                false,
                Some(300),
            );
            f.call(
                "s",
                "grep",
                json!({"pattern": "exports", "path": "/"}),
                false,
                None,
            );
            f.call(
                "s",
                "read",
                json!({"filePath": "/n.js", "offset": 1, "limit": 10}),
                false,
                Some(300),
            );
            f.call(
                "s",
                "grep",
                json!({"pattern": "navItem58", "path": "/"}),
                false,
                None,
            );
        }
        let v = f.v("s");
        assert_eq!(v.reasons, [Signal::Cycle]);
        let e = v.evidence.unwrap();
        assert_eq!(e.loop_start.unwrap().index, 46);
        assert_eq!(e.last_landed.unwrap().index, 44);
        // two rounds of four: the 8th call of the loop
        assert_eq!(v.first_flag.unwrap().index, 53);
        assert_eq!(v.calls_since_landed, 13);
    }

    #[test]
    fn two_session_ids_of_one_hash_stay_two_sessions() {
        let mut f = Feed::new();
        f.session("a", None, "build");
        // make "b" hash as "a" does: the index then finds a session whose id is not "b"
        let i = f.d.ids[&target::hash_str("a")];
        f.d.ids.insert(target::hash_str("b"), i);
        f.session("b", None, "explore");
        for _ in 0..13 {
            f.call("a", "read", json!({"filePath": "/x"}), false, Some(5));
        }
        f.call("b", "read", json!({"filePath": "/y"}), false, Some(5));
        assert_eq!(f.d.sessions.len(), 2);
        assert_eq!(f.d.clash.len(), 1);
        let (a, b) = (f.v("a"), f.v("b"));
        assert_eq!(
            (a.calls, a.flagged, a.agent.as_deref()),
            (13, true, Some("build"))
        );
        assert_eq!(
            (b.calls, b.flagged, b.agent.as_deref()),
            (1, false, Some("explore"))
        );
        let order: Vec<String> = f.d.verdicts().map(|(_, v)| v.session).collect();
        assert_eq!(order, ["a", "b"]);
    }

    #[test]
    fn a_stream_fed_twice_gives_the_same_verdicts() {
        let mut once = Feed::new();
        let mut twice = Feed::new();
        for f in [&mut once, &mut twice] {
            f.session("s", None, "build");
        }
        let feed = |f: &mut Feed| {
            f.n = 0;
            for i in 0..40 {
                let cmd = format!("cat f{}.py", i % 7);
                f.call("s", "bash", json!({ "command": cmd }), i % 9 == 0, None);
            }
        };
        feed(&mut once);
        feed(&mut twice);
        feed(&mut twice);
        assert_eq!(twice.d.repeated, 40);
        assert_eq!(once.v("s"), twice.v("s"));
        assert_eq!(twice.v("s").calls, 40);
    }
}
