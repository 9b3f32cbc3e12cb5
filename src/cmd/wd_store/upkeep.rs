//! `wd-store prune`, `metrics` and `report`: what the tick (or a timer) runs to keep the
//! database small and its views current.

use super::Ctx;
use crate::cli::{now_ms, parse_duration_ms, Exit, Out};
use crate::config::Config;
use crate::record::Record;
use anyhow::{Context, Result};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

/// `wd-store prune`: deletes what is older than `older_than` (default `[store]
/// retention_days`).
pub fn prune(cx: &mut Ctx, older_than: Option<String>, out: &mut Out) -> Result<Exit> {
    let keep = match older_than {
        Some(d) => parse_duration_ms(&d)?,
        None => cx.cfg.store.retention_days.unwrap_or(30) as i64 * 86_400_000,
    };
    let before = cx.now.saturating_sub(keep);
    let p = cx.store.prune(before)?;
    out.line(
        &json!({"kind": "pruned", "before": before, "ticks": p.ticks, "verdicts": p.verdicts,
                "alerts": p.episodes, "events": p.events})
        .to_string(),
    )?;
    Ok(Exit::Ok)
}

/// `wd-store metrics`: the Prometheus text, to a file (atomically) or stdout.
pub fn metrics(cx: &Ctx, output: Option<&Path>, out: &mut Out) -> Result<Exit> {
    crate::metrics::write(&cx.store, cx.now, output, out)
}

/// `wd-store report`: the operator's page, to a file (atomically) or stdout.
pub fn report(cx: &Ctx, path: Option<PathBuf>, out: &mut Out) -> Result<Exit> {
    let page = crate::report::gather(&cx.store, &cx.cfg, cx.now)?;
    write_page(&cx.cfg, path, &crate::report::html::render(&page), out)?;
    Ok(Exit::Ok)
}

fn write_page(cfg: &Config, path: Option<PathBuf>, text: &str, out: &mut Out) -> Result<()> {
    match path {
        Some(p) if p.as_os_str() == "-" => std::io::Write::write_all(out, text.as_bytes())?,
        p => {
            let p = p.unwrap_or_else(|| cfg.report_file());
            crate::report::write_atomic(&p, text.as_bytes())
                .with_context(|| format!("report {}", p.display()))?;
        }
    }
    Ok(())
}

/// The page when the database cannot be opened because of its directory (`why`): that alone,
/// written where it can be (a page in the full directory itself cannot).
pub fn unreadable_page(cfg: &Config, path: Option<PathBuf>, why: &str, now: i64, out: &mut Out) {
    let page = crate::report::PageData {
        now,
        clock: crate::clock::Clock::system(),
        state: Some(why.to_string()),
        ..Default::default()
    };
    let text = crate::report::html::render(&page);
    if let Err(e) = write_page(cfg, path, &text, out) {
        eprintln!("wd-store: {e:#}");
    }
}

/// The page is rewritten at most this often in follow mode.
const PAGE_EVERY: Duration = Duration::from_secs(2);
/// How often a partial tick that flagged sessions rewrites the page: a loop's calls, cost and
/// picture grow with each, and a page a minute behind them misleads, yet one every 2 s for
/// every looping agent costs more than it shows.
const LOOPS_EVERY: Duration = Duration::from_secs(10);

/// `wd-store report --follow`: reads wd-alert --follow's stream and rewrites the page when it
/// changed: on an event or a full tick, at most every [`PAGE_EVERY`], so within 2 s of each,
/// and on a partial tick that flagged sessions (the loops' figures grew) every [`LOOPS_EVERY`];
/// other partial ticks change nothing the page shows but its time. The page is
/// written from a second connection on its own thread, so reading never waits on it. End of
/// input writes what is pending and ends.
pub fn report_follow(
    cx: &Ctx,
    path: Option<PathBuf>,
    stdin: &mut dyn std::io::BufRead,
    _out: &mut Out,
) -> Result<Exit> {
    let path = path.unwrap_or_else(|| cx.cfg.report_file());
    if path.as_os_str() == "-" {
        anyhow::bail!("--follow rewrites a file; it does not write pages to stdout");
    }
    let (tx, rx) = mpsc::channel::<()>();
    let (db, cfg, now) = (cx.store.path.clone(), cx.cfg.clone(), cx.fixed_now);
    let writer = std::thread::spawn(move || -> Result<()> {
        let store = crate::store::Store::open_with(&db, cfg.store_busy())?;
        let mut last: Option<Instant> = None;
        let mut pending = false;
        loop {
            let got = if pending {
                let wait = last.map_or(Duration::ZERO, |l| PAGE_EVERY.saturating_sub(l.elapsed()));
                rx.recv_timeout(wait)
            } else {
                rx.recv().map_err(|_| RecvTimeoutError::Disconnected)
            };
            match got {
                Ok(()) => pending = true,
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    if pending {
                        page(&store, &cfg, now.unwrap_or_else(now_ms), &path)?;
                    }
                    return Ok(());
                }
            }
            if pending && !last.is_some_and(|l| l.elapsed() < PAGE_EVERY) {
                // a failed rewrite is said and retried with the next change: never fatal
                if let Err(e) = page(&store, &cfg, now.unwrap_or_else(now_ms), &path) {
                    eprintln!("wd-store: report {}: {e:#}", path.display());
                }
                last = Some(Instant::now());
                pending = false;
            }
        }
    });
    let mut bad = 0;
    let mut loops_shown: Option<Instant> = None;
    crate::cli::each_line(&[], stdin, |file, n, raw| {
        let changed = match raw.map(Record::parse) {
            Ok(Ok(Record::Tick(t))) if t.full => true,
            Ok(Ok(Record::Tick(t))) => {
                let due = t.flagged > 0 && !loops_shown.is_some_and(|l| l.elapsed() < LOOPS_EVERY);
                if due {
                    loops_shown = Some(Instant::now());
                }
                due
            }
            // anything else wd-alert writes is an event
            Ok(Ok(_)) => true,
            Ok(Err(e)) => {
                eprintln!("wd-store: {file}:{n}: {e}");
                bad += 1;
                false
            }
            Err(col) => {
                eprintln!("wd-store: {file}:{n}: {}", crate::cli::not_utf8(col));
                bad += 1;
                false
            }
        };
        if changed {
            // the writer ended only on an error, which join reports below
            let _ = tx.send(());
        }
        Ok(())
    })?;
    drop(tx);
    writer
        .join()
        .map_err(|_| anyhow::anyhow!("the page writer panicked"))??;
    Ok(if bad > 0 { Exit::Error } else { Exit::Ok })
}

fn page(
    store: &crate::store::Store,
    cfg: &crate::config::Config,
    now: i64,
    p: &Path,
) -> Result<()> {
    let page = crate::report::gather(store, cfg, now)?;
    let text = crate::report::html::render(&page);
    crate::report::write_atomic(p, text.as_bytes())
        .with_context(|| format!("report {}", p.display()))
}
