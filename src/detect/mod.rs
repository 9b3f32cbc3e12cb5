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
//!
//! The follow mode (`progress-detect --follow`) takes a call for good only once it can no longer
//! change, and judges the calls that still may on a copy of the session's state
//! ([`Detector::verdict_with`]); it forgets sessions gone for long ([`Detector::forget`]).

pub mod progress;
pub mod region;
pub mod signals;
pub mod target;
pub use signals::thresholds;

use crate::record::{CallRef, Evidence, Expect, Program, Session, Verdict, DIGEST_CALLS};
use crate::vocab::Tool;
use progress::{EditSig, Landings};
use region::{Obs, Region};
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
#[derive(Default, Clone)]
struct Meta {
    parent: Option<Box<str>>,
    agent: Option<Box<str>>,
    title: Option<Box<str>>,
    source: Option<Box<str>>,
    model: Option<Box<str>>,
    program: Option<Program>,
    sources: Vec<String>,
    expect: Option<Expect>,
    flag_after: Option<i64>,
    flag_by: Option<i64>,
    /// The first call at or after `flag_after`: where a labelled loop starts, in calls.
    loop_from: Option<u64>,
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
            program: s.program,
            sources: s.sources,
            expect: s.expect,
            flag_after: s.flag_after,
            flag_by: s.flag_by,
            loop_from: None,
        }
    }
}

/// A flagged session's first flag, and its loop (only flagged sessions carry it).
#[derive(Default, Clone)]
struct Flag {
    first: Option<CallRef>,
    /// The case as it stood at the first flag.
    first_case: Option<Evidence>,
    /// Where the current loop started, fixed when it is first flagged; a landing clears it.
    loop_start: Option<CallRef>,
}

/// The latest `N` strings, oldest first, in one buffer: each one's length (LEB128), then its
/// bytes. One buffer rather than a slot per string: slots of a fixed size (32 bytes for an id,
/// 64 for a digest line) cost a session that much whatever the strings' length (the
/// 200,000-session bench peaked at 559 MB with slots, 479 MB with one buffer). The buffer grows
/// to what it holds, no more (a reallocation within the allocator's size class stays in place).
#[derive(Default, Clone)]
struct LatestStrings<const N: usize> {
    buf: Vec<u8>,
    n: u8,
}

/// The string at the start of `buf` (as [`LatestStrings::push`] wrote it), and the rest.
fn take_one(buf: &[u8]) -> (&[u8], &[u8]) {
    let (mut len, mut shift, mut at) = (0usize, 0, 0);
    while let Some(&b) = buf.get(at) {
        at += 1;
        len |= ((b & 0x7f) as usize) << shift;
        shift += 7;
        if b < 0x80 {
            break;
        }
    }
    let end = (at + len).min(buf.len());
    (&buf[at..end], &buf[end..])
}

impl<const N: usize> LatestStrings<N> {
    /// Adds `s`, forgetting the oldest when `N` are held.
    fn push(&mut self, s: &str) {
        const { assert!(N <= u8::MAX as usize) };
        if self.n as usize == N {
            let (_, rest) = take_one(&self.buf);
            let oldest = self.buf.len() - rest.len();
            self.buf.drain(..oldest);
        } else {
            self.n += 1;
        }
        let need = self.buf.len() + s.len() + 10;
        if need > self.buf.capacity() {
            self.buf.reserve_exact(need - self.buf.len());
        }
        let mut len = s.len();
        while len >= 0x80 {
            self.buf.push((len & 0x7f) as u8 | 0x80);
            len >>= 7;
        }
        self.buf.push(len as u8);
        self.buf.extend_from_slice(s.as_bytes());
    }

    /// Oldest first.
    fn iter(&self) -> impl Iterator<Item = &[u8]> {
        let mut rest = &self.buf[..];
        std::iter::from_fn(move || {
            if rest.is_empty() {
                return None;
            }
            let (one, more) = take_one(rest);
            rest = more;
            Some(one)
        })
    }
}

/// The latest [`RECENT_IDS`] calls' ids, in full. A call is skipped only when its whole id is
/// among them (a hash or a print of it once took `ses_a_18` for `ses_a_1`).
#[derive(Default, Clone)]
struct Recent(LatestStrings<RECENT_IDS>);

impl Recent {
    /// Whether `id` is among the latest; remembers it when it is not.
    fn seen(&mut self, id: &str) -> bool {
        if self.0.iter().any(|i| i == id.as_bytes()) {
            return true;
        }
        self.0.push(id);
        false
    }
}

#[derive(Default, Clone)]
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
    progress: Option<Box<Landings>>,
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
    fn cx<'a>(&'a self, cfg: &'a DetectorConfig) -> Cx<'a> {
        Cx {
            rewriting: self.rewriting(),
            ..Cx::new(&self.region, self.calls, self.read_only, cfg)
        }
    }

    /// The session's running totals: calls, cost, the latest time and model.
    fn count(&mut self, c: &CallIn) {
        self.calls += 1;
        // a cost that is not a finite amount is no cost; a sum past f64::MAX stays at f64::MAX
        // (never inf, which JSON cannot carry)
        let cost = c.cost.filter(|x| x.is_finite() && *x > 0.0).unwrap_or(0.0);
        self.cost = (self.cost + cost).min(f64::MAX);
        self.last_t = c.t;
        if let Some(m) = c.model {
            let h = target::hash_str(m);
            if self.model.is_none() || self.model_h != h {
                self.model = Some(m.into());
                self.model_h = h;
            }
        }
    }

    /// Notes the call where a labelled loop starts (for the backtest's first-flag positions).
    fn label(&mut self, t: i64) {
        if let Some(m) = self.meta.as_mut() {
            if m.loop_from.is_none() && m.flag_after.is_some_and(|a| a <= t) {
                m.loop_from = Some(self.calls);
            }
        }
    }

    /// Whether a call that says it landed is progress: not when it undoes an earlier edit.
    fn land(&mut self, c: &Obs) -> bool {
        let sig = edit_sig(&c.args);
        let cost = self.cost;
        self.progress.get_or_insert_with(Box::default).land(
            c.exact,
            sig,
            (c.index, c.t, c.id),
            cost,
        )
    }

    /// A call that did not land: into the window (the oldest call leaving a full one), then to
    /// every signal; returns whether any fires.
    fn judge(&mut self, c: &Obs, cfg: &DetectorConfig) -> bool {
        let (calls, read_only, rewriting) = (self.calls, self.read_only, self.rewriting());
        if self.region.len() >= cfg.window() {
            if let Some((exact, target, e)) = self.region.pop() {
                let cx = Cx::new(&self.region, calls, read_only, cfg);
                self.signals.left(exact, target, &e, &cx);
            }
        }
        self.region.push(c);
        let cx = Cx {
            rewriting,
            ..Cx::new(&self.region, calls, read_only, cfg)
        };
        self.signals.call(c, &cx)
    }

    /// Records whether the session flags after call `c`: a loop's start once it flags, the
    /// first flag once ever; returns whether the flag changed.
    fn flag_now(&mut self, flagged: bool, c: &Obs, cfg: &DetectorConfig) -> bool {
        let changed = flagged != self.flagged;
        self.flagged = flagged;
        if !flagged {
            return changed;
        }
        if self.flag.as_ref().map_or(true, |f| f.loop_start.is_none()) {
            let start = self.evidence(cfg).loop_start;
            self.flag.get_or_insert_with(Box::default).loop_start = start;
        }
        if self.flag.as_ref().map_or(true, |f| f.first.is_none()) {
            let case = self.evidence(cfg);
            let f = self.flag.get_or_insert_with(Box::default);
            f.first = Some(c.at());
            f.first_case = Some(case);
        }
        changed
    }

    fn rewriting(&self) -> bool {
        self.progress.as_ref().is_some_and(|p| p.rewriting)
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
    /// Each session's index in `sessions` (the order first seen), by its id.
    by_id: HashMap<Box<str>, usize, std::hash::BuildHasherDefault<target::Fx>>,
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
    /// Room for a target's calls while a call is judged (one buffer for every call).
    worked: Vec<u64>,
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
            by_id: Default::default(),
            sessions: Vec::new(),
            repeated: 0,
            commands: Default::default(),
            line: String::new(),
            worked: Vec::new(),
        }
    }

    fn index(&mut self, id: &str) -> usize {
        if let Some(&i) = self.by_id.get(id) {
            return i;
        }
        let n = self.sessions.len();
        self.by_id.insert(id.into(), n);
        self.sessions.push(Box::new(SessionState {
            id: region::Id::new(id),
            ..SessionState::default()
        }));
        n
    }

    fn get(&self, id: &str) -> Option<&SessionState> {
        Some(&self.sessions[*self.by_id.get(id)?])
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
    /// An ancestor the stream never showed has no loop to end (and gets no state, nor a verdict).
    fn credit_ancestors(&mut self, from: &str, t: i64) {
        let mut cur = self.parent_of(from).map(String::from);
        for _ in 0..1000 {
            let Some(&i) = cur.as_deref().and_then(|id| self.by_id.get(id)) else {
                break;
            };
            let st = &mut self.sessions[i];
            st.progress.get_or_insert_with(Box::default).descendant = Some((t, st.calls));
            if st.region.entries.front().is_some_and(|e| e.t <= t) {
                st.landed();
            }
            st.flagged = st.signals.firing(&st.cx(&self.cfg));
            cur = st.meta.as_ref().and_then(|m| owned(&m.parent));
        }
    }

    /// Where a session's labelled loop starts (its first call at or after `flag_after`).
    pub fn labelled_start(&self, id: &str) -> Option<u64> {
        self.get(id)?.meta.as_ref()?.loop_from
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
        let st = &mut self.sessions[si];
        // dedup
        if st.recent.seen(c.id) {
            self.repeated += 1;
            return false;
        }
        let (changed, landed) = feed(
            st,
            &self.cfg,
            &mut self.commands,
            (&mut self.line, &mut self.worked),
            c,
        );
        if landed {
            self.credit_ancestors(c.session, c.t);
        }
        changed
    }

    /// The verdict on session `id` as it would be with the calls `tail` after those taken, the
    /// session's state left as it is (the follow mode's calls that may still change: a running
    /// call completes, a step's cost and patch come after its calls). A landing in `tail`
    /// credits no ancestor: that happens once the call is taken. None for a session never seen
    /// (and given no calls).
    pub fn verdict_with(&mut self, id: &str, tail: &[CallIn]) -> Option<Verdict> {
        if tail.is_empty() {
            return self.verdict(id);
        }
        let i = self.index(id);
        let mut st = self.sessions[i].clone();
        for c in tail {
            if !st.recent.seen(c.id) {
                feed(
                    &mut st,
                    &self.cfg,
                    &mut self.commands,
                    (&mut self.line, &mut self.worked),
                    c,
                );
            }
        }
        Some(self.verdict_of(id, &st))
    }

    /// Forgets a session (the follow mode's sessions gone for long); returns whether it was
    /// held. The sessions' numbers change: the last one takes the forgotten one's.
    pub fn forget(&mut self, id: &str) -> bool {
        let Some(i) = self.by_id.remove(id) else {
            return false;
        };
        self.sessions.swap_remove(i);
        if let Some(moved) = self.sessions.get(i) {
            self.by_id.insert(moved.id.as_str().into(), i);
        }
        true
    }

    /// How many sessions are held.
    pub fn len(&self) -> usize {
        self.sessions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }

    /// The session's parent chain, nearest first, as far as it is known.
    pub fn ancestors(&self, id: &str) -> Vec<String> {
        let mut up: Vec<String> = Vec::new();
        while up.len() < 1000 {
            let cur = up.last().map_or(id, String::as_str);
            match self.parent_of(cur) {
                Some(p) if p != id => up.push(p.to_string()),
                _ => break,
            }
        }
        up
    }

    /// The verdict on one session now.
    pub fn verdict(&self, id: &str) -> Option<Verdict> {
        Some(self.verdict_of(id, self.get(id)?))
    }

    /// The verdict on session `id` whose state is `st`.
    fn verdict_of(&self, id: &str, st: &SessionState) -> Verdict {
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
            // caught when it flags after the loop began: an alert goes out at the first flag,
            // whether or not the loop ends later
            Expect::Flag => first.is_some_and(|f| {
                meta.and_then(|m| m.flag_after).map_or(true, |a| a <= f.t)
                    && meta.and_then(|m| m.flag_by).map_or(true, |by| f.t <= by)
            }),
            Expect::NoFlag => first.is_none(),
        });
        let evidence = if flagged {
            Some(st.evidence(cfg))
        } else {
            st.flag.as_ref().and_then(|f| f.first_case.clone())
        };
        Verdict {
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
            program: meta.and_then(|m| m.program),
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
        }
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

/// Feeds one call (not seen before) to its session's state: its totals, the digest, the
/// progress and the signals; returns whether the session's flag changed and whether the call
/// landed a change (its ancestors are then the caller's to credit).
fn feed(
    st: &mut SessionState,
    cfg: &DetectorConfig,
    commands: &mut target::Commands,
    (line, worked): (&mut String, &mut Vec<u64>),
    c: &CallIn,
) -> (bool, bool) {
    st.count(c);
    st.label(c.t);
    // a call still being written (its arguments not yet known) shows nothing yet: it neither
    // repeats the calls before it nor breaks their repeat. A process killed then leaves it so
    // for good: opencode's `read` with arguments `{}`, the end of every re-read loop killed
    // mid-call, read as a new call that ended the loop ("a change landed" while nothing had)
    if c.status == "pending" {
        return (false, false);
    }
    // features: what the call works on, computed once for every signal
    let mut args = target::CallArgs::of_list(c.tool, c.args);
    let norm = commands.normalize(&mut args);
    args.command = &norm;
    // lent to the call's features while the state changes, put back at the end
    let dir = st.dir.take();
    let mut obs = Obs::of(c, args, st.calls, dir.as_deref());
    st.digest.push(line, &obs);
    // progress
    obs.relanded = c.landed
        && st
            .progress
            .as_ref()
            .is_some_and(|p| p.landed_before(obs.exact));
    let landed = c.landed && st.land(&obs);
    if c.landed && !landed {
        // a change that changed nothing new: what it answers (a file grown by one more copy
        // of its block) moves with its own repeats, not with the work, so it is no outcome
        obs.out = None;
    }
    if st.region.explores(&obs, worked) {
        // a key no other call has: the call counts toward no target's repeats
        obs.target = target::hash_str(obs.id) ^ obs.index;
    }
    // window and signals
    let flagged = if landed {
        st.landed();
        st.signals.firing(&st.cx(cfg))
    } else {
        st.judge(&obs, cfg)
    };
    // flags
    let changed = st.flag_now(flagged, &obs, cfg);
    st.dir = dir;
    (changed, landed)
}

/// The last [`DIGEST_CALLS`] calls, one line each: what the call worked on and how it ended,
/// never content.
#[derive(Default, Clone)]
struct Digest(LatestStrings<DIGEST_CALLS>);

impl Digest {
    /// `line` is the caller's buffer for the line, kept from call to call.
    fn push(&mut self, line: &mut String, c: &Obs) {
        line.clear();
        target::describe_into(line, c.tool, &c.args, c.dir);
        if let Some(e) = c.exit {
            line.push_str(" [exit ");
            target::push_int(line, e);
            line.push(']');
        } else if c.failed {
            line.push_str(" [error]");
        }
        self.0.push(line);
    }

    /// Oldest first.
    fn lines(&self) -> impl Iterator<Item = &str> {
        // whole strings went in, so each line is valid UTF-8
        self.0.iter().map(|l| std::str::from_utf8(l).unwrap_or(""))
    }
}

fn edit_sig(a: &target::CallArgs) -> Option<EditSig> {
    if a.tool != Tool::Edit {
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
        fn call_in<'a>(
            &self,
            session: &'a str,
            id: &'a str,
            t: i64,
            tool: &'a str,
            args: &'a target::ArgList<'a>,
        ) -> CallIn<'a> {
            CallIn {
                session,
                id,
                t,
                tool,
                args,
                status: "completed",
                landed: false,
                exit: None,
                file_lines: None,
                model: None,
                cost: None,
                out: None,
            }
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
        // two rounds of four and one call more: the 9th call of the loop
        assert_eq!(v.first_flag.unwrap().index, 54);
        assert_eq!(v.calls_since_landed, 13);
    }

    #[test]
    fn each_call_sent_twice_gives_the_same_verdicts() {
        let mut once = Feed::new();
        let mut twice = Feed::new();
        for f in [&mut once, &mut twice] {
            f.session("s", None, "build");
        }
        let feed = |f: &mut Feed, times: i64| {
            for i in 0..40 {
                let cmd = format!("cat f{}.py", i % 7);
                for k in 0..times {
                    // the same id again
                    f.n -= (k > 0) as i64;
                    f.call("s", "bash", json!({ "command": cmd }), i % 9 == 0, None);
                }
            }
        };
        feed(&mut once, 1);
        feed(&mut twice, 2);
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
                args: target::CallArgs::of_list("bash", &a),
                exact: 0,
                target: 0,
                worked: 0,
                read: None,
                out: None,
                failed: i == 3,
                exit,
                relanded: false,
                dir: None,
            };
            d.push(&mut buf, &obs);
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
        // the lines and a length byte each, nothing more: no slot of a fixed size
        let held: usize = d.lines().map(|l| l.len() + 1).sum();
        assert_eq!(d.0.buf.len(), held);
        assert_eq!(d.0.n as usize, DIGEST_CALLS);
        assert_eq!(std::mem::size_of::<region::Id>(), 32);
    }

    #[test]
    fn the_latest_strings_are_kept_whole_whatever_their_length() {
        // lengths of one, two and three LEB128 bytes, and one string the other's prefix
        let long = "x".repeat(300);
        let longer = "y".repeat(20_000);
        let mut l = LatestStrings::<3>::default();
        for s in ["a", &long, "ab", &longer, ""] {
            l.push(s);
        }
        let held: Vec<usize> = l.iter().map(<[u8]>::len).collect();
        assert_eq!(held, [2, 20_000, 0]);
        assert_eq!(l.buf.len(), 3 + 20_003 + 1);
        let mut r = Recent::default();
        assert!(!r.seen(&long));
        assert!(!r.seen(&long[..299]));
        assert!(r.seen(&long));
    }

    #[test]
    fn ids_ses_a_1_and_ses_a_18_are_two_calls() {
        // the issue's two lines: one id the other's prefix, its length once read as its next byte
        let mut f = Feed::new();
        f.session("ses_a", None, "build");
        for (id, t, file) in [("ses_a_1", 1000, "/a"), ("ses_a_18", 2000, "/b")] {
            let text = json!({ "filePath": file }).to_string();
            let a: target::ArgList = serde_json::from_str(&text).unwrap();
            f.d.call(&CallIn {
                file_lines: Some(10),
                ..f.call_in("ses_a", id, t, "read", &a)
            });
        }
        assert_eq!(f.v("ses_a").calls, 2);
        assert_eq!(f.d.repeated, 0);
        assert_ne!(target::hash_str("ses_a_1"), target::hash_str("ses_a_18"));
        assert_ne!(target::hash_str("ses_a_2"), target::hash_str("ses_a_28"));
    }

    #[test]
    fn a_call_older_than_the_latest_sixteen_is_a_new_call() {
        let mut f = Feed::new();
        f.session("s", None, "build");
        let a: target::ArgList = serde_json::from_str(r#"{"command":"ls"}"#).unwrap();
        for i in 0..RECENT_IDS as i64 {
            f.d.call(&f.call_in("s", &format!("late_{i}"), 5000 + i, "bash", &a));
        }
        // earlier than every remembered call, and never seen: a call
        f.d.call(&f.call_in("s", "early", 1000, "bash", &a));
        // the latest ids, sent again: skipped
        f.d.call(&f.call_in("s", "late_15", 5015, "bash", &a));
        f.d.call(&f.call_in("s", "early", 1000, "bash", &a));
        assert_eq!(f.v("s").calls, RECENT_IDS as u64 + 1);
        assert_eq!(f.d.repeated, 2);
    }

    #[test]
    fn a_parent_never_seen_gets_no_verdict() {
        let mut f = Feed::new();
        f.session("c", Some("gone"), "general");
        f.call(
            "c",
            "write",
            json!({"filePath": "/y", "content": "sha1:1"}),
            true,
            None,
        );
        let order: Vec<String> = f.d.verdicts().map(|(_, v)| v.session).collect();
        assert_eq!(order, ["c"]);
        assert!(f.d.verdict("gone").is_none());
    }

    #[test]
    fn shape_1_the_same_landing_edit_re_sent_is_not_progress() {
        // each re-sent edit "lands" another copy of its block: only the first is progress
        let mut f = Feed::new();
        f.session("s", None, "build");
        let e = json!({"filePath": "/w.java", "oldString": "sha1:aaa", "newString": "sha1:bbb"});
        for _ in 0..6 {
            f.call("s", "edit", e.clone(), true, None);
        }
        let v = f.v("s");
        assert_eq!(v.reasons, [Signal::Run, Signal::Relanded]);
        // landed at call 1; landed again at calls 2, 3 and 4: the third relanding flags, before
        // the 5th identical call in a row after the landing (call 6) makes it a run
        assert_eq!(v.first_flag.unwrap().index, 4);
        assert_eq!(v.evidence.unwrap().last_landed.unwrap().index, 1);
    }

    #[test]
    fn shape_7_a_parent_re_spawning_the_same_subagent_is_a_run() {
        // each child's answer names a new child session, so the answers differ
        let mut f = Feed::new();
        f.session("p", None, "build");
        let task = json!({"subagent_type": "explore", "description": "find parse_amount", "prompt": "sha1:dd31"});
        let text = task.to_string();
        let a: target::ArgList = serde_json::from_str(&text).unwrap();
        for i in 1..=5 {
            let id = format!("prt_{i}");
            let out = format!("sha1:child{i}");
            f.d.call(&CallIn {
                out: Some(&out),
                ..f.call_in("p", &id, i * 1000, "task", &a)
            });
        }
        let v = f.v("p");
        assert_eq!(v.reasons, [Signal::Run]);
        assert_eq!(v.first_flag.unwrap().index, 5);
    }

    #[test]
    fn a_tree_walked_with_cd_is_not_one_call_again_and_again() {
        let mut f = Feed::new();
        f.session("s", None, "build");
        for i in 0..17 {
            let cmd = format!("cd pkg/d{i} && ls -a");
            f.call("s", "bash", json!({ "command": cmd }), false, None);
        }
        let v = f.v("s");
        assert!(v.first_flag.is_none(), "{:?}", v.reasons);
        assert_eq!(v.signals.value(Signal::Top), 1.0);
        // the same directory listed again and again is one call
        for _ in 0..5 {
            f.call(
                "s",
                "bash",
                json!({"command": "cd pkg/d3 && ls -a"}),
                false,
                None,
            );
        }
        let v = f.v("s");
        assert_eq!(v.reasons, [Signal::Run]);
    }

    #[test]
    fn shape_2_edit_undo_rounds_with_shifting_ranges_are_churn() {
        // delete a block, put it back, each round anchored elsewhere: every edit lands
        let mut f = Feed::new();
        f.session("s", None, "build");
        for round in 0..8 {
            let (a, b) = (format!("sha1:a{round}"), format!("sha1:b{round}"));
            let del = json!({"filePath": "/r.py", "oldString": a, "newString": b});
            let put = json!({"filePath": "/r.py", "oldString": b, "newString": a});
            f.call("s", "edit", del, true, None);
            f.call("s", "edit", put, true, None);
        }
        let v = f.v("s");
        assert_eq!(v.reasons, [Signal::Top]);
        // every edit that landed was undone: nothing stands
        assert!(v.evidence.unwrap().last_landed.is_none());
        // from the 2nd undo (call 4) on nothing resets the region: the 8th edit of /r.py in it
        // (a short session working one target) flags
        assert_eq!(v.first_flag.unwrap().index, 11);
    }

    #[test]
    fn shape_3_rewriting_one_spot_with_the_same_pass_after_each_is_no_progress() {
        let mut f = Feed::new();
        f.session("s", None, "build");
        let pass = |f: &mut Feed| {
            let text = json!({"command": "python3 tools/summary.py"}).to_string();
            let a: target::ArgList = serde_json::from_str(&text).unwrap();
            f.n += 1;
            let id = format!("prt_{}", f.n);
            f.d.call(&CallIn {
                exit: Some(0),
                out: Some("sha1:same"),
                ..f.call_in("s", &id, f.n * 1000, "bash", &a)
            });
        };
        // each edit replaces what the one before wrote
        for i in 0..7 {
            let e = json!({"filePath": "/s.py", "oldString": format!("sha1:{i}"), "newString": format!("sha1:{}", i + 1)});
            f.call("s", "edit", e, true, None);
            pass(&mut f);
        }
        let v = f.v("s");
        assert_eq!(v.reasons, [Signal::Unmoved]);
        // the first rewrite is call 3: its pass (call 4) starts the streak, the 4th is call 10
        assert_eq!(v.first_flag.unwrap().index, 10);
        // edits on new ground each time, the same pass after each: work
        let mut g = Feed::new();
        g.session("s", None, "build");
        for i in 0..7 {
            let e = json!({"filePath": "/s.py", "oldString": format!("sha1:o{i}"), "newString": format!("sha1:n{i}")});
            g.call("s", "edit", e, true, None);
            pass(&mut g);
        }
        assert!(g.v("s").first_flag.is_none());
    }

    #[test]
    fn a_verdict_with_calls_still_open_leaves_the_state_and_a_forgotten_session_the_others() {
        let mut f = Feed::new();
        for s in ["a", "b", "c"] {
            f.session(s, None, "build");
        }
        for _ in 0..4 {
            f.call("c", "read", json!({"filePath": "/x"}), false, Some(5));
        }
        let a: target::ArgList = serde_json::from_str(r#"{"filePath":"/x"}"#).unwrap();
        let open = [f.call_in("c", "open_1", 9000, "read", &a)];
        let with = f.d.verdict_with("c", &open).unwrap();
        assert_eq!((with.calls, with.t), (5, Some(9000)));
        assert_eq!(f.v("c").calls, 4, "the open call is not taken");
        // taken for good, the same verdict
        f.d.call(&open[0]);
        assert_eq!(f.v("c"), with);
        assert!(f.d.forget("a"));
        assert!(!f.d.forget("a"));
        assert_eq!(f.d.len(), 2);
        assert!(f.d.verdict("a").is_none());
        assert_eq!(f.v("c"), with);
        // the moved session still takes its calls
        f.call("c", "read", json!({"filePath": "/x"}), false, Some(5));
        assert_eq!(f.v("c").calls, 6);
        assert_eq!(f.v("b").calls, 0);
    }

    proptest::proptest! {
        #[test]
        fn no_distinct_call_is_dropped(
            ids in proptest::collection::vec("[a-c_]{0,3}[0-9]{0,3}", 1..120),
            sessions in proptest::collection::vec(0..3usize, 120),
        ) {
            // every distinct (session, id) pair is one call, however the ids resemble each other
            let mut f = Feed::new();
            let a: target::ArgList = serde_json::from_str(r#"{"filePath":"/a"}"#).unwrap();
            let mut distinct = std::collections::HashSet::new();
            for (i, id) in ids.iter().enumerate() {
                let s = ["s0", "s1", "s2"][sessions[i]];
                if distinct.insert((s, id.clone())) {
                    f.d.call(&f.call_in(s, id, 1000 - i as i64, "read", &a));
                    // sent again at once: that one is skipped
                    f.d.call(&f.call_in(s, id, 1000 - i as i64, "read", &a));
                }
            }
            let calls: u64 = f.d.verdicts().map(|(_, v)| v.calls).sum();
            proptest::prop_assert_eq!(calls, distinct.len() as u64);
            proptest::prop_assert_eq!(f.d.repeated, distinct.len() as u64);
        }
    }

    /// One call with its status and output, as a real run's records give them.
    fn sent(f: &mut Feed, tool: &str, args: Value, status: &str, landed: bool, out: &str) {
        let text = args.to_string();
        let a: target::ArgList = serde_json::from_str(&text).unwrap();
        f.n += 1;
        let id = format!("prt_{}", f.n);
        f.d.call(&CallIn {
            status,
            landed,
            exit: (tool == "bash").then_some(0),
            out: Some(out),
            ..f.call_in("s", &id, f.n * 1000, tool, &a)
        });
    }

    #[test]
    fn a_pending_call_a_killed_run_left_neither_repeats_nor_breaks_the_loop() {
        // a real `opencode run` re-reading docs/spec.md, killed with SIGKILL while its next
        // read was pending: opencode's record of it is `read`, status pending, input {}, for
        // good. Its verdict stayed flagged only while the killed read was still running; with
        // it, `run` restarted at the pending call and the loop resolved as progress
        let mut f = Feed::new();
        f.session("s", None, "build");
        let spec = json!({"filePath": "/w/docs/spec.md"});
        for _ in 0..6 {
            sent(
                &mut f,
                "read",
                spec.clone(),
                "completed",
                false,
                "sha1:ae98e3deca8b",
            );
        }
        assert_eq!(f.v("s").reasons, [Signal::Run]);
        let none = target::ArgList::default();
        let pending = CallIn {
            status: "pending",
            ..f.call_in("s", "prt_killed", 7000, "read", &none)
        };
        // in follow mode, as a call still open
        let v =
            f.d.verdict_with("s", std::slice::from_ref(&pending))
                .unwrap();
        assert_eq!((v.flagged, v.calls), (true, 7));
        assert_eq!(v.reasons, [Signal::Run]);
        // and taken, as the tick takes every call it reads
        f.d.call(&pending);
        let v = f.v("s");
        assert_eq!((v.flagged, v.calls), (true, 7));
        assert_eq!(v.signals.value(Signal::Run), 6.0);
    }

    #[test]
    fn a_landed_fix_re_sent_is_no_progress_and_flags_at_its_third_relanding() {
        // RepairAgent on defects4j JacksonDatabind 44 (the external corpus): one fix lands, then
        // rounds of another fix rejected, the same landed fix again (the harness puts the file back
        // after each failing test run, so it lands every time, with the same test report), a
        // read and a new hypothesis
        let mut f = Feed::new();
        f.session("s", None, "build");
        let file = "org/SimpleType.java";
        let fix = |h: &str| json!({"filePath": file, "changes": format!("sha1:{h}")});
        sent(
            &mut f,
            "read",
            json!({"filePath": file}),
            "completed",
            false,
            "sha1:r",
        );
        sent(
            &mut f,
            "edit",
            fix("ab16"),
            "completed",
            true,
            "sha1:report",
        );
        let mut flagged_at = None;
        for round in 0..4 {
            let other = fix(&format!("r{round}"));
            sent(&mut f, "edit", other, "error", false, "sha1:rejected");
            sent(
                &mut f,
                "edit",
                fix("ab16"),
                "completed",
                true,
                "sha1:report",
            );
            let think = json!({"hypothesis": format!("sha1:h{round}")});
            sent(
                &mut f,
                "express_hypothesis",
                think,
                "completed",
                false,
                "sha1:ok",
            );
            if flagged_at.is_none() && f.v("s").flagged {
                flagged_at = Some(f.n);
            }
        }
        let v = f.v("s");
        assert_eq!(v.reasons, [Signal::Relanded]);
        // landed at call 2; landed again at calls 4, 7 and 10: the third relanding flags
        assert_eq!(flagged_at, Some(11));
        assert_eq!(v.first_flag.unwrap().index, 10);
        let e = v.evidence.unwrap();
        let at: Vec<u64> = e.calls.iter().map(|c| c.index).collect();
        assert_eq!(at, [4, 7, 10, 13]);
        assert_eq!(e.last_landed.unwrap().index, 2);
        assert_eq!(v.signals.value(Signal::Relanded), 4.0);
        assert_eq!(
            v.signals.what(Signal::Relanded),
            Some("edit org/SimpleType.java")
        );
    }

    #[test]
    fn hard_negative_a_script_rebuilt_from_the_same_lines_with_one_new_line_each_time_is_work() {
        // mini-swe-agent fixing django 14349 (a productive run): it writes fix.py line by line
        // with echo, runs it, looks, puts the file back, and writes it again: the same lines land
        // again every round (four changes already made, between one new line and the next), but
        // the line it is fixing is new each time
        let mut f = Feed::new();
        f.session("s", None, "build");
        let bash = |c: String| json!({"command": c});
        for round in 0..6 {
            let lines = [
                "echo 'lines = open(\"v.py\").readlines()' > fix.py".to_string(),
                "echo -n 'lines.insert(114, \"' >> fix.py".to_string(),
                format!("echo -n 'if any(x in value for x in {round}):' >> fix.py"),
                "echo '\")' >> fix.py".to_string(),
                "echo 'open(\"v.py\", \"w\").write(\"\".join(lines))' >> fix.py".to_string(),
            ];
            for l in lines {
                sent(&mut f, "bash", bash(l), "completed", true, "sha1:empty");
            }
            sent(
                &mut f,
                "bash",
                bash("python3 fix.py".into()),
                "completed",
                false,
                "sha1:empty",
            );
            let look = bash("sed -n '113,118p' v.py".into());
            sent(
                &mut f,
                "bash",
                look,
                "completed",
                false,
                &format!("sha1:v{round}"),
            );
            let undo = bash("git checkout v.py".into());
            sent(&mut f, "bash", undo, "completed", false, "sha1:empty");
        }
        let v = f.v("s");
        assert!(v.first_flag.is_none(), "{:?}", v.reasons);
        assert_eq!(v.signals.value(Signal::Relanded), 1.0);
    }
}
