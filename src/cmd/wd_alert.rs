//! `wd-alert`: verdicts in, alert transitions out, delivered through channels.
//!
//! In: the tick stream (`verdict`, `blind`, `source` and the `tick` record `wd-store tick`
//! appends). State lives in the watchdog database. Each run reads the open episodes, decides a
//! plan, asks the second opinion if wanted, words the events and routes them, and only then
//! writes the plan with one pending delivery per channel (an outbox) in one short transaction
//! (`alert::lifecycle`); deliveries are attempted after it and their outcome recorded
//! (`alert::outbox`). So the
//! same tick twice sends nothing, and a crash can at worst repeat one notification, never lose a
//! resolve. Out: each new event as JSONL; a log line per transition and per failed delivery on
//! stderr.

use crate::alert::{lifecycle, outbox, AlertKind, Event, TickView, Transition, TEST_KEY};
use crate::channels::{deliver, effective_channels, EffectiveChannel};
use crate::cli::{for_each_line, now_ms, Exit, Out};
use crate::config::Config;
use crate::record::{kind_of, Blind, Verdict};
use crate::severity::Severity;
use crate::store::Store;
use anyhow::{Context, Result};
use clap::Parser;
use serde_json::{json, Value};
use std::io::BufRead;
use std::path::PathBuf;
use std::time::Duration;

const EXAMPLES: &str = "\
Examples:
  ... | progress-detect | wd-store tick | wd-alert
  wd-alert --test                              # a test alert through every enabled channel
  wd-alert --test --channel desktop --severity critical";

/// Turn verdicts into alert transitions and deliver them.
#[derive(Parser, Debug)]
#[command(name = "wd-alert", version, after_help = EXAMPLES)]
pub struct Args {
    /// The watchdog database (default $XDG_STATE_HOME/oc-watchdog/watchdog.db).
    #[arg(long, value_name = "PATH")]
    pub db: Option<PathBuf>,
    /// Config file (default $XDG_CONFIG_HOME/oc-watchdog/watchdog.toml if it exists).
    #[arg(long, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// The current time in epoch ms (default: the clock).
    #[arg(long, value_name = "MS")]
    pub now: Option<i64>,
    /// Send a test alert through the enabled channels (exit 1 if one fails).
    #[arg(long)]
    pub test: bool,
    /// With --test: only this channel (even if disabled).
    #[arg(long, value_name = "NAME", requires = "test")]
    pub channel: Option<String>,
    /// With --test: the test alert's severity.
    #[arg(long, value_name = "SEVERITY", default_value = "warning", value_parser = ["info", "warning", "critical"])]
    pub severity: String,
}

pub fn main() -> i32 {
    crate::cli::main("wd-alert", run)
}

/// Reads the tick stream.
fn read_tick(stdin: &mut dyn BufRead, now: i64) -> Result<(TickView, Option<i64>, String, usize)> {
    let mut tick = TickView {
        t: now,
        ..TickView::default()
    };
    let mut tick_id: Option<i64> = None;
    let mut hasher = InputHash::default();
    let mut bad = 0;
    let skipped = for_each_line(&[], stdin, |name, n, line| {
        let kind = match kind_of(line) {
            Ok(k) => k,
            Err(e) => {
                eprintln!("wd-alert: {name}:{n}: {e}");
                bad += 1;
                return Ok(());
            }
        };
        match kind.as_deref() {
            Some("verdict") => match serde_json::from_str::<Verdict>(line) {
                Ok(v) => {
                    hasher.push(line);
                    tick.verdicts.push(v)
                }
                Err(e) => {
                    eprintln!("wd-alert: {name}:{n}: {e}");
                    bad += 1;
                }
            },
            Some("blind") => {
                let b = Blind::read(line);
                hasher.push(line);
                tick.blind.push((b.source, b.reason));
            }
            Some("source") => {
                let v: Value = match serde_json::from_str(line) {
                    Ok(v) => v,
                    Err(e) => {
                        eprintln!("wd-alert: {name}:{n}: {e}");
                        bad += 1;
                        return Ok(());
                    }
                };
                if let Some(s) = v["source"].as_str() {
                    tick.sources.push(s.to_string());
                }
            }
            Some("tick") => {
                let v: Value = match serde_json::from_str(line) {
                    Ok(v) => v,
                    Err(e) => {
                        eprintln!("wd-alert: {name}:{n}: {e}");
                        bad += 1;
                        return Ok(());
                    }
                };
                tick_id = v["id"].as_i64();
                if let Some(t) = v["t"].as_i64() {
                    tick.t = t;
                }
            }
            _ => {}
        }
        Ok(())
    })?;
    bad += skipped;
    if bad > 0 && tick.blind.is_empty() {
        tick.blind
            .push(("wd-alert input".into(), format!("{bad} unreadable line(s)")));
    }
    // two verdicts for one session (a stream fed twice): the last one counts
    tick.dedup();
    let key = match tick_id {
        Some(id) => format!("tick:{id}"),
        None => format!("input:{}", hasher.finish()),
    };
    Ok((tick, tick_id, key, bad))
}

pub fn run(args: Args, stdin: &mut dyn BufRead, out: &mut Out) -> Result<Exit> {
    let cfg = Config::load(args.config.as_deref())?;
    let now = args.now.unwrap_or_else(now_ms);
    let path = args.db.clone().unwrap_or_else(|| cfg.store_db());
    let mut store = Store::open_with(&path, cfg.store_busy())?;
    // the desktop channel's click helper serves this record and config
    let mut helper: Vec<std::ffi::OsString> = vec!["--db".into(), path.clone().into()];
    if let Some(c) = &args.config {
        helper.extend(["--config".into(), c.clone().into()]);
    }
    let _ = crate::notify::click::HELPER_ARGS.set(helper);
    if args.test {
        return test(&store, &cfg, &args, now, out);
    }
    let (tick, tick_id, key, bad) = read_tick(stdin, now)?;
    let r = (|| -> Result<Vec<Event>> {
        // channel settings are read once per run, for deciding and for delivering
        let chans = effective_channels(&store, &cfg.channels)?;
        let events = lifecycle::run(&mut store, &cfg, &chans, &tick, &key, tick_id, now)?;
        outbox::deliver_pending(&mut store, &chans, now)?;
        outbox::repost_open(&store, &chans, now)?;
        if let Some(p) = &cfg.store.metrics_file {
            crate::metrics::write(&store, now, Some(p), out)?;
        }
        Ok(events)
    })();
    let events = r.map_err(|e| store.explain(e))?;
    for ev in &events {
        out.line(&serde_json::to_string(ev)?)?;
    }
    Ok(if bad > 0 { Exit::Error } else { Exit::Ok })
}

/// A chained hash of the input's verdict and blind lines, to recognise a tick seen before
/// when no `tick` record names it.
#[derive(Default)]
struct InputHash(String);

impl InputHash {
    fn push(&mut self, line: &str) {
        self.0 = crate::scrub::hash_str(&format!("{}{line}", self.0));
    }
    fn finish(&self) -> String {
        self.0.clone()
    }
}

fn test(store: &Store, cfg: &Config, args: &Args, now: i64, out: &mut Out) -> Result<Exit> {
    let chans = effective_channels(store, &cfg.channels)?;
    let sev = Severity::parse(&args.severity)?;
    let targets: Vec<&EffectiveChannel> = match &args.channel {
        Some(n) => {
            let c = chans.iter().find(|c| &c.cfg.name == n);
            vec![c.with_context(|| format!("no channel {n:?} in the config"))?]
        }
        None => chans.iter().filter(|c| c.enabled).collect(),
    };
    if targets.is_empty() {
        anyhow::bail!("no enabled channel to test (configure [[channels]] in the config)");
    }
    let mut failed = false;
    for c in targets {
        let mut details = serde_json::Map::new();
        details.insert("test".into(), json!(true));
        let ev = Event {
            dedup_key: TEST_KEY.into(),
            severity: sev,
            state: Transition::Trigger,
            title: "oc-watchdog test alert".into(),
            summary: format!(
                "a test of the {} channel ({:?}); nothing is looping",
                c.cfg.name,
                c.cfg.kind()
            ),
            details,
            source: cfg.alert.source.clone(),
            t: now,
            alert: AlertKind::Test,
            root: "test".into(),
            reason: None,
            figures: None,
            episode: None,
            agent: None,
            model: None,
            link: None,
        };
        out.line(&serde_json::to_string(&ev)?)?;
        let wait = Duration::from_secs(c.cfg.timeout_secs.max(1));
        match deliver(&c.cfg, &ev, now, wait) {
            Ok(s) => eprintln!("wd-alert: channel {}: sent ({})", c.cfg.name, s.detail),
            Err(e) => {
                eprintln!("wd-alert: channel {}: failed: {e}", c.cfg.name);
                failed = true;
            }
        }
    }
    Ok(if failed { Exit::Check } else { Exit::Ok })
}
