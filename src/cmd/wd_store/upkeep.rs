//! `wd-store prune`, `metrics` and `report`: what the tick (or a timer) runs to keep the
//! database small and its views current.

use super::Ctx;
use crate::cli::{parse_duration_ms, Exit, Out};
use crate::config::Config;
use anyhow::{Context, Result};
use serde_json::json;
use std::path::{Path, PathBuf};

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
        clock: crate::report::clock::Clock::system(),
        state: Some(why.to_string()),
        ..Default::default()
    };
    let text = crate::report::html::render(&page);
    if let Err(e) = write_page(cfg, path, &text, out) {
        eprintln!("wd-store: {e:#}");
    }
}
