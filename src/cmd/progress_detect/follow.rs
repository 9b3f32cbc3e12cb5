//! `progress-detect --follow`: the live stream's judge (issue 27's follow mode).
//!
//! In: the stream of `oc-calls --follow`, read line by line as it comes: `session`, `call` and
//! `activity` records of the sessions that changed, every other kind passed on at once, and a
//! `sweep` record at the end of each read of the sources. Out: at each sweep, the `verdict` of
//! every session touched since the previous one whose verdict changed in any field (on a full
//! sweep, of every session it touched, as a timer tick writes them), judged with now = the
//! sweep's `t`; then the sweep itself, and a flush. EOF ends it (exit 0) once the batch read
//! since the last sweep is judged.
//!
//! The judging is the batch's: the same [`Detector`], fed the same calls in the same order, and
//! [`with_liveness`]. What differs is that a call comes more than once: `oc-calls --follow`
//! writes a call again when it changes (running, then completed; its step's cost and patch come
//! after it), and the later line replaces the earlier. The detector takes a call for good, so a
//! session's newest calls are held open (their lines, a few dozen at most) and judged on a copy
//! of the session's state at each sweep ([`Detector::verdict_with`]); a call is taken for good
//! once it has ended and no new line of it came for [`SETTLE_MS`]. A line of a call already
//! taken is not judged again (counted on stderr at EOF).
//!
//! Durations are measured on the monotonic clock the sweeps carry (`mono`, issue 42), where
//! they carry it: how long a call has settled, and a session's silence. A session's times are
//! its agent's wall clock; its "now" is carried forward on the monotonic clock from the moments
//! its newest time was seen to change ([`Frame`]), so a step of the watchdog's clock or of the
//! agent's is no silence and hides none. The sweep's wall time `t` judges a stream without
//! `mono`, as before.
//!
//! Memory stays flat over hours: a session is forgotten when [`FORGET_AFTER`] full sweeps in a
//! row did not list it and its last activity shows nothing running.

use super::{evidence_of, input, with_liveness, Args, Input, ParsedLine};
use crate::cli::{each_line, not_utf8, now_ms, Exit, Out};
use crate::config::{Config, DetectorConfig, LivenessConfig};
use crate::detect::{CallIn, Detector};
use crate::liveness::{Activity, SessionEvidence};
use crate::monotonic::Frame;
use crate::record::{to_line, Blind, Sweep};
use anyhow::Result;
use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::io::BufRead;

/// How long an ended call stays open to a new line of it before it is taken for good, in ms of
/// the sweeps' time. A call's last change (its step's cost, the patch that says a bash call
/// changed files) comes within a second or two of its end; 30 s leaves room for a slow disk,
/// and costs only re-judging the last half minute's calls of a session each sweep.
pub const SETTLE_MS: i64 = 30_000;

/// Open calls a session holds at most: past them the oldest is taken whatever its state (a call
/// left `running` by a killed opencode must not keep every later call open).
pub const OPEN_MAX: usize = 256;

/// Full sweeps in a row that did not list a session before it is forgotten (when nothing of it
/// runs): at the default 60 s between full reads, half an hour. A full read lists every session
/// active since the previous one and the trees of open alerts, so a session unlisted for half an
/// hour is idle and not alerting. Long enough that a session resumed after a pause keeps its
/// history (`oc-calls --follow`, which must forget a session no later than this, then sends
/// its calls again, which are recognised), short enough that an hour of sessions coming and
/// going holds only the last half hour's, a few kB each.
pub const FORGET_AFTER: u32 = 30;

/// One call whose line may still be replaced.
struct Open {
    id: String,
    /// Its latest line.
    line: String,
    /// Ended (`completed` or `error`).
    ended: bool,
    /// The time of the first sweep that saw this line of it: its monotonic reading, else its
    /// wall time.
    since: Option<i64>,
}

/// What the judge holds of one session beside the detector's state.
#[derive(Default)]
struct Held {
    evidence: Option<SessionEvidence>,
    activity: Option<Activity>,
    /// Calls not yet taken for good, in the order first seen.
    open: Vec<Open>,
    /// The calls taken for good, by a 64-bit hash of their id (SipHash; 8 bytes a call rather
    /// than the id: a collision among a session's calls is a chance of one in 10^11 at 10,000
    /// calls, and would only skip a line of a call).
    taken: HashSet<u64>,
    /// The verdict line last written.
    written: Option<String>,
    /// Full sweeps in a row that did not list it.
    unlisted: u32,
    /// A line of it came since the previous sweep.
    touched: bool,
    /// Its agent's clock, carried on the monotonic clock between its changes.
    frame: Frame,
}

impl Held {
    /// Something of the session runs: a model request in flight or a tool running, and an
    /// opencode process that could run it. A session whose process ended in mid-turn (killed,
    /// or a crash) keeps its last step in flight in the database for ever; without the second
    /// condition it was never forgotten, and each such session stayed held, about 11 kB each.
    fn running(&self) -> bool {
        let ended = self
            .evidence
            .as_ref()
            .is_some_and(|e| e.process.as_deref() == Some("ended"));
        !ended
            && self
                .activity
                .as_ref()
                .is_some_and(|a| a.in_flight || !a.running.is_empty())
    }
}

fn id_hash(id: &str) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    id.hash(&mut h);
    h.finish()
}

/// The follow mode's state: the detector and what it holds of each session.
pub struct DetectFollow {
    d: Detector,
    held: HashMap<String, Held>,
    /// The sessions touched since the previous sweep, in the order first touched.
    touched: Vec<String>,
    liveness: LivenessConfig,
    /// Lines not taken.
    pub bad: usize,
    /// Lines of calls already taken for good, not judged again.
    pub late: u64,
}

impl DetectFollow {
    pub fn new(dcfg: DetectorConfig, liveness: LivenessConfig) -> DetectFollow {
        DetectFollow {
            d: Detector::new(dcfg),
            held: HashMap::new(),
            touched: Vec::new(),
            liveness,
            bad: 0,
            late: 0,
        }
    }

    /// Sessions held.
    pub fn sessions(&self) -> usize {
        self.held.len()
    }

    /// Calls held open, over every session.
    pub fn open_calls(&self) -> usize {
        self.held.values().map(|h| h.open.len()).sum()
    }

    /// The session's holding, marked touched.
    fn touch(&mut self, id: &str) -> &mut Held {
        if !self.held.contains_key(id) {
            self.held.insert(id.to_string(), Held::default());
        }
        let h = self.held.get_mut(id).expect("inserted above");
        if !h.touched {
            h.touched = true;
            self.touched.push(id.to_string());
        }
        h
    }

    /// Takes one line (`name`:`n`): a record for the judge, a sweep that ends a batch, or any
    /// other line, passed on.
    pub fn line(&mut self, out: &mut Out, name: &str, n: usize, line: &str) -> Result<()> {
        let parsed = serde_json::from_str::<ParsedLine>(line);
        match input(line, &parsed) {
            Input::Session(s) => {
                let ev = evidence_of(&s);
                let id = s.id.clone();
                self.d.session(s);
                let h = self.touch(&id);
                if ev.is_some() {
                    h.evidence = ev;
                }
            }
            Input::Call(c) => self.call(&c, line),
            Input::Activity(a) => {
                let id = a.session.clone();
                self.touch(&id).activity = Some(a);
            }
            Input::Other(Some("sweep")) => match serde_json::from_str::<Sweep>(line) {
                Ok(s) => {
                    self.sweep_at(out, s.t, s.mono, s.full)?;
                    out.line(line)?;
                    out.flush()?;
                }
                Err(e) => self.bad(out, name, n, e)?,
            },
            Input::Other(_) => out.line(line)?,
            Input::Bad(why) => self.bad(out, name, n, why)?,
        }
        Ok(())
    }

    /// A call's line: a new open call, or the new line of an open one.
    fn call(&mut self, c: &CallIn, line: &str) {
        let h = self.touch(c.session);
        if h.taken.contains(&id_hash(c.id)) {
            self.late += 1;
            return;
        }
        let ended = matches!(c.status, "completed" | "error");
        match h.open.iter_mut().find(|o| o.id == c.id) {
            Some(o) => {
                o.line.clear();
                o.line.push_str(line);
                o.ended = ended;
                o.since = None;
            }
            None => h.open.push(Open {
                id: c.id.to_string(),
                line: line.to_string(),
                ended,
                since: None,
            }),
        }
    }

    /// Names a line not taken on stderr, and in the stream as a `blind` record: the batch it
    /// belonged to lost something, so it is no all-clear (the batch tick says so by its exit).
    fn bad(
        &mut self,
        out: &mut Out,
        name: &str,
        n: usize,
        why: impl std::fmt::Display,
    ) -> Result<()> {
        eprintln!("progress-detect: {name}:{n}: {why}");
        self.bad += 1;
        let b = Blind {
            source: "progress-detect".into(),
            reason: format!("{name}:{n}: a line progress-detect could not read (see its log)"),
        };
        out.line(&to_line("blind", &b)?)?;
        Ok(())
    }

    /// Ends a batch at wall time `now`, of a stream that carries no monotonic readings.
    pub fn sweep(&mut self, out: &mut Out, now: i64, full: bool) -> Result<()> {
        self.sweep_at(out, now, None, full)
    }

    /// Ends a batch at wall time `now` and monotonic `mono`: takes for good the calls that can
    /// no longer change, writes the verdicts of the sessions touched (those that changed; every
    /// one on a `full` sweep) and, on a full sweep, forgets the sessions long unlisted.
    pub fn sweep_at(
        &mut self,
        out: &mut Out,
        now: i64,
        mono: Option<i64>,
        full: bool,
    ) -> Result<()> {
        if full {
            self.count_unlisted();
        }
        let mut settle: Vec<String> = self.touched.clone();
        if full {
            // sessions gone quiet have calls left open too
            settle.extend(
                self.held
                    .iter()
                    .filter(|(_, h)| !h.touched && !h.open.is_empty())
                    .map(|(id, _)| id.clone()),
            );
        }
        for id in &settle {
            self.settle(id, mono.unwrap_or(now));
        }
        for id in std::mem::take(&mut self.touched) {
            self.judge(out, &id, (now, mono), full)?;
        }
        if full {
            self.forget();
        }
        Ok(())
    }

    /// Takes for good the session's open calls, oldest first, while each has ended and stayed
    /// unchanged for [`SETTLE_MS`] (or more than [`OPEN_MAX`] are open), `now` on the clock the
    /// sweeps measure on. The ancestors a landing credits are touched: their verdicts may
    /// change with it.
    fn settle(&mut self, id: &str, now: i64) {
        let Some(h) = self.held.get_mut(id) else {
            return;
        };
        for o in &mut h.open {
            o.since.get_or_insert(now);
        }
        let ready = h
            .open
            .iter()
            .take_while(|o| o.ended && o.since.is_some_and(|s| now - s >= SETTLE_MS))
            .count()
            .max(h.open.len().saturating_sub(OPEN_MAX));
        if ready == 0 {
            return;
        }
        let taken: Vec<Open> = h.open.drain(..ready).collect();
        h.taken.extend(taken.iter().map(|o| id_hash(&o.id)));
        let mut landed = false;
        for o in &taken {
            let parsed = serde_json::from_str::<ParsedLine>(&o.line);
            if let Input::Call(c) = input(&o.line, &parsed) {
                landed |= c.landed;
                self.d.call(&c);
            }
        }
        if landed {
            for up in self.d.ancestors(id) {
                if self.held.contains_key(&up) {
                    self.touch(&up);
                }
            }
        }
    }

    /// Writes session `id`'s verdict at `now` (wall, and monotonic where the stream says) when
    /// it differs from the one last written (or `always`).
    fn judge(
        &mut self,
        out: &mut Out,
        id: &str,
        (wall, mono): (i64, Option<i64>),
        always: bool,
    ) -> Result<()> {
        let Some(h) = self.held.get_mut(id) else {
            return Ok(());
        };
        h.touched = false;
        let lines: Vec<serde_json::Result<ParsedLine>> = h
            .open
            .iter()
            .map(|o| serde_json::from_str(&o.line))
            .collect();
        let tail: Vec<CallIn> = h
            .open
            .iter()
            .zip(&lines)
            .filter_map(|(o, l)| match input(&o.line, l) {
                Input::Call(c) => Some(c),
                _ => None,
            })
            .collect();
        // a session known only by its activity has no verdict, as in the batch
        let Some(v) = self.d.verdict_with(id, &tail) else {
            return Ok(());
        };
        // the session's "now" on its agent's clock
        let now = match mono {
            Some(m) => h.frame.now(h.activity.as_ref().and_then(newest), wall, m),
            None => wall,
        };
        let v = with_liveness(
            v,
            h.evidence.as_ref(),
            h.activity.as_ref(),
            now,
            &self.liveness,
        );
        let line = to_line("verdict", &v)?;
        if always || h.written.as_deref() != Some(line.as_str()) {
            out.line(&line)?;
            h.written = Some(line);
        }
        Ok(())
    }

    /// At a full sweep: a session it listed (or that sent anything) starts its count of
    /// unlisted full sweeps again, any other counts one more.
    fn count_unlisted(&mut self) {
        for h in self.held.values_mut() {
            h.unlisted = if h.touched { 0 } else { h.unlisted + 1 };
        }
    }

    /// Forgets the sessions unlisted for [`FORGET_AFTER`] full sweeps with nothing running.
    fn forget(&mut self) {
        let gone: Vec<String> = self
            .held
            .iter()
            .filter(|(_, h)| h.unlisted >= FORGET_AFTER && !h.running())
            .map(|(id, _)| id.clone())
            .collect();
        for id in gone {
            self.held.remove(&id);
            self.d.forget(&id);
        }
    }
}

/// The newest time a session's activity gives: its last progress, or a call started since.
fn newest(a: &Activity) -> Option<i64> {
    a.running.iter().map(|r| r.t).chain(a.last_progress).max()
}

/// `progress-detect --follow`: reads the stream line by line, judging at each sweep.
pub fn run(
    args: &Args,
    cfg: &Config,
    dcfg: DetectorConfig,
    stdin: &mut dyn BufRead,
    out: &mut Out,
) -> Result<Exit> {
    let mut f = DetectFollow::new(dcfg, cfg.liveness.clone());
    each_line(&args.files, stdin, |name, n, line| match line {
        Ok(line) => f.line(out, name, n, line),
        Err(col) => f.bad(out, name, n, not_utf8(col)),
    })?;
    // the batch read since the last sweep, judged as a partial one
    if !f.touched.is_empty() {
        f.sweep(out, args.now.unwrap_or_else(now_ms), false)?;
    }
    out.flush()?;
    if f.late > 0 {
        eprintln!(
            "progress-detect: {} line(s) of calls already judged for good were not judged again",
            f.late
        );
    }
    Ok(Exit::Ok)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Verdict;
    use clap::Parser;
    use serde_json::{json, Value};

    const FIXTURE: &str = include_str!("../../../fixtures/labelled.jsonl");

    /// Runs progress-detect with `extra` arguments over `input`; its output lines.
    fn run_on(extra: &[&str], input: &str) -> Vec<Value> {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("watchdog.toml");
        std::fs::write(&config, "").unwrap();
        let mut argv = vec!["progress-detect", "--config", config.to_str().unwrap()];
        argv.extend_from_slice(extra);
        let (mut out, buf) = Out::buffer();
        let code = super::super::run(
            Args::parse_from(argv),
            &mut std::io::Cursor::new(input.to_string()),
            &mut out,
        )
        .unwrap();
        out.flush().unwrap();
        assert_eq!(code, Exit::Ok);
        buf.text()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    fn kind<'a>(lines: &'a [Value], k: &str) -> Vec<&'a Value> {
        lines.iter().filter(|l| l["kind"] == k).collect()
    }

    /// The labelled fixture as `oc-calls --follow` would send it: a few lines per sweep, one
    /// sweep a second (every 60th full), every third call first as running (no output, no exit,
    /// not landed) and completed two sweeps later; then a full read of every session. Returns the
    /// stream and the last sweep's time.
    fn as_followed(fixture: &str) -> (String, i64) {
        let lines: Vec<Value> = fixture
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let mut t = lines.iter().filter_map(|l| l["t"].as_i64()).min().unwrap();
        let (mut out, mut later, mut n) = (Vec::new(), Vec::new(), 0);
        for (i, l) in lines.iter().enumerate() {
            if l["kind"] == "call" && i % 3 == 0 {
                let mut r = l.clone();
                for (k, v) in [
                    ("status", json!("running")),
                    ("out", Value::Null),
                    ("exit", Value::Null),
                    ("end", Value::Null),
                    ("landed", json!(false)),
                ] {
                    r[k] = v;
                }
                out.push(r);
                later.push(l.clone());
            } else {
                out.push(l.clone());
            }
            if i % 4 == 3 {
                while later.len() > 2 {
                    out.push(later.remove(0));
                }
                n += 1;
                t += 1000;
                out.push(json!({"kind": "sweep", "n": n, "t": t, "full": n % 60 == 0}));
            }
        }
        out.append(&mut later);
        out.extend(lines.iter().filter(|l| l["kind"] == "session").cloned());
        t += 1000;
        out.push(json!({"kind": "sweep", "n": n + 1, "t": t, "full": true}));
        let text = out.iter().map(|v| v.to_string() + "\n").collect();
        (text, t)
    }

    #[test]
    fn the_fixtures_sessions_followed_sweep_by_sweep_end_with_the_batch_verdicts() {
        let (stream, end) = as_followed(FIXTURE);
        let rewritten = stream.matches(r#""status":"running""#).count();
        assert_eq!(rewritten, 395);
        let batch = run_on(&["--now", &end.to_string()], FIXTURE);
        let followed = run_on(&["--follow"], &stream);
        let batch: Vec<Verdict> = kind(&batch, "verdict")
            .into_iter()
            .map(|v| serde_json::from_value(v.clone()).unwrap())
            .collect();
        assert_eq!(batch.len(), 44);
        assert_eq!(batch.iter().filter(|v| v.flagged).count(), 23);
        let mut last: HashMap<String, Verdict> = HashMap::new();
        let written = kind(&followed, "verdict");
        for v in &written {
            let v: Verdict = serde_json::from_value((*v).clone()).unwrap();
            last.insert(v.session.clone(), v);
        }
        // a session's verdict is written again as its calls come, not once per sweep
        assert_eq!(written.len(), 417);
        assert_eq!(kind(&followed, "sweep").len(), 323);
        for b in &batch {
            let f = &last[&b.session];
            assert_eq!(f, b, "session {} {:?}", b.session, b.title);
        }
        // the first flag came while the calls came, at the same call as the batch's
        let first = written
            .iter()
            .find(|v| v["flagged"] == true)
            .expect("a flag while following");
        let b = batch
            .iter()
            .find(|b| b.session == first["session"])
            .unwrap();
        assert_eq!(
            first["first_flag"]["index"],
            b.first_flag.as_ref().unwrap().index
        );
    }

    fn session(id: &str) -> String {
        json!({"kind": "session", "id": id, "agent": "build", "title": id}).to_string()
    }

    /// A run of `make test`, failing once it has ended.
    fn call(s: &str, id: &str, t: i64, status: &str) -> String {
        let exit = (status == "completed").then_some(2);
        json!({"kind": "call", "session": s, "id": id, "t": t, "tool": "bash",
               "args": {"command": "make test"}, "status": status, "exit": exit})
        .to_string()
    }

    fn sweep(n: u64, t: i64, full: bool) -> String {
        json!({"kind": "sweep", "n": n, "t": t, "full": full}).to_string()
    }

    #[test]
    fn an_idle_stream_writes_no_verdict_on_partial_sweeps_and_every_listed_one_on_a_full_one() {
        let mut lines = vec![
            session("a"),
            session("b"),
            call("a", "p1", 1000, "completed"),
        ];
        lines.push(sweep(1, 2000, true));
        for n in 2..5 {
            lines.push(sweep(n, n as i64 * 1000, false));
        }
        // b listed again, unchanged, on a partial sweep: nothing to write
        lines.push(session("b"));
        lines.push(sweep(5, 5000, false));
        // a full read lists a alone
        lines.push(session("a"));
        lines.push(sweep(6, 6000, true));
        let out = run_on(&["--follow"], &(lines.join("\n") + "\n"));
        let seen: Vec<String> = out
            .iter()
            .map(|l| match l["kind"].as_str().unwrap() {
                "verdict" => format!("verdict {} {}", l["session"].as_str().unwrap(), l["calls"]),
                "sweep" => format!("sweep {}", l["n"]),
                k => k.to_string(),
            })
            .collect();
        assert_eq!(
            seen,
            [
                "verdict a 1",
                "verdict b 0",
                "sweep 1",
                "sweep 2",
                "sweep 3",
                "sweep 4",
                "sweep 5",
                "verdict a 1",
                "sweep 6"
            ]
        );
    }

    #[test]
    fn a_call_rewritten_replaces_its_earlier_line_and_counts_once() {
        // five runs of the same failing test flag the session (a run of 5); a sixth call that
        // starts and then completes is one call, not two
        let mut lines = vec![session("s")];
        for i in 0..4 {
            lines.push(call("s", &format!("p{i}"), i * 1000, "completed"));
        }
        lines.push(call("s", "p4", 4000, "running"));
        lines.push(sweep(1, 4500, false));
        lines.push(call("s", "p4", 4000, "completed"));
        lines.push(sweep(2, 5000, false));
        let out = run_on(&["--follow"], &(lines.join("\n") + "\n"));
        let v = kind(&out, "verdict");
        assert_eq!(v.len(), 2, "{v:?}");
        assert_eq!(
            (v[0]["calls"].as_u64(), v[1]["calls"].as_u64()),
            (Some(5), Some(5))
        );
        assert_eq!(v[1]["flagged"], true);
        assert_eq!(v[1]["first_flag"]["id"], "p4");
    }

    #[test]
    fn a_bad_line_is_named_blinds_its_batch_and_loses_nothing_else() {
        let mut lines = vec![session("s")];
        for i in 0..3 {
            lines.push(call("s", &format!("p{i}"), i * 1000, "completed"));
        }
        lines.push(r#"{"kind":"call","session":"s","t":5}"#.to_string());
        lines.push(r#"{"kind":"zzz","keep":1}"#.to_string());
        lines.push(call("s", "p3", 3000, "completed"));
        lines.push(sweep(1, 4000, false));
        let out = run_on(&["--follow"], &(lines.join("\n") + "\n"));
        let kinds: Vec<&str> = out.iter().map(|l| l["kind"].as_str().unwrap()).collect();
        assert_eq!(kinds, ["blind", "zzz", "verdict", "sweep"]);
        assert_eq!(
            out[0]["reason"],
            "stdin:5: a line progress-detect could not read (see its log)"
        );
        assert_eq!(out[2]["calls"], 4);
    }

    /// Issue 42: the watchdog's wall clock steps an hour forward while a busy session goes on
    /// (its agent's clock not stepped), then back. On the monotonic readings the sweeps carry,
    /// the session stays active and its ended call settles after 30 s; judged on the sweeps'
    /// wall time, as before, it was an hour silent (stalled), and the call, first seen on the
    /// stepped clock, was held open for an hour.
    #[test]
    fn a_step_of_the_wall_clock_is_no_silence_and_holds_no_call_open() {
        const H: i64 = 3_600_000;
        let t0 = 10 * H;
        let busy = json!({"kind": "session", "id": "s", "agent": "build", "title": "s",
                          "status": "busy"})
        .to_string();
        let act = |t: i64| {
            json!({"kind": "activity", "session": "s", "last_progress": t, "in_flight": true,
                   "running": [], "error": null})
            .to_string()
        };
        // (sweep's wall time, its monotonic reading, what the stream brings before it)
        let sweeps: Vec<(i64, i64, Vec<String>)> = vec![
            (t0, 1000, vec![busy.clone(), act(t0 - 500)]),
            // stepped forward; the session's next change, made since the last sweep
            (
                t0 + H + 1000,
                2000,
                vec![
                    busy.clone(),
                    call("s", "p1", t0 + 400, "completed"),
                    act(t0 + 500),
                ],
            ),
            // nothing new: 2 s on the monotonic clock
            (t0 + H + 3000, 4000, vec![busy.clone()]),
            // stepped back; half a minute later
            (t0 + 34_000, 34_000, vec![busy.clone()]),
        ];
        let run = |with_mono: bool| {
            let mut f = DetectFollow::new(DetectorConfig::default(), LivenessConfig::default());
            let (mut out, buf) = Out::buffer();
            for (n, (t, mono, lines)) in sweeps.iter().enumerate() {
                for l in lines {
                    f.line(&mut out, "stdin", n, l).unwrap();
                }
                f.sweep_at(&mut out, *t, with_mono.then_some(*mono), false)
                    .unwrap();
            }
            out.flush().unwrap();
            let lines: Vec<Value> = buf
                .text()
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect();
            let classes: Vec<String> = kind(&lines, "verdict")
                .iter()
                .map(|v| {
                    format!(
                        "{} {}",
                        v["liveness"]["class"].as_str().unwrap(),
                        v["liveness"]["silence_s"]
                    )
                })
                .collect();
            (classes, f.open_calls())
        };
        assert_eq!(
            run(true),
            (
                vec![
                    "active 0".to_string(),
                    "active 1".to_string(),
                    "active 3".to_string(),
                    "active 33".to_string()
                ],
                0
            )
        );
        assert_eq!(
            run(false),
            (
                vec![
                    "active 0".to_string(),
                    "stalled 3600".to_string(),
                    "stalled 3602".to_string(),
                    "active 33".to_string()
                ],
                1
            )
        );
    }

    #[test]
    fn a_session_unlisted_for_half_an_hour_of_full_sweeps_is_forgotten_unless_it_runs() {
        let mut f = DetectFollow::new(DetectorConfig::default(), LivenessConfig::default());
        let (mut out, _buf) = Out::buffer();
        for l in [
            session("idle"),
            session("busy"),
            call("idle", "p1", 1, "completed"),
        ] {
            f.line(&mut out, "stdin", 1, &l).unwrap();
        }
        let act = json!({"kind": "activity", "session": "busy", "last_progress": 1,
                         "in_flight": true, "running": [], "error": null});
        f.line(&mut out, "stdin", 2, &act.to_string()).unwrap();
        // killed in mid-turn: its last step stays in flight in the database, its process ended
        let killed = json!({"kind": "session", "id": "killed", "agent": "build",
                            "title": "killed", "process": "ended"});
        f.line(&mut out, "stdin", 3, &killed.to_string()).unwrap();
        let act = json!({"kind": "activity", "session": "killed", "last_progress": 1,
                         "in_flight": true, "running": [], "error": null});
        f.line(&mut out, "stdin", 4, &act.to_string()).unwrap();
        f.sweep(&mut out, 1000, true).unwrap();
        for n in 1..FORGET_AFTER {
            f.sweep(&mut out, 1000 + n as i64 * 60_000, true).unwrap();
        }
        assert_eq!((f.sessions(), f.d.len()), (3, 3));
        // the call that ended was taken for good: nothing held open
        assert_eq!(f.open_calls(), 0);
        f.sweep(&mut out, 2_000_000, true).unwrap();
        assert_eq!(f.sessions(), 1);
        assert!(f.held.contains_key("busy"));
        assert!(f.d.verdict("idle").is_none());
        assert!(f.d.verdict("killed").is_none());
        // a line of a call already taken is not judged again
        let mut g = DetectFollow::new(DetectorConfig::default(), LivenessConfig::default());
        g.line(&mut out, "stdin", 1, &call("s", "p1", 1, "completed"))
            .unwrap();
        g.sweep(&mut out, 1000, false).unwrap();
        g.sweep(&mut out, 1000 + SETTLE_MS, false).unwrap();
        assert_eq!(
            g.open_calls(),
            1,
            "settled only when the session is swept again"
        );
        g.line(&mut out, "stdin", 2, &call("s", "p2", 2, "running"))
            .unwrap();
        g.sweep(&mut out, 1000 + SETTLE_MS, false).unwrap();
        assert_eq!(g.open_calls(), 1);
        g.line(&mut out, "stdin", 3, &call("s", "p1", 1, "completed"))
            .unwrap();
        assert_eq!(g.late, 1);
        assert_eq!(g.d.verdict_with("s", &[]).unwrap().calls, 1);
    }
}
