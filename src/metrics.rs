//! Prometheus metrics from the watchdog database, in the text exposition format, for
//! node_exporter's textfile collector. Written atomically: a temp file in the same directory,
//! then a rename, so the collector never reads half a file.

use crate::cli::{Exit, Out};
use crate::store::Store;
use anyhow::{Context, Result};
use std::fmt::Write as _;
use std::path::Path;

/// Renders the metrics text.
pub fn render(store: &Store) -> Result<String> {
    let c = &store.conn;
    let mut s = String::new();
    last_tick(&mut s, c);
    ticks_by_outcome(&mut s, c)?;
    open_alerts(&mut s, c)?;
    delivery_failures(&mut s, c)?;
    Ok(s)
}

/// The last tick's gauges: when, how long, sessions seen and flagged, and its outcome (zeros
/// before the first tick).
fn last_tick(s: &mut String, c: &rusqlite::Connection) {
    let last: Option<(i64, i64, i64, i64, String)> = c
        .query_row(
            "SELECT t, duration_ms, sessions, flagged, outcome FROM ticks ORDER BY id DESC LIMIT 1",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
        )
        .ok();
    let (t, dur, seen, flagged, outcome) = last.unwrap_or((0, 0, 0, 0, String::new()));
    let mut gauge = |name: &str, help: &str, v: String| {
        let _ = writeln!(s, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {v}");
    };
    gauge(
        "ocwatchdog_last_tick_timestamp_seconds",
        "Unix time of the last watchdog tick.",
        format!("{:.3}", t as f64 / 1000.0),
    );
    gauge(
        "ocwatchdog_tick_duration_seconds",
        "Duration of the last tick.",
        format!("{:.3}", dur as f64 / 1000.0),
    );
    gauge(
        "ocwatchdog_sessions_seen",
        "Agent sessions judged by the last tick.",
        seen.to_string(),
    );
    gauge(
        "ocwatchdog_sessions_flagged",
        "Sessions flagged by the last tick.",
        flagged.to_string(),
    );
    let _ = writeln!(
        s,
        "# HELP ocwatchdog_last_tick_outcome Outcome of the last tick (1 for the outcome it had).\n# TYPE ocwatchdog_last_tick_outcome gauge"
    );
    for o in ["ok", "flagged", "no_agent", "blind"] {
        let _ = writeln!(
            s,
            "ocwatchdog_last_tick_outcome{{outcome=\"{o}\"}} {}",
            (o == outcome) as i32
        );
    }
}

/// The ticks recorded, counted by outcome.
fn ticks_by_outcome(s: &mut String, c: &rusqlite::Connection) -> Result<()> {
    let _ = writeln!(
        s,
        "# HELP ocwatchdog_ticks_total Ticks recorded, by outcome.\n# TYPE ocwatchdog_ticks_total counter"
    );
    for o in ["ok", "flagged", "no_agent", "blind"] {
        let n: i64 = c.query_row("SELECT count(*) FROM ticks WHERE outcome = ?1", [o], |r| {
            r.get(0)
        })?;
        let _ = writeln!(s, "ocwatchdog_ticks_total{{outcome=\"{o}\"}} {n}");
    }
    Ok(())
}

/// The open alerts, counted by severity.
fn open_alerts(s: &mut String, c: &rusqlite::Connection) -> Result<()> {
    let _ = writeln!(
        s,
        "# HELP ocwatchdog_open_alerts Open alerts, by severity.\n# TYPE ocwatchdog_open_alerts gauge"
    );
    for sev in ["info", "warning", "critical"] {
        let n: i64 = c.query_row(
            "SELECT count(*) FROM alerts WHERE state = 'open' AND severity = ?1",
            [sev],
            |r| r.get(0),
        )?;
        let _ = writeln!(s, "ocwatchdog_open_alerts{{severity=\"{sev}\"}} {n}");
    }
    Ok(())
}

/// The failed deliveries, counted by channel (its name escaped as a label value).
fn delivery_failures(s: &mut String, c: &rusqlite::Connection) -> Result<()> {
    let _ = writeln!(
        s,
        "# HELP ocwatchdog_channel_delivery_failures_total Failed alert deliveries, by channel.\n# TYPE ocwatchdog_channel_delivery_failures_total counter"
    );
    let mut st = c.prepare(
        "SELECT channel, count(*) FROM deliveries WHERE status = 'failed' GROUP BY channel ORDER BY channel",
    )?;
    let rows = st.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))?;
    for r in rows {
        let (ch, n) = r?;
        let ch = ch.replace('\\', "\\\\").replace('"', "\\\"");
        let _ = writeln!(
            s,
            "ocwatchdog_channel_delivery_failures_total{{channel=\"{ch}\"}} {n}"
        );
    }
    Ok(())
}

/// Writes the metrics to `path` atomically, or to `out` when no path is given.
pub fn write(store: &Store, _now: i64, path: Option<&Path>, out: &mut Out) -> Result<Exit> {
    let text = render(store)?;
    match path {
        None => {
            std::io::Write::write_all(out, text.as_bytes())?;
        }
        Some(p) => {
            let dir = p
                .parent()
                .filter(|d| !d.as_os_str().is_empty())
                .unwrap_or(Path::new("."));
            let tmp = dir.join(format!(
                ".{}.tmp.{}",
                p.file_name().and_then(|f| f.to_str()).unwrap_or("metrics"),
                std::process::id()
            ));
            // whatever fails, no temp file is left behind for the collector to trip over
            let written = std::fs::write(&tmp, &text)
                .with_context(|| {
                    format!(
                        "metrics file {}: cannot write {}",
                        p.display(),
                        tmp.display()
                    )
                })
                .and_then(|()| {
                    std::fs::rename(&tmp, p).with_context(|| {
                        format!(
                            "metrics file {}: cannot replace it with {}",
                            p.display(),
                            tmp.display()
                        )
                    })
                });
            if written.is_err() {
                let _ = std::fs::remove_file(&tmp);
            }
            written?;
        }
    }
    Ok(Exit::Ok)
}
