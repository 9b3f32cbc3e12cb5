//! The operator's read-only questions: `status`, `loops`, `alerts`, `verdicts`, `rollup`,
//! `blocks`. Each runs one query of [`crate::store`] and prints its rows.

use super::Ctx;
use crate::cli::{parse_duration_ms, parse_when, Exit, Format, Give, Out};
use crate::store::rows::{self, Rows};
use crate::store::{blocks, channels, episodes, ticks, verdicts};
use anyhow::{bail, Result};
use serde_json::json;

/// `wd-store status`: the last tick, open alerts, the channels (objects in JSONL, a
/// `name:on|off:severity` summary in a table or CSV), and `state`: what keeps the state
/// directory from recording ticks (full, not writable, deleted), null when nothing does.
/// JSONL in a pipe, a key/value block on a terminal (and with `--format table`: as one line
/// it was 135 columns), unless `--format` says.
pub fn status(cx: &Ctx, out: &mut Out) -> Result<Exit> {
    let format = match cx.format_given {
        false if out.terminal => Format::Table,
        _ => cx.format,
    };
    let mut r = ticks::status(&cx.store)?;
    let ch = channels::effective(&cx.store, &cx.cfg)?;
    r.cols.push("channels");
    let chv = if format == Format::Jsonl {
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
    // a full, unwritable or deleted state directory, said where the operator looks (not only
    // in the journal of the tick that failed)
    r.cols.push("state");
    let state = json!(cx.store.dir_problem());
    for row in &mut r.rows {
        row.push(chv.clone());
        row.push(state.clone());
    }
    if format == Format::Table {
        r.print_pairs(out)?;
    } else {
        r.print(format, out)?;
    }
    Ok(Exit::Ok)
}

/// The columns of the narrow `loops` table. On a narrow terminal `opened` goes first; then
/// `burned` is cut (its calls and cost stay), then the project at its start (a path's end says
/// most), then the title, never below 20 characters, before `burned` goes too: what loops and
/// where is what the operator reads, the session id what they paste.
const LOOPS_NARROW: &[&str] = &[
    "status",
    "session",
    "opened",
    "burned",
    "project",
    "session_title",
];
const LOOPS_GIVE: &[(&str, Give)] = &[
    ("opened", Give::drop(1)),
    ("burned", Give::cut(16).or_drop(2)),
    ("project", Give::cut_start(12)),
    ("session_title", Give::cut(20)),
];
/// The columns of the narrow `alerts` table: `burned` is cut (its calls and cost stay).
const ALERTS_NARROW: &[&str] = &["opened", "alert", "reason", "burned", "session"];
const ALERTS_GIVE: &[(&str, Give)] = &[("burned", Give::cut(16))];

/// Rows as the operator reads them: the project as `~/work/app`; a table without `--wide`
/// only the `narrow` columns, fit to the terminal (`width`) as `give` says.
fn for_people(
    mut r: Rows,
    format: Format,
    wide: bool,
    width: usize,
    (narrow, give): (&[&'static str], &'static [(&'static str, Give)]),
) -> Rows {
    r.map_col("project", |v| match v.as_str() {
        Some(d) => json!(crate::paths::short(d)),
        None => v.clone(),
    });
    if format != Format::Table || wide {
        return r;
    }
    let mut r = r.only(narrow);
    r.fit = Some(rows::Fit { width, give });
    r
}

/// `wd-store loops`: open alerts, and those resolved within `recent`.
pub fn loops(cx: &Ctx, recent: &str, wide: bool, out: &mut Out) -> Result<Exit> {
    let r = episodes::loops(&cx.store, cx.now - parse_duration_ms(recent)?, cx.now)?;
    for_people(r, cx.format, wide, out.width, (LOOPS_NARROW, LOOPS_GIVE)).print(cx.format, out)?;
    Ok(Exit::Ok)
}

/// `wd-store alerts`: the history of episodes.
pub fn alerts(
    cx: &Ctx,
    since: &str,
    kind: Option<String>,
    limit: usize,
    wide: bool,
    out: &mut Out,
) -> Result<Exit> {
    let since = parse_when(since, cx.now)?;
    if let Some(k) = &kind {
        if !matches!(crate::event::AlertKind::parse(k), Some(k) if k != crate::event::AlertKind::Test)
        {
            bail!("unknown alert kind {k:?} (loop, blind, stalled, retrying, waiting, interrupted, unfinished)");
        }
    }
    let r = episodes::history(&cx.store, since, kind.as_deref(), limit, cx.now)?;
    for_people(r, cx.format, wide, out.width, (ALERTS_NARROW, ALERTS_GIVE))
        .print(cx.format, out)?;
    Ok(Exit::Ok)
}

/// `wd-store verdicts`: recorded verdicts, newest first. A table (without `--wide`) says what
/// each verdict repeats, in words, instead of its signals' JSON, and, for one session (the
/// page's "Look closer"), ends with the calls its newest flagged verdict saw last.
pub fn verdicts(
    cx: &Ctx,
    since: Option<String>,
    session: Option<String>,
    flagged: bool,
    (limit, wide): (usize, bool),
    out: &mut Out,
) -> Result<Exit> {
    let since = since.map(|w| parse_when(&w, cx.now)).transpose()?;
    let one = session.is_some();
    let f = verdicts::Filter {
        since,
        session,
        flagged,
        limit,
    };
    let r = verdicts::list(&cx.store, f)?;
    if cx.format != Format::Table || wide {
        r.print(cx.format, out)?;
        return Ok(Exit::Ok);
    }
    let width = out.width;
    let (readable, last_calls) = readable_verdicts(&r, one, width);
    readable.print(Format::Table, out)?;
    if let Some((t, calls)) = last_calls {
        let clock = crate::clock::Clock::system();
        out.line("")?;
        out.line(&format!(
            "last calls of the newest flagged verdict ({} {}):",
            clock.short(t),
            clock.abbr(t)
        ))?;
        for c in calls {
            out.line(&format!(
                "  {}",
                crate::notify::plain::visible(&c, width.saturating_sub(2).max(20), false)
            ))?;
        }
    }
    Ok(Exit::Ok)
}

/// The columns of the verdicts table a person reads: `session` only when several sessions are
/// listed; on a narrow terminal the calls since the last landing go first, then the cost,
/// the agent, the liveness class and the reasons; what it repeats is cut, never below 20.
const VERDICTS_GIVE: &[(&str, Give)] = &[
    ("agent", Give::drop(3)),
    ("reasons", Give::cut(12).or_drop(5)),
    ("since_landed", Give::drop(1)),
    ("cost", Give::drop(2)),
    ("liveness", Give::drop(4)),
    ("repeats", Give::cut(20)),
];

/// `r` (the stored columns) as [`VERDICTS_GIVE`]'s columns, fit to `width`, and the time and
/// digest of the newest flagged verdict, when `one` session is listed and one is flagged.
fn readable_verdicts(r: &Rows, one: bool, width: usize) -> (Rows, Option<(i64, Vec<String>)>) {
    let at = |row: &Vec<serde_json::Value>, col: &str| -> serde_json::Value {
        r.cols
            .iter()
            .position(|c| *c == col)
            .map_or(serde_json::Value::Null, |i| row[i].clone())
    };
    let mut cols = vec!["t"];
    if !one {
        cols.push("session");
    }
    cols.extend([
        "agent",
        "flag",
        "reasons",
        "calls",
        "since_landed",
        "cost",
        "liveness",
        "repeats",
    ]);
    let mut last_calls = None;
    let rows = r
        .rows
        .iter()
        .map(|row| {
            let flagged = at(row, "flagged").as_i64() == Some(1);
            let reasons: Vec<crate::record::Signal> = at(row, "reasons")
                .as_str()
                .unwrap_or("")
                .split(',')
                .filter_map(|n| serde_json::from_value(json!(n)).ok())
                .collect();
            let signals = at(row, "signals")
                .as_object()
                .map(crate::record::Signals::from_map)
                .unwrap_or_default();
            let v = crate::record::Verdict {
                reasons,
                signals,
                ..Default::default()
            };
            if one && flagged && last_calls.is_none() {
                let calls: Vec<String> = at(row, "digest")
                    .as_array()
                    .map(|d| {
                        d.iter()
                            .filter_map(|c| c.as_str().map(String::from))
                            .collect()
                    })
                    .unwrap_or_default();
                if let (Some(t), false) = (at(row, "t").as_i64(), calls.is_empty()) {
                    last_calls = Some((t, calls));
                }
            }
            let mut cells = vec![at(row, "t")];
            if !one {
                cells.push(at(row, "session"));
            }
            cells.extend([
                at(row, "agent"),
                json!(if flagged { "FLAG" } else { "-" }),
                at(row, "reasons"),
                at(row, "calls"),
                at(row, "calls_since_landed"),
                at(row, "cost_since_landed")
                    .as_f64()
                    .map_or(serde_json::Value::Null, |c| json!(format!("${c:.2}"))),
                at(row, "liveness")
                    .get("class")
                    .cloned()
                    .unwrap_or(serde_json::Value::Null),
                json!(if flagged { v.repeats() } else { String::new() }),
            ]);
            cells
        })
        .collect();
    let readable = Rows {
        kind: r.kind,
        cols,
        rows,
        fit: Some(rows::Fit {
            width,
            give: VERDICTS_GIVE,
        }),
    };
    (readable, last_calls)
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
