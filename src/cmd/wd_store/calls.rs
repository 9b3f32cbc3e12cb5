//! `wd-store calls`: the stage of the tick between oc-calls and progress-detect that keeps, for
//! the operator's page, what a picture needs of each session's latest calls (see
//! [`crate::store::marks`]). Every line passes on unchanged, as it comes.

use super::Ctx;
use crate::cli::{Exit, Out};
use crate::detect::target;
use crate::record::{each_record, Call, Record};
use crate::store::marks::{self, CallMark, KEEP};
use anyhow::Result;
use std::collections::HashMap;
use std::io::BufRead;

/// Passes the stream on, then stages the latest calls of every session in it for the next tick.
pub fn run(cx: &mut Ctx, stdin: &mut dyn BufRead, out: &mut Out) -> Result<Exit> {
    let mut dirs: HashMap<String, Option<String>> = HashMap::new();
    let mut calls: HashMap<String, Vec<Call>> = HashMap::new();
    each_record(&[], stdin, |line| {
        out.line(line.raw)?;
        // unreadable lines are progress-detect's to report: it judges the same stream
        match line.record {
            Ok(Record::Session(s)) => {
                dirs.insert(s.id, s.directory);
            }
            Ok(Record::Call(c)) => calls.entry(c.session.clone()).or_default().push(c),
            _ => {}
        }
        Ok(())
    })?;
    let mut sessions: Vec<(String, Vec<CallMark>)> = calls
        .into_iter()
        .map(|(s, cs)| {
            let dir = dirs.get(&s).cloned().flatten();
            let m = latest(cs, dir.as_deref());
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

/// One session's latest [`KEEP`] calls as marks; a call re-read from a second source is the
/// same call. `dir` is the session's directory, for targets relative to it.
fn latest(mut cs: Vec<Call>, dir: Option<&str>) -> Vec<CallMark> {
    cs.sort_by(|a, b| (a.t, &a.id).cmp(&(b.t, &b.id)));
    cs.dedup_by(|a, b| a.id == b.id);
    let skip = cs.len().saturating_sub(KEEP);
    cs.iter()
        .enumerate()
        .skip(skip)
        .map(|(i, c)| CallMark {
            seq: i as i64,
            t: c.t,
            tool: c.tool.clone(),
            landed: c.landed,
            failed: c.status == "error",
            target: target::describe(&c.tool, &c.args, dir),
            key: format!("{:016x}", target::keys(&c.tool, &c.args).target),
        })
        .collect()
}
