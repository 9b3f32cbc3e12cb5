//! The operator's read-only questions: `status`, `loops`, `alerts`, `verdicts`, `rollup`,
//! `blocks`. Each runs one query of [`crate::store`] and prints its rows.

use super::Ctx;
use crate::cli::{parse_duration_ms, parse_when, Exit, Format, Out};
use crate::store::{blocks, channels, episodes, ticks, verdicts};
use anyhow::{bail, Result};
use serde_json::json;

/// `wd-store status`: the last tick, open alerts, and the channels (objects in JSONL, a
/// `name:on|off:severity` summary in a table or CSV).
pub fn status(cx: &Ctx, out: &mut Out) -> Result<Exit> {
    let mut r = ticks::status(&cx.store)?;
    let ch = channels::effective(&cx.store, &cx.cfg)?;
    r.cols.push("channels");
    let chv = if cx.format == Format::Jsonl {
        serde_json::to_value(&ch)?
    } else {
        let summary: Vec<String> = ch
            .iter()
            .map(|c| {
                let on = if c.enabled { "on" } else { "off" };
                format!("{}:{on}:{}", c.name, c.min_severity)
            })
            .collect();
        json!(summary.join(" "))
    };
    for row in &mut r.rows {
        row.push(chv.clone());
    }
    r.print(cx.format, out)?;
    Ok(Exit::Ok)
}

/// `wd-store loops`: open alerts, and those resolved within `recent`.
pub fn loops(cx: &Ctx, recent: &str, out: &mut Out) -> Result<Exit> {
    episodes::loops(&cx.store, cx.now - parse_duration_ms(recent)?, cx.now)?
        .print(cx.format, out)?;
    Ok(Exit::Ok)
}

/// `wd-store alerts`: the history of episodes.
pub fn alerts(
    cx: &Ctx,
    since: &str,
    kind: Option<String>,
    limit: usize,
    out: &mut Out,
) -> Result<Exit> {
    let since = parse_when(since, cx.now)?;
    if let Some(k) = &kind {
        if !matches!(crate::alert::AlertKind::parse(k), Some(k) if k != crate::alert::AlertKind::Test)
        {
            bail!("unknown alert kind {k:?} (loop, blind, stalled, retrying, waiting, interrupted, unfinished)");
        }
    }
    episodes::history(&cx.store, since, kind.as_deref(), limit, cx.now)?.print(cx.format, out)?;
    Ok(Exit::Ok)
}

/// `wd-store verdicts`: recorded verdicts, newest first.
pub fn verdicts(
    cx: &Ctx,
    since: Option<String>,
    session: Option<String>,
    flagged: bool,
    limit: usize,
    out: &mut Out,
) -> Result<Exit> {
    let since = since.map(|w| parse_when(&w, cx.now)).transpose()?;
    let f = verdicts::Filter {
        since,
        session,
        flagged,
        limit,
    };
    verdicts::list(&cx.store, f)?.print(cx.format, out)?;
    Ok(Exit::Ok)
}

/// `wd-store rollup`: flagged sessions per model (or agent).
pub fn rollup(cx: &Ctx, by: &str, since: &str, out: &mut Out) -> Result<Exit> {
    let since = parse_when(since, cx.now)?;
    let by = if by == "agent" {
        verdicts::RollupBy::Agent
    } else {
        verdicts::RollupBy::Model
    };
    verdicts::rollup(&cx.store, by, since)?.print(cx.format, out)?;
    Ok(Exit::Ok)
}

/// `wd-store blocks`: models blocked by `block-model`.
pub fn blocks(cx: &Ctx, all: bool, out: &mut Out) -> Result<Exit> {
    blocks::list(&cx.store, all)?.print(cx.format, out)?;
    Ok(Exit::Ok)
}
