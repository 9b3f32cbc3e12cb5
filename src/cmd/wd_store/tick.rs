//! `wd-store tick` (the pipeline stage), and `last-tick` and `open-roots`, which the tick script
//! asks before it reads opencode.
//!
//! With `--follow` (the follow service's pipeline) every `sweep` record ends one tick: the lines
//! before it are passed on as they come, the tick is recorded (mode `follow`, full or partial as
//! the sweep says) and its `tick` record replaces the sweep, flushed, so wd-alert acts on it at
//! once. End of input records what came after the last sweep (a stage that failed leaves a
//! `blind` record there) and ends it.

use super::Ctx;
use crate::cli::{now_ms, Exit, Out};
use crate::record::{
    each_record, Blind, Line, Record, Sweep, Tick, TickMode, TickOutcome, Verdict,
};
use crate::store::{episodes, marks, ticks, verdicts, Store};
use anyhow::{Context, Result};
use serde_json::{json, Value};
use std::io::BufRead;

/// What a tick read from its input.
#[derive(Debug, Default)]
struct TickInput {
    verdicts: Vec<Verdict>,
    sources: Vec<String>,
    blind: Vec<String>,
    /// Lines that could not be read.
    bad: usize,
}

impl TickInput {
    /// The tick's outcome when none is forced: blind when any source or line was, then
    /// no_agent when nothing was read, then flagged or ok.
    fn outcome(&self) -> TickOutcome {
        if !self.blind.is_empty() || self.bad > 0 {
            TickOutcome::Blind
        } else if self.sources.is_empty() && self.verdicts.is_empty() {
            TickOutcome::NoAgent
        } else if self.flagged() > 0 {
            TickOutcome::Flagged
        } else {
            TickOutcome::Ok
        }
    }

    fn flagged(&self) -> usize {
        self.verdicts.iter().filter(|v| v.flagged).count()
    }

    /// A partial tick's outcome: it read only what changed, so reading nothing is not
    /// "no agent".
    fn partial_outcome(&self) -> TickOutcome {
        match self.outcome() {
            TickOutcome::NoAgent => TickOutcome::Ok,
            o => o,
        }
    }
}

/// How one tick was run: started when, in which mode, full or partial.
#[derive(Debug, Clone, Copy)]
struct TickRun {
    started: i64,
    /// Follow mode: the sweep's monotonic reading; the tick's duration is measured from it.
    mono: Option<i64>,
    /// Follow mode: the step of the wall clock its sweep says (ms).
    step_ms: Option<i64>,
    mode: TickMode,
    full: bool,
}

/// Records one tick from the verdict stream on `stdin`, passing every line on, then appends
/// the `tick` record.
pub fn tick(
    cx: &mut Ctx,
    stdin: &mut dyn BufRead,
    out: &mut Out,
    outcome: Option<String>,
    started: Option<i64>,
) -> Result<Exit> {
    let started = started.unwrap_or(cx.now);
    out.line_buffered(false);
    // a downstream that stops reading must not cost the tick: keep reading, record, then report
    let mut write_failed: Option<std::io::Error> = None;
    let mut seen = TickInput::default();
    let skipped = each_record(&[], stdin, |line| {
        if write_failed.is_none() {
            if let Err(e) = out.line(line.raw) {
                write_failed = Some(e);
            }
        }
        seen.take(line);
        Ok(())
    })?;
    seen.bad += skipped;
    let outcome = match outcome {
        Some(o) => TickOutcome::parse(&o).with_context(|| format!("unknown outcome {o:?}"))?,
        None => seen.outcome(),
    };
    let run = TickRun {
        started,
        mono: None,
        step_ms: None,
        mode: TickMode::Timer,
        full: true,
    };
    let id = record(&mut cx.store, &seen, outcome, run)?;
    if let Some(gone) = cx.store.deleted() {
        anyhow::bail!(gone);
    }
    if let Some(e) = write_failed {
        return Err(anyhow::Error::new(e).context("passing the stream on"));
    }
    let bad = seen.bad;
    out.line(&tick_line(&seen.into_tick(id, outcome, run))?)?;
    Ok(if bad > 0 { Exit::Error } else { Exit::Ok })
}

/// `wd-store tick --follow`: one tick per sweep, as the module docs say.
pub fn follow(cx: &mut Ctx, stdin: &mut dyn BufRead, out: &mut Out) -> Result<Exit> {
    out.line_buffered(false);
    let mut seen = TickInput::default();
    let mut any = false;
    let mut bad = 0;
    crate::cli::each_line(&[], stdin, |file, n, raw| {
        let raw = match raw {
            Ok(l) => l,
            Err(col) => {
                eprintln!("wd-store: {file}:{n}: {}", crate::cli::not_utf8(col));
                seen.bad += 1;
                any = true;
                return Ok(());
            }
        };
        let record = Record::parse(raw);
        if let Ok(Record::Sweep(sw)) = record {
            bad += seen.bad;
            end_tick(cx, std::mem::take(&mut seen), Some(sw), out)?;
            any = false;
            return Ok(());
        }
        out.line(raw).context("passing the stream on")?;
        any = true;
        seen.take(Line {
            file,
            n,
            raw,
            record,
        });
        Ok(())
    })?;
    if any {
        bad += seen.bad;
        end_tick(cx, seen, None, out)?;
    }
    out.flush()?;
    Ok(if bad > 0 { Exit::Error } else { Exit::Ok })
}

/// Records one follow tick and writes its `tick` record, flushed. `sweep`: the sweep that ends
/// it, none for what came after the last one (a partial tick, now).
fn end_tick(cx: &mut Ctx, seen: TickInput, sweep: Option<Sweep>, out: &mut Out) -> Result<()> {
    let run = TickRun {
        started: sweep.map_or_else(now_ms, |s| s.t),
        mono: sweep.and_then(|s| s.mono),
        step_ms: sweep.and_then(|s| s.step_ms),
        mode: TickMode::Follow,
        full: sweep.is_some_and(|s| s.full),
    };
    let outcome = if run.full {
        seen.outcome()
    } else {
        seen.partial_outcome()
    };
    let id = record(&mut cx.store, &seen, outcome, run)?;
    out.line(&tick_line(&seen.into_tick(id, outcome, run))?)?;
    out.flush().context("passing the stream on")?;
    Ok(())
}

/// The `tick` record's line. Its keys are in alphabetical order, `kind` among them, as this
/// line has always been written (a JSON object, not [`crate::record::to_line`]'s `kind`
/// first): the bytes of the stream do not change.
fn tick_line(t: &Tick) -> Result<String> {
    let mut v = serde_json::to_value(t)?;
    if let Value::Object(m) = &mut v {
        m.insert("kind".into(), json!("tick"));
    }
    Ok(v.to_string())
}

impl TickInput {
    /// Takes what the tick needs from one input line: verdicts, the sources read, blind
    /// sources. A verdict that cannot be read is named on stderr and counted; a malformed
    /// `blind` line still blinds the tick; other kinds are not the tick's to judge.
    fn take(&mut self, line: Line) {
        match line.record {
            Ok(Record::Verdict(v)) => self.verdicts.push(*v),
            Ok(Record::Source(s)) => self.sources.push(s.source),
            Ok(Record::Blind(b)) => self.blind_by(b),
            Err(e) if e.kind.as_deref() == Some("blind") => self.blind_by(Blind::read(line.raw)),
            Err(e) if matches!(e.kind.as_deref(), None | Some("verdict")) => {
                eprintln!("wd-store: {}:{}: {e}", line.file, line.n);
                self.bad += 1;
            }
            _ => {}
        }
    }

    fn blind_by(&mut self, b: Blind) {
        self.blind.push(format!("{}: {}", b.source, b.reason));
    }

    fn into_tick(self, id: i64, outcome: TickOutcome, run: TickRun) -> Tick {
        Tick {
            id,
            t: run.started,
            outcome: Some(outcome),
            sessions: self.verdicts.len(),
            flagged: self.flagged(),
            sources: self.sources,
            full: run.full,
            mode: run.mode,
            mono: run.mono,
        }
    }
}

/// Writes the tick, its verdicts and the call marks of its flagged sessions in one
/// transaction; returns the tick's id.
fn record(store: &mut Store, seen: &TickInput, outcome: TickOutcome, run: TickRun) -> Result<i64> {
    let started = run.started;
    let row = ticks::TickRow {
        t: started,
        duration_ms: match run.mono {
            Some(m) => crate::monotonic::mono_ms() - m,
            None => now_ms() - started,
        }
        .max(0),
        sessions: seen.verdicts.len() as i64,
        flagged: seen.flagged() as i64,
        outcome,
        sources: json!(seen.sources).to_string(),
        blind: (!seen.blind.is_empty()).then(|| seen.blind.join("; ")),
        mode: run.mode,
        full: run.full,
    };
    let tx = store.write()?;
    let id = ticks::insert(&tx, &row)?;
    if let Some(step) = run.step_ms {
        ticks::note_step(&tx, started, step)?;
    }
    verdicts::insert(&tx, id, started, &seen.verdicts)?;
    if run.mode == TickMode::Follow && !run.full {
        let judged: Vec<&str> = seen.verdicts.iter().map(|v| v.session.as_str()).collect();
        verdicts::thin(&tx, id, &judged)?;
    }
    let flagged: std::collections::HashSet<String> = seen
        .verdicts
        .iter()
        .filter(|v| v.flagged)
        .map(|v| v.session.clone())
        .collect();
    // the page's pictures are an aid: failing to keep them never costs the tick
    let judged: std::collections::HashSet<String> =
        seen.verdicts.iter().map(|v| v.session.clone()).collect();
    let only = (run.mode == TickMode::Follow).then_some(&judged);
    if let Err(e) = marks::keep_flagged(&tx, &flagged, only) {
        eprintln!("wd-store: the calls for the page were not kept: {e:#}");
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The tick record is written as it always was (keys in order, `flagged` a count) and the
    /// stream's reader reads it back into the same record.
    #[test]
    fn the_tick_line_keeps_its_bytes_and_reads_back_as_a_tick() {
        let t = Tick {
            id: 4,
            t: 1_796_000_000_000,
            outcome: Some(TickOutcome::NoAgent),
            sessions: 2,
            flagged: 1,
            sources: vec!["/o.db".into()],
            ..Tick::default()
        };
        let line = tick_line(&t).unwrap();
        assert_eq!(
            line,
            r#"{"flagged":1,"id":4,"kind":"tick","outcome":"no_agent","sessions":2,"sources":["/o.db"],"t":1796000000000}"#
        );
        assert_eq!(Record::parse(&line).unwrap(), Record::Tick(t));
    }

    /// Sources and verdicts count, a malformed `blind` line still blinds, an unreadable
    /// verdict is a bad line, and other kinds are passed over.
    #[test]
    fn a_tick_takes_verdicts_sources_and_blind_lines_from_the_stream() {
        let input = [
            r#"{"kind":"source","source":"/o.db","sessions":1}"#,
            r#"{"kind":"verdict","session":"s1","flagged":true}"#,
            r#"{"kind":"verdict","session":7}"#,
            r#"{"kind":"blind","source":"http://x"}"#,
            r#"{"kind":"call","session":"s1"}"#,
            r#"{"kind":"zzz"}"#,
        ]
        .join("\n");
        let mut seen = TickInput::default();
        each_record(&[], &mut input.as_bytes(), |l| {
            seen.take(l);
            Ok(())
        })
        .unwrap();
        assert_eq!(seen.sources, ["/o.db"]);
        assert_eq!(seen.verdicts.len(), 1);
        assert_eq!(seen.flagged(), 1);
        assert_eq!(seen.blind, ["http://x: ?"]);
        assert_eq!(seen.bad, 1);
        assert_eq!(seen.outcome(), TickOutcome::Blind);
    }
}
