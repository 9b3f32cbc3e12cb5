//! `wd-store`: record ticks and answer the operator's questions.
//!
//! `tick` sits in the middle of the tick pipeline: every input line passes through unchanged,
//! then one `tick` record (id, time, outcome) is appended for `wd-alert`. The queries print
//! JSONL (default), an aligned table (`--format table`) or CSV (`--format csv`).

use super::Store;
use crate::cli::{for_each_line, now_ms, parse_duration_ms, parse_when, Exit, Format, Out};
use crate::config::{Config, Severity};
use crate::record::{kind_of, Blind, Verdict};
use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use rusqlite::{params, params_from_iter, types::Value as Sql};
use serde_json::{json, Map, Value};
use std::io::BufRead;
use std::path::PathBuf;

const EXAMPLES: &str = "\
Examples:
  ... | progress-detect | wd-store tick | wd-alert
  wd-store status --format table
  wd-store loops --format table
  wd-store alerts --since 7d --format table
  wd-store verdicts --since 1h --flagged | jq -r '[.session, .signals.top_target] | @tsv'
  wd-store rollup --by model --since 1h --format table
  wd-store channels set desktop --enabled false
  wd-store prune --older-than 30d
  wd-store report --out - > /tmp/watchdog.html
  wd-store block-model openrouter/some-model --reason \"stalls on every bash call\"
  wd-store blocks --format table";

/// The watchdog's SQLite record: ticks, verdicts, alerts, channel settings.
#[derive(Parser, Debug)]
#[command(name = "wd-store", version, after_help = EXAMPLES)]
pub struct Args {
    /// The watchdog database (default $XDG_STATE_HOME/oc-watchdog/watchdog.db).
    #[arg(long, global = true, value_name = "PATH")]
    pub db: Option<PathBuf>,
    /// Config file (default $XDG_CONFIG_HOME/oc-watchdog/watchdog.toml if it exists).
    #[arg(long, global = true, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// Output format of the queries.
    #[arg(long, global = true, value_enum, default_value_t = Format::Jsonl)]
    pub format: Format,
    /// The current time in epoch ms (default: the clock).
    #[arg(long, global = true, value_name = "MS")]
    pub now: Option<i64>,
    #[command(subcommand)]
    pub cmd: Cmd,
}

#[derive(Subcommand, Debug)]
pub enum Cmd {
    /// Record one tick from a verdict stream on stdin, passing the stream through.
    Tick {
        /// Force the outcome (e.g. no_opencode for an empty tick).
        #[arg(long, value_parser = ["ok", "flagged", "no_opencode", "blind"])]
        outcome: Option<String>,
        /// When the tick started, epoch ms (default: when this command started).
        #[arg(long, value_name = "MS")]
        started: Option<i64>,
        /// The tick's call stream (oc-calls output): the latest calls of each flagged session
        /// are kept for the operator's page.
        #[arg(long, value_name = "PATH")]
        calls: Option<PathBuf>,
    },
    /// Print the time of the last tick (epoch ms; nothing before the first tick).
    LastTick,
    /// Print the root sessions of open loop alerts, space-separated (for `oc-sessions --also`).
    OpenRoots,
    /// Last tick, its sessions and flagged verdicts, open alerts, channels.
    Status,
    /// Open alerts (and those closed in the last --recent, with why): severity, dedup key,
    /// what the last tick made of it, agent, top target, what the loop burned.
    Loops {
        /// Also list episodes resolved this long ago or less.
        #[arg(long, value_name = "DURATION", default_value = "1h")]
        recent: String,
    },
    /// The history of alert episodes, closed ones included: reason, duration, calls, cost.
    Alerts {
        /// Episodes open at any time since then.
        #[arg(long, value_name = "WHEN", default_value = "7d")]
        since: String,
        /// Only this kind (loop, blind, stalled, retrying, waiting, interrupted, unfinished).
        #[arg(long, value_name = "KIND")]
        kind: Option<String>,
        /// At most this many rows, newest first.
        #[arg(long, default_value_t = 1000)]
        limit: usize,
    },
    /// Recorded verdicts, newest first.
    Verdicts {
        #[arg(long, value_name = "WHEN")]
        since: Option<String>,
        #[arg(long, value_name = "ID")]
        session: Option<String>,
        /// Only flagged verdicts.
        #[arg(long)]
        flagged: bool,
        /// At most this many rows.
        #[arg(long, default_value_t = 1000)]
        limit: usize,
    },
    /// Flagged sessions per model next to each model's share of all sessions seen.
    Rollup {
        #[arg(long, value_parser = ["model", "agent"], default_value = "model")]
        by: String,
        #[arg(long, value_name = "WHEN", default_value = "1h")]
        since: String,
    },
    /// List channels (config merged with run-time settings), or change one.
    Channels {
        #[command(subcommand)]
        set: Option<ChannelCmd>,
    },
    /// Delete ticks and verdicts older than a duration; open alerts are never pruned.
    Prune {
        #[arg(long, value_name = "DURATION")]
        older_than: Option<String>,
    },
    /// Write Prometheus metrics (text exposition format) atomically to a file, or stdout.
    Metrics {
        #[arg(long, value_name = "PATH")]
        output: Option<PathBuf>,
    },
    /// Write the operator's page: one self-contained HTML file (default [report] file, i.e.
    /// $XDG_STATE_HOME/oc-watchdog/report.html), rewritten atomically; `--out -` for stdout.
    Report {
        #[arg(long, value_name = "PATH")]
        out: Option<PathBuf>,
    },
    /// Add PROVIDER/MODEL to its provider's `blacklist` in your opencode config, so new opencode
    /// processes no longer offer it; comments and formatting stay, a backup is kept.
    BlockModel {
        /// The model as `opencode models` lists it.
        model: String,
        /// Why (shown on the page).
        #[arg(long)]
        reason: Option<String>,
        /// The opencode config to edit (default: [report] opencode_config, else the global
        /// opencode.jsonc / opencode.json under $XDG_CONFIG_HOME/opencode).
        #[arg(long, value_name = "PATH")]
        opencode_config: Option<PathBuf>,
        /// The opencode binary asked which models exist.
        #[arg(
            long,
            value_name = "PATH",
            env = "OPENCODE_BIN",
            default_value = "opencode"
        )]
        opencode: String,
    },
    /// Undo `block-model`: remove exactly what it added to the opencode config.
    UnblockModel { model: String },
    /// Models blocked by `block-model`, newest first: when, by whom, why, in which file, and the
    /// command that undoes it.
    Blocks {
        /// Also list blocks already undone.
        #[arg(long)]
        all: bool,
    },
    /// Show the desktop notification read from stdin, print its id, then wait for a click on it
    /// and open its URL with [report] open_with (started by the desktop channel).
    #[command(hide = true)]
    NotifyOnAction {
        #[arg(long, default_value_t = 3600)]
        wait_secs: u64,
    },
}

#[derive(Subcommand, Debug)]
pub enum ChannelCmd {
    /// Change a channel's settings; they apply at the next tick.
    Set {
        name: String,
        #[arg(long, value_name = "BOOL")]
        enabled: Option<bool>,
        #[arg(long, value_name = "SEVERITY", value_parser = ["info", "warning", "critical"])]
        min_severity: Option<String>,
    },
}

pub fn main() -> i32 {
    crate::cli::main("wd-store", run)
}

pub fn run(args: Args, stdin: &mut dyn BufRead, out: &mut Out) -> Result<Exit> {
    let started = now_ms();
    let cfg = Config::load(args.config.as_deref())?;
    let path = args.db.clone().unwrap_or_else(|| cfg.store_db());
    let now = args.now.unwrap_or(started);
    let mut store = Store::open_with(&path, cfg.store_busy())?;
    let r = match args.cmd {
        Cmd::Tick {
            outcome,
            started: s,
            calls,
        } => tick(
            &mut store,
            stdin,
            out,
            outcome,
            s.unwrap_or(args.now.unwrap_or(started)),
            calls.as_deref(),
        ),
        Cmd::LastTick => {
            if let Some(t) = store.last_tick(now)? {
                out.line(&t.to_string())?;
            }
            Ok(Exit::Ok)
        }
        Cmd::OpenRoots => {
            let mut st = store.conn.prepare(
                "SELECT DISTINCT root FROM alerts WHERE state = 'open' AND kind <> 'blind' ORDER BY root",
            )?;
            let roots: Vec<String> = st
                .query_map([], |r| r.get(0))?
                .collect::<rusqlite::Result<_>>()?;
            if !roots.is_empty() {
                out.line(&roots.join(" "))?;
            }
            Ok(Exit::Ok)
        }
        Cmd::Status => status(&store, &cfg, args.format, out),
        Cmd::Loops { recent } => loops(&store, now - parse_duration_ms(&recent)?, args.format, out),
        Cmd::Alerts { since, kind, limit } => alerts(
            &store,
            parse_when(&since, now)?,
            kind,
            limit,
            args.format,
            out,
        ),
        Cmd::Verdicts {
            since,
            session,
            flagged,
            limit,
        } => {
            let since = since.map(|w| parse_when(&w, now)).transpose()?;
            verdicts(&store, since, session, flagged, limit, args.format, out)
        }
        Cmd::Rollup { by, since } => {
            rollup(&store, &by, parse_when(&since, now)?, args.format, out)
        }
        Cmd::Channels { set: None } => channels(&store, &cfg, args.format, out),
        Cmd::Channels {
            set:
                Some(ChannelCmd::Set {
                    name,
                    enabled,
                    min_severity,
                }),
        } => {
            set_channel(&mut store, &cfg, &name, enabled, min_severity, now)?;
            channels(&store, &cfg, args.format, out)
        }
        Cmd::Prune { older_than } => {
            let keep = match older_than {
                Some(d) => parse_duration_ms(&d)?,
                None => cfg.store.retention_days.unwrap_or(30) as i64 * 86_400_000,
            };
            prune(&mut store, now.saturating_sub(keep), out)
        }
        Cmd::Metrics { output } => crate::metrics::write(&store, now, output.as_deref(), out),
        Cmd::Report { out: path } => report(&store, &cfg, now, path, out),
        Cmd::BlockModel {
            model,
            reason,
            opencode_config,
            opencode,
        } => {
            let mut cfg = cfg.clone();
            if opencode_config.is_some() {
                cfg.report.opencode_config = opencode_config;
            }
            let o =
                crate::block::block(&mut store, &cfg, &model, reason.as_deref(), &opencode, now)?;
            eprintln!("wd-store: {}", o.message);
            out.line(
                &json!({"kind": "block", "model": o.model, "file": o.file, "backup": o.backup,
                        "created": o.created.map(|c| c.as_str())})
                .to_string(),
            )?;
            Ok(Exit::Ok)
        }
        Cmd::NotifyOnAction { wait_secs } => {
            let with = cfg
                .report
                .open_with
                .clone()
                .filter(|w| !w.trim().is_empty());
            crate::notify::click::notify_and_wait(
                stdin,
                out,
                with.as_deref().unwrap_or("xdg-open"),
                std::time::Duration::from_secs(wait_secs),
            )?;
            Ok(Exit::Ok)
        }
        Cmd::Blocks { all } => blocks(&store, all, args.format, out),
        Cmd::UnblockModel { model } => {
            let o = crate::block::unblock(&mut store, &model, now)?;
            eprintln!("wd-store: {}", o.message);
            out.line(&json!({"kind": "unblock", "model": o.model, "file": o.file}).to_string())?;
            Ok(Exit::Ok)
        }
    };
    r.map_err(|e| store.explain(e))
}

fn tick(
    store: &mut Store,
    stdin: &mut dyn BufRead,
    out: &mut Out,
    outcome: Option<String>,
    started: i64,
    calls: Option<&std::path::Path>,
) -> Result<Exit> {
    out.line_buffered(false);
    let mut vs: Vec<Verdict> = Vec::new();
    let mut sources: Vec<String> = Vec::new();
    let mut blind: Vec<String> = Vec::new();
    let mut bad = 0;
    // a downstream that stops reading must not cost the tick: keep reading, record, then report
    let mut write_failed: Option<std::io::Error> = None;
    let skipped = for_each_line(&[], stdin, |name, n, line| {
        if write_failed.is_none() {
            if let Err(e) = out.line(line) {
                write_failed = Some(e);
            }
        }
        let kind = match kind_of(line) {
            Ok(k) => k,
            Err(e) => {
                eprintln!("wd-store: {name}:{n}: {e}");
                bad += 1;
                return Ok(());
            }
        };
        match kind.as_deref() {
            Some("verdict") => match serde_json::from_str::<Verdict>(line) {
                Ok(v) => vs.push(v),
                Err(e) => {
                    eprintln!("wd-store: {name}:{n}: {e}");
                    bad += 1;
                }
            },
            Some("source") => {
                if let Ok(v) = serde_json::from_str::<Value>(line) {
                    if let Some(s) = v["source"].as_str() {
                        sources.push(s.to_string());
                    }
                }
            }
            Some("blind") => {
                let b = Blind::read(line);
                blind.push(format!("{}: {}", b.source, b.reason));
            }
            _ => {}
        }
        Ok(())
    })?;
    bad += skipped;
    let flagged = vs.iter().filter(|v| v.flagged).count();
    let outcome = outcome.unwrap_or_else(|| {
        if !blind.is_empty() || bad > 0 {
            "blind"
        } else if sources.is_empty() && vs.is_empty() {
            "no_opencode"
        } else if flagged > 0 {
            "flagged"
        } else {
            "ok"
        }
        .to_string()
    });
    let duration = (now_ms() - started).max(0);
    let blind_text = (!blind.is_empty()).then(|| blind.join("; "));
    let tx = store.write()?;
    tx.execute(
        "INSERT INTO ticks (t, duration_ms, sessions, flagged, outcome, sources, blind) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        params![started, duration, vs.len() as i64, flagged as i64, outcome, json!(sources).to_string(), blind_text],
    )?;
    let id = tx.last_insert_rowid();
    {
        let mut ins = tx.prepare(
            "INSERT OR REPLACE INTO verdicts (tick, t, session, root, agent, model, flagged, reasons, signals,
             landed_in_window, calls, calls_since_landed, cost_since_landed, first_flag_index, first_flag_t,
             loop_start_index, evidence, digest, opinion, liveness)
             VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15,?16,?17,?18,?19,?20)",
        )?;
        for v in &vs {
            let reasons: Vec<&str> = v.reasons.iter().map(|r| r.name()).collect();
            let loop_start = v.evidence.as_ref().and_then(|e| e.loop_start.as_ref());
            ins.execute(params![
                id,
                started,
                v.session,
                v.root(),
                v.agent,
                v.model,
                v.flagged,
                reasons.join(","),
                Value::Object(v.signals.to_map()).to_string(),
                v.landed_in_window,
                v.calls as i64,
                v.calls_since_landed as i64,
                v.cost_since_landed,
                v.first_flag.as_ref().map(|f| f.index as i64),
                v.first_flag.as_ref().map(|f| f.t),
                loop_start.map(|f| f.index as i64),
                v.evidence.as_ref().map(|e| json!(e).to_string()),
                (!v.digest.is_empty()).then(|| json!(v.digest).to_string()),
                v.extra.get("opinion").map(|o| o.to_string()),
                v.liveness.as_ref().map(|o| json!(o).to_string()),
            ])?;
        }
    }
    if let Some(path) = calls {
        let flagged: std::collections::HashSet<String> = vs
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
    if let Some(e) = write_failed {
        return Err(anyhow::Error::new(e).context("passing the stream on"));
    }
    out.line(
        &json!({"kind": "tick", "id": id, "t": started, "outcome": outcome, "sessions": vs.len(),
                "flagged": flagged, "sources": sources})
        .to_string(),
    )?;
    Ok(if bad > 0 { Exit::Error } else { Exit::Ok })
}

/// Columns whose text is JSON written by wd-store itself (verdicts' signals, evidence, digest).
const JSON_COLS: &[&str] = &["signals", "evidence", "digest"];

/// Rows with named columns, printed as JSONL objects, a table, or CSV.
pub struct Rows {
    pub kind: &'static str,
    pub cols: Vec<&'static str>,
    pub rows: Vec<Vec<Value>>,
}

impl Rows {
    fn query(store: &Store, kind: &'static str, sql: &str, p: &[Sql]) -> Result<Rows> {
        let mut st = store.conn.prepare(sql)?;
        let cols: Vec<&'static str> = st
            .column_names()
            .into_iter()
            .map(|c| &*Box::leak(c.to_string().into_boxed_str()))
            .collect();
        let n = cols.len();
        let rows = st
            .query_map(params_from_iter(p.iter()), |r| {
                (0..n)
                    .map(|i| {
                        Ok(match r.get_ref(i)? {
                            rusqlite::types::ValueRef::Null => Value::Null,
                            rusqlite::types::ValueRef::Integer(x) => json!(x),
                            rusqlite::types::ValueRef::Real(x) => json!((x * 1e6).round() / 1e6),
                            rusqlite::types::ValueRef::Text(t) => json!(String::from_utf8_lossy(t)),
                            rusqlite::types::ValueRef::Blob(_) => Value::Null,
                        })
                    })
                    .collect::<rusqlite::Result<Vec<Value>>>()
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        let mut rows = rows;
        // columns that hold JSON objects come out as objects, not as strings of JSON
        for (i, c) in cols.iter().enumerate() {
            if JSON_COLS.contains(c) {
                for r in &mut rows {
                    if let Some(parsed) = r[i].as_str().and_then(|t| serde_json::from_str(t).ok()) {
                        r[i] = parsed;
                    }
                }
            }
        }
        Ok(Rows { kind, cols, rows })
    }

    pub fn print(&self, format: Format, out: &mut Out) -> Result<()> {
        match format {
            Format::Jsonl => {
                for r in &self.rows {
                    let mut m = Map::new();
                    m.insert("kind".into(), json!(self.kind));
                    for (c, v) in self.cols.iter().zip(r) {
                        m.insert(c.to_string(), v.clone());
                    }
                    out.line(&Value::Object(m).to_string())?;
                }
            }
            Format::Table => {
                // people read times, not epoch milliseconds
                let timeish = |c: &str| {
                    matches!(
                        c,
                        "t" | "last_tick"
                            | "opened"
                            | "resolved"
                            | "last_fired"
                            | "first_flag_t"
                            | "blocked"
                            | "unblocked"
                    )
                };
                let rows: Vec<Vec<String>> = self
                    .rows
                    .iter()
                    .map(|r| {
                        r.iter()
                            .zip(&self.cols)
                            .map(|(v, c)| match v.as_i64() {
                                Some(ms) if timeish(c) && ms > 1_000_000_000_000 => {
                                    crate::cli::iso_ms(ms)[..19].replace('T', " ")
                                }
                                _ => cell(v),
                            })
                            .collect()
                    })
                    .collect();
                crate::cli::write_table(out, &self.cols, &rows)?;
            }
            Format::Csv => {
                let mut w = csv::Writer::from_writer(out);
                w.write_record(&self.cols)?;
                for r in &self.rows {
                    w.write_record(r.iter().map(cell))?;
                }
                w.flush()?;
            }
        }
        Ok(())
    }
}

fn cell(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn status(store: &Store, cfg: &Config, format: Format, out: &mut Out) -> Result<Exit> {
    let mut r = Rows::query(
        store,
        "status",
        "SELECT t.t AS last_tick, t.outcome, t.sessions, t.flagged,
                (SELECT count(*) FROM verdicts v WHERE v.tick = t.id) AS verdicts,
                (SELECT count(*) FROM alerts WHERE state = 'open') AS open_alerts,
                t.duration_ms, t.blind
         FROM (SELECT 0) LEFT JOIN ticks t ON t.id = (SELECT max(id) FROM ticks)",
        &[],
    )?;
    let ch = channel_rows(store, cfg)?;
    r.cols.push("channels");
    let summary: Vec<String> = ch
        .iter()
        .map(|c| {
            format!(
                "{}:{}:{}",
                c["name"].as_str().unwrap_or(""),
                if c["enabled"] == true { "on" } else { "off" },
                c["min_severity"].as_str().unwrap_or("")
            )
        })
        .collect();
    let chv = if format == Format::Jsonl {
        json!(ch)
    } else {
        json!(summary.join(" "))
    };
    for row in &mut r.rows {
        row.push(chv.clone());
    }
    r.print(format, out)?;
    Ok(Exit::Ok)
}

/// "41 calls, $0.37, 12 min" from an episode's columns; the duration in the words of the events
/// (`alert::text::duration`: "44 s", "12 min", "2 h 05 min").
const BURNED: &str =
    "CASE WHEN p.calls IS NOT NULL THEN printf('%d calls, $%.2f, %s', p.calls, p.cost,
       (SELECT CASE WHEN s < 60 THEN printf('%d s', s) WHEN s < 3600 THEN printf('%d min', s / 60)
                    ELSE printf('%d h %02d min', s / 3600, s % 3600 / 60) END
        FROM (SELECT max(coalesce(p.duration_ms, 0), 0) / 1000 AS s))) END";

fn loops(store: &Store, recent: i64, format: Format, out: &mut Out) -> Result<Exit> {
    Rows::query(
        store,
        "loop",
        &format!(
            "SELECT p.severity, p.dedup_key, p.state, p.id AS episode, p.opened, p.flagged_ticks,
                p.last_decision, p.reason, p.agent, p.model, p.top_target, p.calls, p.cost, p.duration_ms,
                {BURNED} AS burned, p.evidence, p.opinion,
                -- the last event each channel was sent for this episode (SQLite takes the row of max())
                (SELECT group_concat(channel || ':' || state, ' ')
                   FROM (SELECT d.channel, e.state, max(e.id) FROM deliveries d JOIN events e ON e.id = d.event
                         WHERE e.episode = p.id AND d.status = 'sent' GROUP BY d.channel)) AS last_sent,
                p.title
         FROM episodes p WHERE p.state = 'open' OR p.resolved >= ?1
         ORDER BY p.state = 'open' DESC, p.severity = 'critical' DESC, p.opened"
        ),
        &[Sql::Integer(recent)],
    )?
    .print(format, out)?;
    Ok(Exit::Ok)
}

fn alerts(
    store: &Store,
    since: i64,
    kind: Option<String>,
    limit: usize,
    format: Format,
    out: &mut Out,
) -> Result<Exit> {
    if let Some(k) = &kind {
        if !matches!(crate::alert::AlertKind::parse(k), Some(k) if k != crate::alert::AlertKind::Test)
        {
            bail!("unknown alert kind {k:?} (loop, blind, stalled, retrying, waiting, interrupted, unfinished)");
        }
    }
    Rows::query(
        store,
        "episode",
        &format!(
            "SELECT p.id AS episode, p.dedup_key, p.kind AS alert, p.state, p.peak_severity, p.opened, p.resolved, p.reason,
                p.flagged_ticks, p.calls, p.cost, p.duration_ms, {BURNED} AS burned, p.agent, p.model, p.top_target,
                p.evidence, p.title
         FROM episodes p
         WHERE (p.state = 'open' OR p.resolved >= ?1 OR p.opened >= ?1) AND (?2 IS NULL OR p.kind = ?2)
         ORDER BY p.opened DESC, p.id DESC LIMIT ?3"
        ),
        &[
            Sql::Integer(since),
            kind.map(Sql::Text).unwrap_or(Sql::Null),
            Sql::Integer(limit as i64),
        ],
    )?
    .print(format, out)?;
    Ok(Exit::Ok)
}

fn blocks(store: &Store, all: bool, format: Format, out: &mut Out) -> Result<Exit> {
    Rows::query(
        store,
        "block",
        "SELECT model, t AS blocked, who, reason, file, created, unblocked, unblocked_by,
                CASE WHEN unblocked IS NULL THEN 'wd-store unblock-model ' || model END AS undo
         FROM blocks WHERE ?1 OR unblocked IS NULL ORDER BY t DESC, id DESC",
        &[Sql::Integer(all as i64)],
    )?
    .print(format, out)?;
    Ok(Exit::Ok)
}

fn verdicts(
    store: &Store,
    since: Option<i64>,
    session: Option<String>,
    flagged: bool,
    limit: usize,
    format: Format,
    out: &mut Out,
) -> Result<Exit> {
    let mut sql = String::from(
        "SELECT t, tick, session, root, agent, model, flagged, reasons, signals, landed_in_window, calls,
                calls_since_landed, cost_since_landed, first_flag_index, first_flag_t, loop_start_index, evidence,
                digest, opinion, liveness
         FROM verdicts WHERE 1 = 1",
    );
    let mut p: Vec<Sql> = Vec::new();
    if let Some(s) = since {
        sql += " AND t >= ?";
        p.push(Sql::Integer(s));
    }
    if let Some(s) = session {
        sql += " AND session = ?";
        p.push(Sql::Text(s));
    }
    if flagged {
        sql += " AND flagged = 1";
    }
    sql += " ORDER BY t DESC, session LIMIT ?";
    p.push(Sql::Integer(limit as i64));
    Rows::query(store, "verdict_row", &sql, &p)?.print(format, out)?;
    Ok(Exit::Ok)
}

fn rollup(store: &Store, by: &str, since: i64, format: Format, out: &mut Out) -> Result<Exit> {
    let col = if by == "agent" { "agent" } else { "model" };
    let sql = format!(
        "WITH s AS (SELECT {col} AS k, session, max(flagged) AS f FROM verdicts WHERE t >= ?1 GROUP BY {col}, session),
              total AS (SELECT count(*) AS n, sum(f) AS nf FROM s)
         SELECT coalesce(k, '(unknown)') AS {col}, count(*) AS sessions,
                round(1.0 * count(*) / (SELECT n FROM total), 3) AS share_of_sessions,
                sum(f) AS flagged_sessions,
                round(1.0 * sum(f) / max(1, (SELECT nf FROM total)), 3) AS share_of_flagged
         FROM s GROUP BY k ORDER BY flagged_sessions DESC, sessions DESC"
    );
    Rows::query(store, "rollup", &sql, &[Sql::Integer(since)])?.print(format, out)?;
    Ok(Exit::Ok)
}

/// Config channels with their run-time overrides applied.
pub fn channel_rows(store: &Store, cfg: &Config) -> Result<Vec<Value>> {
    let mut out = Vec::new();
    for c in &cfg.channels {
        let (en, sev) = store.channel_override(&c.name)?;
        let overridden = en.is_some() || sev.is_some();
        out.push(json!({
            "name": c.name,
            "type": c.kind(),
            "enabled": en.unwrap_or(c.enabled),
            "min_severity": sev.unwrap_or_else(|| c.min_severity.as_str().to_string()),
            "rate_limit_secs": c.rate_limit_secs,
            "overridden": overridden,
        }));
    }
    Ok(out)
}

fn channels(store: &Store, cfg: &Config, format: Format, out: &mut Out) -> Result<Exit> {
    let rows = channel_rows(store, cfg)?;
    let cols = vec![
        "name",
        "type",
        "enabled",
        "min_severity",
        "rate_limit_secs",
        "overridden",
    ];
    Rows {
        kind: "channel",
        rows: rows
            .iter()
            .map(|r| cols.iter().map(|c| r[*c].clone()).collect())
            .collect(),
        cols,
    }
    .print(format, out)?;
    Ok(Exit::Ok)
}

fn set_channel(
    store: &mut Store,
    cfg: &Config,
    name: &str,
    enabled: Option<bool>,
    min_severity: Option<String>,
    now: i64,
) -> Result<()> {
    if !cfg.channels.iter().any(|c| c.name == name) {
        let known: Vec<&str> = cfg.channels.iter().map(|c| c.name.as_str()).collect();
        bail!(
            "no channel {name:?} in the config (channels: {})",
            known.join(", ")
        );
    }
    if enabled.is_none() && min_severity.is_none() {
        bail!("nothing to set: give --enabled and/or --min-severity");
    }
    if let Some(s) = &min_severity {
        Severity::parse(s)?;
    }
    let tx = store.write()?;
    tx.execute(
        "INSERT INTO channels (name, enabled, min_severity, updated) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (name) DO UPDATE SET enabled = coalesce(?2, enabled),
             min_severity = coalesce(?3, min_severity), updated = ?4",
        params![name, enabled, min_severity, now],
    )?;
    tx.commit().context("saving channel settings")?;
    Ok(())
}

fn prune(store: &mut Store, before: i64, out: &mut Out) -> Result<Exit> {
    let tx = store.write()?;
    let v = tx.execute("DELETE FROM verdicts WHERE t < ?1", params![before])?;
    tx.execute(
        "DELETE FROM call_marks WHERE session NOT IN (SELECT session FROM verdicts)",
        [],
    )?;
    let t = tx.execute("DELETE FROM ticks WHERE t < ?1", params![before])?;
    let a = tx.execute(
        "DELETE FROM episodes WHERE state = 'resolved' AND resolved < ?1",
        params![before],
    )?;
    let e = tx.execute(
        "DELETE FROM events WHERE t < ?1 AND dedup_key NOT IN (SELECT dedup_key FROM alerts WHERE state = 'open')",
        params![before],
    )?;
    tx.commit()?;
    out.line(
        &json!({"kind": "pruned", "before": before, "ticks": t, "verdicts": v, "alerts": a, "events": e})
            .to_string(),
    )?;
    Ok(Exit::Ok)
}

/// `wd-store report`: the operator's page, to a file (atomically) or stdout.
fn report(
    store: &Store,
    cfg: &Config,
    now: i64,
    path: Option<PathBuf>,
    out: &mut Out,
) -> Result<Exit> {
    let page = crate::report::gather(store, cfg, now)?;
    let text = crate::report::html::render(&page);
    match path {
        Some(p) if p.as_os_str() == "-" => std::io::Write::write_all(out, text.as_bytes())?,
        p => {
            let p = p.unwrap_or_else(|| cfg.report_file());
            crate::report::write_atomic(&p, text.as_bytes())
                .with_context(|| format!("report {}", p.display()))?;
        }
    }
    Ok(Exit::Ok)
}

#[cfg(test)]
mod tests {
    use super::BURNED;
    use crate::alert::text::{burned, duration};
    use crate::alert::Figures;

    /// The `burned` column says the duration as the events do (seconds under a minute).
    #[test]
    fn the_burned_column_words_durations_as_the_events_do() {
        let c = rusqlite::Connection::open_in_memory().unwrap();
        for ms in [
            0,
            999,
            44_000,
            59_999,
            60_000,
            12 * 60_000 + 5_000,
            2 * 3_600_000 + 5 * 60_000,
            -5,
        ] {
            let sql = format!(
                "SELECT {BURNED} FROM (SELECT 41 AS calls, 0.3712 AS cost, {ms} AS duration_ms) p"
            );
            let got: String = c.query_row(&sql, [], |r| r.get(0)).unwrap();
            assert_eq!(got, format!("41 calls, $0.37, {}", duration(ms)), "{ms} ms");
            let f = Figures {
                calls: 41,
                cost: 0.3712,
                duration_ms: ms,
                flagged_ticks: 1,
            };
            assert!(burned(&f).ends_with(&duration(ms)));
        }
        let got: String = c
            .query_row(&format!("SELECT {BURNED} FROM (SELECT 41 AS calls, 0.5 AS cost, 44000 AS duration_ms) p"), [], |r| r.get(0))
            .unwrap();
        assert_eq!(got, "41 calls, $0.50, 44 s");
        let none: Option<String> = c
            .query_row(&format!("SELECT {BURNED} FROM (SELECT NULL AS calls, NULL AS cost, NULL AS duration_ms) p"), [], |r| r.get(0))
            .unwrap();
        assert_eq!(none, None);
    }
}
