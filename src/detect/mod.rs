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
use std::collections::HashMap;
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

/// The latest [`RECENT_IDS`] calls' id hashes and times: a ring, the oldest at `head` once it
/// is full. The check reads a 16-bit print of each hash, half a cache line in the session's
/// state, and a call's full hash only when its print matches; a call writes one entry.
#[derive(Default)]
struct Recent {
    prints: [u16; RECENT_IDS],
    /// (id hash, time), in the ring's order, grown as calls come.
    calls: Vec<(u64, i64)>,
    head: u8,
}

fn print_of(h: u64) -> u16 {
    (h >> 48) as u16
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
    /// The session's directory (out of `meta`: every call reads it, to describe its target).
    dir: Option<Box<str>>,
    flagged: bool,
    flag: Option<Box<Flag>>,
}

impl SessionState {
    /// A value read from each part of the state a call touches ([`Detector::warm`]).
    fn warm(&self) -> u64 {
        let (r, d, ids) = (&self.region, &self.digest, &self.recent);
        let ends = |v: &std::collections::VecDeque<u64>| {
            v.front().copied().unwrap_or(0) ^ v.back().copied().unwrap_or(0)
        };
        let mut x = self.calls ^ self.last_t as u64 ^ self.model_h ^ self.id.bytes().len() as u64;
        x ^= self.flagged as u64 ^ self.dir.is_some() as u64 ^ self.progress.is_some() as u64;
        x ^= ends(&r.exact) ^ ends(&r.target);
        x ^= r.entries.front().map_or(0, |e| e.index) ^ r.entries.back().map_or(0, |e| e.index);
        x ^= d
            .lines
            .get(d.head as usize)
            .map_or(0, |l| l.bytes().len() as u64);
        x ^= ids.prints[0] as u64 ^ ids.calls.get(ids.head as usize).map_or(0, |c| c.0);
        x ^ self.signals.warm()
    }

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
        let p = print_of(h);
        let r = &mut self.recent;
        let (n, head) = (r.calls.len(), r.head as usize);
        let among = (0..n).any(|i| r.prints[i] == p && r.calls[i].0 == h);
        if among || (n == RECENT_IDS && t < r.calls[head].1) {
            return true;
        }
        if n == RECENT_IDS {
            (r.calls[head], r.prints[head]) = ((h, t), p);
            r.head = ((head + 1) % RECENT_IDS) as u8;
        } else {
            region::room_upto(&mut r.calls, RECENT_IDS);
            r.calls.push((h, t));
            r.prints[n] = p;
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
    /// The digest line being written (one buffer for every call).
    line: String,
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
            line: String::new(),
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
    pub fn session(&mut self, mut s: Session) -> usize {
        let i = self.index(&s.id);
        let st = &mut self.sessions[i];
        st.dir = boxed(s.directory.take());
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

    /// Reads ahead the states the calls of these sessions will touch: a little of each part
    /// (the state's own cache lines, the ends of its rings, each signal's state). A session's
    /// state is a chain of loads that each wait on memory when the sessions interleave; read
    /// for a few sessions at once, before their calls are judged, the misses of different
    /// sessions overlap instead of coming one after another. progress-detect calls it for every
    /// 32 calls of a batch: the judging thread's CPU time on the bench's 1,000,000 interleaved
    /// calls went from 1.8-2.2 s to 1.2-1.5 s (three runs each).
    pub fn warm<'a>(&self, sessions: impl Iterator<Item = &'a str>) {
        let mut x = 0;
        for s in sessions {
            if let Some(&i) = self.ids.get(&target::hash_str(s)) {
                x ^= self.sessions[i].warm();
            }
        }
        std::hint::black_box(x);
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
        let dir = st.dir.as_deref();
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
        st.digest.push(&mut self.line, &obs, c.exit);
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
            directory: st.dir.as_deref().map(String::from),
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
/// never content. A ring of slots, the oldest at `head` once it is full: a call writes one slot,
/// one cache line when its line is short (most are: `read src/app.js`), and costs no
/// allocation then.
#[derive(Default)]
struct Digest {
    lines: Vec<DigestLine>,
    head: u8,
}

/// A digest line: 64 bytes in place, a slot to a cache line.
type DigestLine = region::Small<62>;

impl Digest {
    /// `line` is the caller's buffer for the line, kept from call to call.
    fn push(&mut self, line: &mut String, c: &Obs, exit: Option<i64>) {
        line.clear();
        target::describe_into(line, c.tool, &c.args, c.dir);
        if let Some(e) = exit {
            line.push_str(" [exit ");
            target::push_int(line, e);
            line.push(']');
        } else if c.failed {
            line.push_str(" [error]");
        }
        let l = DigestLine::new(line);
        if self.lines.len() < DIGEST_CALLS {
            region::room_upto(&mut self.lines, DIGEST_CALLS);
            self.lines.push(l);
        } else {
            let h = self.head as usize;
            self.lines[h] = l;
            self.head = ((h + 1) % DIGEST_CALLS) as u8;
        }
    }

    /// Oldest first.
    fn lines(&self) -> impl Iterator<Item = &str> {
        let (new, old) = self.lines.split_at(self.head as usize);
        old.iter().chain(new).map(DigestLine::as_str)
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

    #[test]
    fn the_digest_keeps_the_last_twelve_lines_oldest_first() {
        let mut d = Digest::default();
        let mut buf = String::new();
        let long = "x".repeat(200);
        let mut want = Vec::new();
        for i in 0..17 {
            let cmd = if i == 14 {
                long.clone()
            } else {
                format!("echo {i}")
            };
            let text = json!({ "command": cmd }).to_string();
            let a: target::ArgList = serde_json::from_str(&text).unwrap();
            let exit = (i % 5 == 0).then_some(i as i64);
            let obs = Obs {
                index: i + 1,
                t: 0,
                id: "prt_x",
                tool: "bash",
                args: target::Args::of_list("bash", &a),
                exact: 0,
                target: 0,
                read: None,
                out: None,
                failed: i == 3,
                dir: None,
            };
            d.push(&mut buf, &obs, exit);
            let mut line = if i == 14 {
                format!("bash {}...", &long[..112])
            } else {
                format!("bash echo {i}")
            };
            match (exit, i == 3) {
                (Some(e), _) => line += &format!(" [exit {e}]"),
                (None, true) => line += " [error]",
                _ => {}
            }
            want.push(line);
            let kept = &want[want.len().saturating_sub(DIGEST_CALLS)..];
            assert_eq!(d.lines().collect::<Vec<_>>(), kept, "after call {}", i + 1);
        }
        assert_eq!(d.lines().next(), Some("bash echo 5 [exit 5]"));
        assert_eq!(d.lines().nth(9).map(str::len), Some(120));
        assert_eq!(d.lines.capacity(), DIGEST_CALLS);
        // a slot to a cache line; an id half of one
        assert_eq!(std::mem::size_of::<DigestLine>(), 64);
        assert_eq!(std::mem::size_of::<region::Id>(), 32);
    }

    #[test]
    fn an_id_whose_hash_shares_a_print_with_a_recent_one_is_a_new_call() {
        // two ids whose hashes differ but share their 16-bit print
        let mut by_print = HashMap::new();
        let (a, b) = (0..)
            .map(|i| format!("prt_{i}"))
            .find_map(|id| {
                let p = print_of(target::hash_str(&id));
                by_print.insert(p, id.clone()).map(|other| (other, id))
            })
            .unwrap();
        assert_ne!(target::hash_str(&a), target::hash_str(&b));
        let mut st = SessionState::default();
        assert!(!st.seen(&a, 1000));
        assert!(!st.seen(&b, 2000));
        assert!(st.seen(&a, 1000));
        assert!(st.seen(&b, 2000));
        // once the ring is full, a call older than every remembered one was seen long ago
        for i in 0..RECENT_IDS {
            assert!(!st.seen(&format!("later_{i}"), 3000 + i as i64));
        }
        assert!(!st.seen(&a, 3000), "the oldest remembered call is at 3000");
        assert!(st.seen("anything", 2999));
    }
}
