//! `wd-store calls`: the stage of the tick between oc-calls and progress-detect that keeps, for
//! the operator's page, what a picture needs of each session's latest calls (see
//! [`crate::store::marks`]). Every line passes on unchanged, as it comes.

use super::Ctx;
use crate::cli::{Exit, Out};
use crate::detect::target;
use crate::record::{each_record, Call, Record};
use crate::store::marks::{self, CallMark, KEEP};
use anyhow::Result;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::io::BufRead;

/// Passes the stream on, then stages the latest calls of every session in it for the next tick.
pub fn run(cx: &mut Ctx, stdin: &mut dyn BufRead, out: &mut Out) -> Result<Exit> {
    let mut dirs: HashMap<String, Option<String>> = HashMap::new();
    let mut calls: HashMap<String, Latest> = HashMap::new();
    each_record(&[], stdin, |line| {
        out.line(line.raw)?;
        // unreadable lines are progress-detect's to report: it judges the same stream
        match line.record {
            Ok(Record::Session(s)) => {
                dirs.insert(s.id, s.directory);
            }
            Ok(Record::Call(c)) => calls.entry(c.session.clone()).or_default().add(c),
            _ => {}
        }
        Ok(())
    })?;
    let mut sessions: Vec<(String, Vec<CallMark>)> = calls
        .into_iter()
        .map(|(s, l)| {
            let dir = dirs.get(&s).cloned().flatten();
            let m = l.marks(dir.as_deref());
            (s, m)
        })
        .collect();
    sessions.sort_by(|a, b| a.0.cmp(&b.0));
    // the page's pictures are an aid: failing to keep them never costs the tick (and the
    // stream has passed on already)
    let staged = cx
        .store
        .write()
        .and_then(|tx| Ok((marks::stage(&tx, &sessions)?, tx.commit()?)));
    if let Err(e) = staged {
        eprintln!(
            "wd-store: the calls for the page were not kept: {:#}",
            cx.store.explain(e)
        );
    }
    Ok(Exit::Ok)
}

/// One session's latest [`KEEP`] calls, kept as they stream in: memory is bounded by
/// `KEEP` calls and about 16 bytes per distinct call id (a 2M-call session is not held whole). A call
/// re-read from a second source is the same call (counted once, kept once).
#[derive(Default)]
struct Latest {
    ids: HashSet<u64>,
    keep: BTreeMap<(i64, String), Call>,
}

impl Latest {
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
