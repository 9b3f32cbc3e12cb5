//! `wd-store calls`: the stage of the tick between oc-calls and progress-detect that keeps, for
//! the operator's page, what a picture needs of each session's latest calls (see
//! [`crate::store::marks`]). Every line passes on unchanged, as it comes.
//!
//! With `--follow` (the live pipeline): each session's latest [`KEEP`] calls are kept across
//! batches, a later line of a call replacing the earlier (`oc-calls --follow` writes a call again
//! when it changes), and at each `sweep` record those of the sessions in the batch are staged,
//! then the sweep passes on and stdout is flushed. A session no batch named for
//! [`FORGET_AFTER`] full sweeps is forgotten, so memory stays flat.

use super::Ctx;
use crate::cli::{Exit, Out};
use crate::detect::target;
use crate::record::{each_record, Call, Record, Sweep};
use crate::store::marks::{self, CallMark, KEEP};
use anyhow::Result;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::io::BufRead;

/// Passes the stream on, staging the latest calls of each session for the next tick as the
/// session ends (oc-calls writes a session's `activity` record after its last call), a chunk of
/// [`CHUNK_MARKS`] marks at a time: memory holds the sessions still streaming and one chunk,
/// not the whole batch. Sessions with no `activity` record are staged at the end.
pub fn run(cx: &mut Ctx, stdin: &mut dyn BufRead, out: &mut Out) -> Result<Exit> {
    let mut dirs: HashMap<String, Option<String>> = HashMap::new();
    let mut calls: HashMap<String, LatestCalls> = HashMap::new();
    let mut stage = Stager::default();
    each_record(&[], stdin, |line| {
        out.line(line.raw)?;
        // unreadable lines are progress-detect's to report: it judges the same stream
        match line.record {
            Ok(Record::Session(s)) => {
                dirs.insert(s.id, s.directory);
            }
            Ok(Record::Call(c)) => calls.entry(c.session.clone()).or_default().add(c),
            Ok(Record::Activity(a)) => {
                let dir = dirs.remove(&a.session).flatten();
                if let Some(l) = calls.remove(&a.session) {
                    stage.add(cx, a.session, l.marks(dir.as_deref()));
                }
            }
            _ => {}
        }
        Ok(())
    })?;
    let mut rest: Vec<(String, LatestCalls)> = calls.into_iter().collect();
    rest.sort_by(|a, b| a.0.cmp(&b.0));
    for (s, l) in rest {
        let dir = dirs.get(&s).cloned().flatten();
        stage.add(cx, s, l.marks(dir.as_deref()));
    }
    stage.flush(cx);
    Ok(Exit::Ok)
}

/// Marks staged in one write: about 2 MB of them, in a transaction short enough not to hold
/// the database from the stages beside this one.
const CHUNK_MARKS: usize = 10_000;

/// The batch's marks on their way to the stage, written a chunk at a time; the first write
/// replaces what the last tick left staged.
#[derive(Default)]
struct Stager {
    pending: Vec<(String, Vec<CallMark>)>,
    marks: usize,
    written: bool,
    failed: bool,
}

impl Stager {
    fn add(&mut self, cx: &mut Ctx, session: String, marks: Vec<CallMark>) {
        self.marks += marks.len();
        self.pending.push((session, marks));
        if self.marks >= CHUNK_MARKS {
            self.flush(cx);
        }
    }

    fn flush(&mut self, cx: &mut Ctx) {
        let chunk = std::mem::take(&mut self.pending);
        self.marks = 0;
        if self.failed || (self.written && chunk.is_empty()) {
            return;
        }
        let first = !self.written;
        self.written = true;
        let staged = cx.store.write().and_then(|tx| {
            if first {
                marks::stage(&tx, &chunk)?;
            } else {
                marks::stage_sessions(&tx, &chunk)?;
            }
            Ok(tx.commit()?)
        });
        // the page's pictures are an aid: failing to keep them never costs the tick (and the
        // stream has passed on already); said once
        if let Err(e) = staged {
            self.failed = true;
            eprintln!(
                "wd-store: the calls for the page were not kept: {:#}",
                cx.store.explain(e)
            );
        }
    }
}

/// One session's latest [`KEEP`] calls, kept as they stream in: memory is bounded by
/// `KEEP` calls and about 16 bytes per distinct call id (a 2M-call session is not held whole). A call
/// re-read from a second source is the same call (counted once, kept once).
#[derive(Default)]
struct LatestCalls {
    ids: HashSet<u64>,
    keep: BTreeMap<(i64, String), Call>,
}

impl LatestCalls {
    fn add(&mut self, c: Call) {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        c.id.hash(&mut h);
        if !self.ids.insert(h.finish()) {
            return;
        }
        self.keep.insert((c.t, c.id.clone()), c);
        if self.keep.len() > KEEP {
            self.keep.pop_first();
        }
    }

    /// The kept calls as marks, in time order; `seq` counts from the session's first call.
    /// `dir` is the session's directory, for targets relative to it.
    fn marks(self, dir: Option<&str>) -> Vec<CallMark> {
        let first = self.ids.len() - self.keep.len();
        self.keep
            .into_values()
            .enumerate()
            .map(|(i, c)| CallMark {
                seq: (first + i) as i64,
                t: c.t,
                tool: c.tool.clone(),
                landed: c.landed,
                failed: c.status == "error",
                target: target::describe(&c.tool, &c.args, dir),
                key: format!("{:016x}", target::keys(&c.tool, &c.args).target),
            })
            .collect()
    }
}

/// A call as the page draws it, at position `seq` of its session.
fn mark(c: &Call, seq: i64, dir: Option<&str>) -> CallMark {
    CallMark {
        seq,
        t: c.t,
        tool: c.tool.clone(),
        landed: c.landed,
        failed: c.status == "error",
        target: target::describe(&c.tool, &c.args, dir),
        key: format!("{:016x}", target::keys(&c.tool, &c.args).target),
    }
}

/// Full sweeps in a row without a line of a session before `--follow` forgets it: half an hour
/// at the default 60 s between full reads, as progress-detect --follow does (a session resumed
/// within it keeps its latest calls; its calls sent again replace themselves).
pub const FORGET_AFTER: u32 = 30;

/// What `--follow` keeps of one session.
#[derive(Default)]
struct KeptSession {
    dir: Option<String>,
    /// The latest [`KEEP`] calls by (start, id), with their ids; a mark's `seq` is set when staged.
    marks: Vec<(String, CallMark)>,
    /// Distinct calls seen, those no longer kept included (the marks' positions count from it).
    seen: u64,
    unlisted: u32,
    touched: bool,
}

impl KeptSession {
    /// Takes a call's line: a new call, or the latest line of one kept; a call older than every
    /// kept one of a full window has dropped out already and stays out.
    fn call(&mut self, c: &Call) {
        let m = mark(c, 0, self.dir.as_deref());
        if let Some(k) = self.marks.iter_mut().find(|(id, _)| *id == c.id) {
            k.1 = m;
            self.marks.sort_by(|a, b| (a.1.t, &a.0).cmp(&(b.1.t, &b.0)));
            return;
        }
        let at = self
            .marks
            .partition_point(|(id, k)| (k.t, id.as_str()) < (c.t, c.id.as_str()));
        if at == 0 && self.marks.len() >= KEEP {
            return;
        }
        self.marks.insert(at, (c.id.clone(), m));
        self.seen += 1;
        if self.marks.len() > KEEP {
            self.marks.remove(0);
        }
    }

    /// The kept calls, numbered as the session's latest.
    fn staged(&self) -> Vec<CallMark> {
        let first = self.seen as i64 - self.marks.len() as i64;
        self.marks
            .iter()
            .enumerate()
            .map(|(i, (_, m))| CallMark {
                seq: first + i as i64,
                ..m.clone()
            })
            .collect()
    }
}

/// `wd-store calls --follow`: passes the stream on as it comes, staging each batch's sessions'
/// latest calls at its sweep.
pub fn follow(cx: &mut Ctx, stdin: &mut dyn BufRead, out: &mut Out) -> Result<Exit> {
    let mut held: HashMap<String, KeptSession> = HashMap::new();
    let mut touched: Vec<String> = Vec::new();
    each_record(&[], stdin, |line| {
        match line.record {
            Ok(Record::Session(s)) => touch(&mut held, &mut touched, &s.id).dir = s.directory,
            Ok(Record::Call(c)) => touch(&mut held, &mut touched, &c.session).call(&c),
            Ok(Record::Sweep(Sweep { full, .. })) => {
                stage_batch(cx, &mut held, &std::mem::take(&mut touched), full);
                out.line(line.raw)?;
                out.flush()?;
                return Ok(());
            }
            _ => {}
        }
        out.line(line.raw)?;
        Ok(())
    })?;
    stage_batch(cx, &mut held, &touched, false);
    out.flush()?;
    Ok(Exit::Ok)
}

/// The session's holding, marked as in the batch.
fn touch<'a>(
    held: &'a mut HashMap<String, KeptSession>,
    touched: &mut Vec<String>,
    id: &str,
) -> &'a mut KeptSession {
    let k = held.entry(id.to_string()).or_default();
    if !k.touched {
        k.touched = true;
        touched.push(id.to_string());
    }
    k
}

/// Stages the latest calls of the batch's sessions (`touched`); on a `full` sweep, forgets the
/// sessions unnamed for [`FORGET_AFTER`] of them.
fn stage_batch(
    cx: &mut Ctx,
    held: &mut HashMap<String, KeptSession>,
    touched: &[String],
    full: bool,
) {
    let sessions: Vec<(String, Vec<CallMark>)> = touched
        .iter()
        .filter_map(|id| Some((id.clone(), held.get(id)?.staged())))
        .filter(|(_, m)| !m.is_empty())
        .collect();
    if full {
        held.retain(|_, k| {
            k.unlisted = if k.touched { 0 } else { k.unlisted + 1 };
            k.unlisted < FORGET_AFTER
        });
    }
    for k in held.values_mut() {
        k.touched = false;
    }
    if sessions.is_empty() {
        return;
    }
    // as in the batch: the pictures are an aid, failing to keep them never stops the stream
    let staged = cx
        .store
        .write()
        .and_then(|tx| Ok((marks::stage_sessions(&tx, &sessions)?, tx.commit()?)));
    if let Err(e) = staged {
        eprintln!(
            "wd-store: the calls for the page were not kept: {:#}",
            cx.store.explain(e)
        );
    }
}
