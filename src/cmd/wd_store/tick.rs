//! `wd-store tick` (the pipeline stage), and `last-tick` and `open-roots`, which the tick script
//! asks before it reads opencode.

use super::Ctx;
use crate::cli::{for_each_line, now_ms, Exit, Out};
use crate::record::{kind_of, Blind, Verdict};
use crate::store::{episodes, ticks, verdicts, Store};
use anyhow::Result;
use serde_json::{json, Value};
use std::io::BufRead;
use std::path::Path;

/// What a tick read from its input.
#[derive(Debug, Default)]
struct Seen {
    verdicts: Vec<Verdict>,
    sources: Vec<String>,
    blind: Vec<String>,
    /// Lines that could not be read.
    bad: usize,
}

impl Seen {
    /// The tick's outcome when none is forced: blind when any source or line was, then
    /// no_opencode when nothing was read, then flagged or ok.
    fn outcome(&self) -> &'static str {
        if !self.blind.is_empty() || self.bad > 0 {
            "blind"
        } else if self.sources.is_empty() && self.verdicts.is_empty() {
            "no_opencode"
        } else if self.flagged() > 0 {
            "flagged"
        } else {
            "ok"
        }
    }

    fn flagged(&self) -> usize {
        self.verdicts.iter().filter(|v| v.flagged).count()
    }
}

/// Records one tick from the verdict stream on `stdin`, passing every line on, then appends
/// the `tick` record.
pub fn tick(
    cx: &mut Ctx,
    stdin: &mut dyn BufRead,
    out: &mut Out,
    outcome: Option<String>,
    started: Option<i64>,
    calls: Option<&Path>,
) -> Result<Exit> {
    let started = started.unwrap_or(cx.now);
    out.line_buffered(false);
    // a downstream that stops reading must not cost the tick: keep reading, record, then report
    let mut write_failed: Option<std::io::Error> = None;
    let mut seen = Seen::default();
    let skipped = for_each_line(&[], stdin, |name, n, line| {
        if write_failed.is_none() {
            if let Err(e) = out.line(line) {
                write_failed = Some(e);
            }
        }
        read_line(&mut seen, name, n, line);
        Ok(())
    })?;
    seen.bad += skipped;
    let outcome = outcome.unwrap_or_else(|| seen.outcome().to_string());
    let id = record(&mut cx.store, &seen, &outcome, started, calls)?;
    if let Some(e) = write_failed {
        return Err(anyhow::Error::new(e).context("passing the stream on"));
    }
    out.line(
        &json!({"kind": "tick", "id": id, "t": started, "outcome": outcome, "sessions": seen.verdicts.len(),
                "flagged": seen.flagged(), "sources": seen.sources})
        .to_string(),
    )?;
    Ok(if seen.bad > 0 { Exit::Error } else { Exit::Ok })
}

/// Takes what the tick needs from one input line: verdicts, the sources read, blind sources.
fn read_line(seen: &mut Seen, name: &str, n: usize, line: &str) {
    let kind = match kind_of(line) {
        Ok(k) => k,
        Err(e) => {
            eprintln!("wd-store: {name}:{n}: {e}");
            seen.bad += 1;
            return;
        }
    };
    match kind.as_deref() {
        Some("verdict") => match serde_json::from_str::<Verdict>(line) {
            Ok(v) => seen.verdicts.push(v),
            Err(e) => {
                eprintln!("wd-store: {name}:{n}: {e}");
                seen.bad += 1;
            }
        },
        Some("source") => {
            if let Ok(v) = serde_json::from_str::<Value>(line) {
                if let Some(s) = v["source"].as_str() {
                    seen.sources.push(s.to_string());
                }
            }
        }
        Some("blind") => {
            let b = Blind::read(line);
            seen.blind.push(format!("{}: {}", b.source, b.reason));
        }
        _ => {}
    }
}

/// Writes the tick, its verdicts and the call marks of its flagged sessions in one
/// transaction; returns the tick's id.
fn record(
    store: &mut Store,
    seen: &Seen,
    outcome: &str,
    started: i64,
    calls: Option<&Path>,
) -> Result<i64> {
    let row = ticks::TickRow {
        t: started,
        duration_ms: (now_ms() - started).max(0),
        sessions: seen.verdicts.len() as i64,
        flagged: seen.flagged() as i64,
        outcome: outcome.to_string(),
        sources: json!(seen.sources).to_string(),
        blind: (!seen.blind.is_empty()).then(|| seen.blind.join("; ")),
    };
    let tx = store.write()?;
    let id = ticks::insert(&tx, &row)?;
    verdicts::insert(&tx, id, started, &seen.verdicts)?;
    if let Some(path) = calls {
        let flagged: std::collections::HashSet<String> = seen
            .verdicts
            .iter()
            .filter(|v| v.flagged)
            .map(|v| v.session.clone())
            .collect();
        // the page's pictures are an aid: a missing calls file never costs the tick
        if let Err(e) = crate::report::marks::record(&tx, path, &flagged) {
            eprintln!("wd-store: {e:#}");
        }
    }
    tx.commit()?;
    Ok(id)
}

/// `wd-store last-tick`: the time of the last tick, nothing before the first.
pub fn last_tick(cx: &Ctx, out: &mut Out) -> Result<Exit> {
    if let Some(t) = cx.store.last_tick(cx.now)? {
        out.line(&t.to_string())?;
    }
    Ok(Exit::Ok)
}

/// `wd-store open-roots`: the roots of open loop alerts, space-separated.
pub fn open_roots(cx: &Ctx, out: &mut Out) -> Result<Exit> {
    let roots = episodes::open_roots(&cx.store)?;
    if !roots.is_empty() {
        out.line(&roots.join(" "))?;
    }
    Ok(Exit::Ok)
}
