//! `wd-alert`: verdicts in, alert transitions out, delivered through channels.
//!
//! In: the tick stream (`verdict`, `blind`, `source` and the `tick` record `wd-store tick`
//! appends). State lives in the watchdog database. Each run reads the open episodes, decides a
//! plan, asks the second opinion if wanted, words the events and routes them, and only then
//! writes the plan with one pending delivery per channel (an outbox) in one short transaction
//! (`alert::lifecycle`); deliveries are attempted after it and their outcome recorded
//! (`alert::outbox`). So the
//! same tick twice sends nothing, and a crash can at worst repeat one notification, never lose a
//! resolve. With `--follow` each `tick` record ends one tick, decided at once on whole trees
//! (`alert::follow`), and its events are followed by the tick record, flushed, for `wd-store
//! report --follow`. Out: each new event as JSONL; a log line per transition and per failed delivery on
//! stderr.

use crate::alert::{follow, lifecycle, outbox, AlertKind, Event, TickView, Transition, TEST_KEY};
use crate::channels::{deliver, EffectiveChannel};
use crate::cli::{now_ms, Exit, Out};
use crate::config::Config;
use crate::record::{Blind, Record};
use crate::severity::Severity;
use crate::store::channels::effective_channels;
use crate::store::{episodes, Store};
use anyhow::{Context, Result};
use clap::Parser;
use serde_json::json;
use std::collections::HashSet;
use std::io::BufRead;
use std::path::PathBuf;
use std::time::Duration;

const EXAMPLES: &str = "\
Examples:
  ... | progress-detect | wd-store tick | wd-alert
  ... | wd-store tick --follow | wd-alert --follow | wd-store report --follow
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
    /// Follow mode: every `tick` record ends one tick, decided and delivered at once; its
    /// events and then the tick record are written (and flushed) for `wd-store report
    /// --follow`. Runs until end of input.
    #[arg(long, conflicts_with = "test")]
    pub follow: bool,
}

pub fn main() -> i32 {
    crate::cli::main("wd-alert", run)
}

/// One tick's lines as they come: its verdicts, blind sources, the sources read, and the
/// `tick` record that names it.
#[derive(Default)]
struct TickBatch {
    tick: TickView,
    tick_id: Option<i64>,
    hasher: InputHash,
    bad: usize,
}

impl TickBatch {
    fn new(now: i64) -> TickBatch {
        TickBatch {
            tick: TickView {
                t: now,
                ..TickView::default()
            },
            ..TickBatch::default()
        }
    }

    /// Takes one input line; `true` when it was the `tick` record (the end of a follow tick).
    fn take(&mut self, file: &str, n: usize, raw: std::result::Result<&str, usize>) -> bool {
        let raw = match raw {
            Ok(l) => l,
            Err(col) => {
                eprintln!("wd-alert: {file}:{n}: {}", crate::cli::not_utf8(col));
                self.bad += 1;
                return false;
            }
        };
        match Record::parse(raw) {
            Ok(Record::Verdict(v)) => {
                self.hasher.push(raw);
                self.tick.verdicts.push(*v);
            }
            Ok(Record::Blind(b)) => self.blind(raw, b),
            Err(e) if e.kind.as_deref() == Some("blind") => self.blind(raw, Blind::read(raw)),
            Ok(Record::Source(s)) => self.tick.sources.push(s.source),
            Ok(Record::Tick(t)) => {
                self.tick_id = Some(t.id);
                self.tick.t = t.t;
                self.tick.mono = t.mono;
                self.tick.mode = t.mode;
                self.tick.partial = !t.full;
                return true;
            }
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind.as_deref(),
                    Some("verdict" | "source" | "tick") | None
                ) =>
            {
                eprintln!("wd-alert: {file}:{n}: {e}");
                self.bad += 1;
            }
            Err(_) => {}
        }
        false
    }

    fn blind(&mut self, raw: &str, b: Blind) {
        self.hasher.push(raw);
        self.tick.blind.push((b.source, b.reason));
    }

    /// The tick as the lifecycle sees it, its key (a rerun of it sends nothing), its id and
    /// how many lines could not be read.
    fn finish(mut self) -> (TickView, String, Option<i64>, usize) {
        if self.bad > 0 && self.tick.blind.is_empty() {
            self.tick.blind.push((
                "wd-alert input".into(),
                format!("{} unreadable line(s)", self.bad),
            ));
        }
        // two verdicts for one session (a stream fed twice): the last one counts
        self.tick.dedup();
        let key = match self.tick_id {
            Some(id) => format!("tick:{id}"),
            None => format!("input:{}", self.hasher.finish()),
        };
        (self.tick, key, self.tick_id, self.bad)
    }
}

/// Reads the tick stream (the timer's: one tick, to end of input).
fn read_tick(stdin: &mut dyn BufRead, now: i64) -> Result<(TickView, Option<i64>, String, usize)> {
    let mut batch = TickBatch::new(now);
    crate::cli::each_line(&[], stdin, |file, n, raw| {
        batch.take(file, n, raw);
        Ok(())
    })?;
    let (tick, key, id, bad) = batch.finish();
    Ok((tick, id, key, bad))
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
    if args.follow {
        return follow(&mut store, &cfg, args.now, stdin, out);
    }
    let (tick, tick_id, key, bad) = read_tick(stdin, now)?;
    let events = one_tick(&mut store, &cfg, &tick, &key, tick_id, now, out)?;
    for ev in &events {
        out.line(&serde_json::to_string(ev)?)?;
    }
    Ok(if bad > 0 { Exit::Error } else { Exit::Ok })
}

/// `wd-alert --follow`: one lifecycle run per `tick` record, on the tick [`follow::Cache`]
/// makes of it; writes each tick's events and then its `tick` record, flushed. `now`: the
/// clock at each tick unless `--now` fixes it.
fn follow(
    store: &mut Store,
    cfg: &Config,
    fixed_now: Option<i64>,
    stdin: &mut dyn BufRead,
    out: &mut Out,
) -> Result<Exit> {
    out.line_buffered(false);
    let mut cache = follow::Cache::default();
    let mut batch = TickBatch::new(fixed_now.unwrap_or_else(now_ms));
    let mut bad = 0;
    crate::cli::each_line(&[], stdin, |file, n, raw| {
        if !batch.take(file, n, raw) {
            return Ok(());
        }
        let now = fixed_now.unwrap_or_else(now_ms);
        let done = std::mem::replace(&mut batch, TickBatch::new(now));
        let (tick, key, tick_id, b) = done.finish();
        bad += b;
        let mut tick = cache.view(tick);
        cache.measure(&mut tick, &episodes::open_since(store)?);
        let events = one_tick(store, cfg, &tick, &key, tick_id, now, out)?;
        if let Some(mono) = tick.mono {
            for ev in events.iter().filter(|e| e.state == Transition::Trigger) {
                if let Some(id) = ev.episode {
                    cache.opened(id, mono);
                }
            }
        }
        for ev in &events {
            out.line(&serde_json::to_string(ev)?)?;
        }
        if let Ok(line) = raw {
            out.line(line)?;
        }
        out.flush()?;
        if !tick.partial {
            let open: HashSet<String> = episodes::open_roots(store)?.into_iter().collect();
            cache.forget(tick.mono.unwrap_or(tick.t), &open);
        }
        Ok(())
    })?;
    // what came after the last tick record was never recorded by wd-store: nothing to decide
    if !batch.tick.verdicts.is_empty() || !batch.tick.blind.is_empty() {
        eprintln!("wd-alert: the input ended inside a tick (no `tick` record after its lines); not decided");
    }
    out.flush()?;
    Ok(if bad > 0 { Exit::Error } else { Exit::Ok })
}

/// Runs the lifecycle on one tick, delivers what is pending, re-posts the open alerts where a
/// channel wants that and writes the metrics file; the events recorded come back.
fn one_tick(
    store: &mut Store,
    cfg: &Config,
    tick: &TickView,
    key: &str,
    tick_id: Option<i64>,
    now: i64,
    out: &mut Out,
) -> Result<Vec<Event>> {
    let r = (|| -> Result<Vec<Event>> {
        // channel settings are read once per tick, for deciding and for delivering
        let chans = effective_channels(store, &cfg.channels)?;
        let events = lifecycle::run(store, cfg, &chans, tick, key, tick_id, now)?;
        outbox::deliver_pending(store, &chans, now)?;
        // follow mode's partial ticks come every second or so: re-posting and the metrics
        // go with the full ones ([follow] full_every_secs)
        if !tick.partial {
            outbox::repost_open(store, &chans, now)?;
            if let Some(p) = &cfg.store.metrics_file {
                crate::metrics::write(store, now, Some(p), out)?;
            }
        }
        Ok(events)
    })();
    r.map_err(|e| store.explain(e))
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
        match deliver(&c.cfg, &ev, now, wait, None) {
            Ok(s) => eprintln!("wd-alert: channel {}: sent ({})", c.cfg.name, s.detail),
            Err(e) => {
                eprintln!("wd-alert: channel {}: failed: {e}", c.cfg.name);
                failed = true;
            }
        }
    }
    Ok(if failed { Exit::Check } else { Exit::Ok })
}
