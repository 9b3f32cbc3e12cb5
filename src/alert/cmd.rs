//! `wd-alert`: verdicts in, alert transitions out, delivered through channels.
//!
//! In: the tick stream (`verdict`, `blind`, `source` and the `tick` record `wd-store tick`
//! appends). State lives in the watchdog database. Each run reads the open episodes, decides a
//! plan (`decide`), asks the second opinion if wanted, words the events (`text`) and routes them,
//! and only then writes the plan with one pending delivery per channel (an outbox) in one short
//! transaction (`apply`); deliveries are attempted after it and their outcome recorded. So the
//! same tick twice sends nothing, and a crash can at worst repeat one notification, never lose a
//! resolve. Out: each new event as JSONL; a log line per transition and per failed delivery on
//! stderr.

use super::apply::{self, quiet, route, Chan, Nudge, Prepared, SentBefore};
use super::channels::{self, deliver, Deadline, Sent};
use super::decide::{self, Input, Step};
use super::opinion::{self, Opinion};
use super::{text, Delivery, Episode, Event, Kind, Mark, Reason, TickView, Transition, Verdict};
use crate::cli::{for_each_line, now_ms, Exit, Out};
use crate::config::{ChannelType, Config, Severity};
use crate::record::{kind_of, Blind};
use crate::store::Store;
use anyhow::{Context, Result};
use clap::Parser;
use rusqlite::{params, OptionalExtension};
use serde_json::{json, Value};
use std::collections::HashMap;
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

fn effective_channels(store: &Store, cfg: &Config) -> Result<Vec<Chan>> {
    cfg.channels
        .iter()
        .map(|c| {
            let (en, sev) = store.channel_override(&c.name)?;
            Ok(Chan {
                cfg: c.clone(),
                enabled: en.unwrap_or(c.enabled),
                min: sev
                    .map(|s| Severity::parse(&s))
                    .transpose()?
                    .unwrap_or(c.min_severity),
            })
        })
        .collect()
}

fn log(ev: &Event) {
    let why = ev
        .reason
        .map(|r| format!(" reason={}", r.as_str()))
        .unwrap_or_default();
    eprintln!(
        "oc-watchdog: dedup={} state={} severity={}{why} title={:?}",
        ev.dedup_key,
        ev.state.as_str(),
        ev.severity.as_str(),
        ev.title
    );
}

/// The operator's local hour, in-process (TZ, else /etc/localtime).
pub fn local_hour(now: i64) -> Option<u8> {
    let ts = jiff::Timestamp::from_millisecond(now).ok()?;
    let tz = jiff::tz::TimeZone::try_system().unwrap_or(jiff::tz::TimeZone::UTC);
    Some(ts.to_zoned(tz).hour() as u8)
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
    if args.test {
        return test(&store, &cfg, &args, now, out);
    }
    let (tick, tick_id, key, bad) = read_tick(stdin, now)?;
    let r = (|| -> Result<Vec<Event>> {
        // channel settings are read once per run, for deciding and for delivering
        let chans = effective_channels(&store, &cfg)?;
        let events = lifecycle(&mut store, &cfg, &chans, &tick, &key, tick_id, now)?;
        deliver_pending(&mut store, &chans, now)?;
        refresh_alertmanager(&store, &chans, now)?;
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

const EPISODE_COLS: &str = "id, dedup_key, kind, root, severity, flagged_ticks, asked, source, opened, title, agent, model, reason, sources";

fn episode_row(r: &rusqlite::Row) -> rusqlite::Result<Episode> {
    Ok(Episode {
        id: r.get(0)?,
        key: r.get(1)?,
        kind: Kind::parse(&r.get::<_, String>(2)?),
        subject: r.get(3)?,
        severity: Severity::parse(&r.get::<_, String>(4)?).unwrap_or(Severity::Warning),
        flagged_ticks: r.get(5)?,
        asked: r.get(6)?,
        source: r.get(7)?,
        opened: r.get(8)?,
        title: r.get(9)?,
        agent: r.get(10)?,
        model: r.get(11)?,
        reason: r
            .get::<_, Option<String>>(12)?
            .as_deref()
            .and_then(Reason::parse),
        sources: r
            .get::<_, Option<String>>(13)?
            .and_then(|s| serde_json::from_str(&s).ok())
            .unwrap_or_default(),
        marks: HashMap::new(),
    })
}

fn load_marks(store: &Store, ep: &mut Episode) -> Result<()> {
    let mut st = store.conn.prepare_cached(
        "SELECT session, calls, calls_since_landed, cost_since_landed, last_call, loop_start, flagged, base_calls,
             base_cost, start
         FROM episode_sessions WHERE episode = ?1",
    )?;
    let rows = st.query_map([ep.id], |r| {
        Ok((
            r.get::<_, String>(0)?,
            Mark {
                calls: r.get::<_, i64>(1)? as u64,
                calls_since_landed: r.get::<_, i64>(2)? as u64,
                cost_since_landed: r.get(3)?,
                last_call: r.get(4)?,
                loop_start: r.get(5)?,
                flagged: r.get(6)?,
                base_calls: r.get::<_, i64>(7)? as u64,
                base_cost: r.get(8)?,
                start: r.get(9)?,
            },
        ))
    })?;
    for row in rows {
        let (s, m) = row?;
        ep.marks.insert(s, m);
    }
    Ok(())
}

fn load_open(store: &Store) -> Result<Vec<Episode>> {
    let mut st = store.conn.prepare(&format!(
        "SELECT {EPISODE_COLS} FROM episodes WHERE state = 'open' ORDER BY id"
    ))?;
    let mut eps = st
        .query_map([], episode_row)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    for e in eps.iter_mut().filter(|e| e.kind == Some(Kind::Loop)) {
        load_marks(store, e)?;
    }
    Ok(eps)
}

/// The last episode of each flagged tree that has no open one.
fn load_last(store: &Store, tick: &TickView, open: &[Episode]) -> Result<HashMap<String, Episode>> {
    let mut out = HashMap::new();
    let mut st = store.conn.prepare_cached(&format!(
        "SELECT {EPISODE_COLS} FROM episodes WHERE dedup_key = ?1 ORDER BY id DESC LIMIT 1"
    ))?;
    for v in tick.verdicts.iter().filter(|v| v.flagged) {
        let key = super::loop_key(v.root());
        if out.contains_key(&key) || open.iter().any(|e| e.key == key) {
            continue;
        }
        if let Some(mut e) = st.query_row([&key], episode_row).optional()? {
            load_marks(store, &mut e)?;
            out.insert(key, e);
        }
    }
    Ok(out)
}

/// Do the figures count from an earlier episode's end (a loop that started again)?
fn again(marks: &decide::Marks) -> bool {
    marks.iter().any(|(_, m)| m.flagged && m.base_calls > 0)
}

/// Decides this tick's transitions and records them with their outbox, in one transaction.
fn lifecycle(
    store: &mut Store,
    cfg: &Config,
    chans: &[Chan],
    tick: &TickView,
    key: &str,
    tick_id: Option<i64>,
    now: i64,
) -> Result<Vec<Event>> {
    let processed = |store: &Store| -> Result<bool> {
        Ok(store
            .conn
            .query_row(
                "SELECT 1 FROM alert_ticks WHERE tick_key = ?1",
                [key],
                |_| Ok(()),
            )
            .optional()?
            .is_some())
    };
    if processed(store)? {
        eprintln!("wd-alert: {key} was already processed; nothing new to send");
        return Ok(Vec::new());
    }
    // read: what is open, what the previous tick saw (no write lock held)
    let open = load_open(store)?;
    let last = load_last(store, tick, &open)?;
    let no_answers = HashMap::new();
    let input = |answers| Input {
        open: &open,
        last: &last,
        tick,
        answers,
        escalate_after: cfg.alert.escalate_after_ticks,
    };
    let mut plan = decide::decide(&input(&no_answers));
    let mut trees: HashMap<&str, Vec<&Verdict>> = HashMap::new();
    for v in &tick.verdicts {
        trees.entry(v.root()).or_default().push(v);
    }
    for t in trees.values_mut() {
        t.sort_by_key(|v| std::cmp::Reverse((v.flagged, v.calls_since_landed)));
    }
    let sessions: HashMap<&str, &Verdict> = tick
        .verdicts
        .iter()
        .map(|v| (v.session.as_str(), v))
        .collect();
    if cfg.second_opinion.enabled {
        let roots: Vec<String> = plan.questions().iter().map(|s| s.to_string()).collect();
        if !roots.is_empty() {
            let asked: Vec<Verdict> = roots.iter().map(|r| trees[r.as_str()][0].clone()).collect();
            let got = opinion::ask_all(&cfg.second_opinion, &asked);
            let answers: HashMap<String, Opinion> = roots.into_iter().zip(got).collect();
            plan = decide::decide(&input(&answers));
        }
    }
    let by_id: HashMap<i64, &Episode> = open.iter().map(|e| (e.id, e)).collect();
    // word the events, route them, decide the nudges: all before the write lock
    let mut events: Vec<Option<Event>> = Vec::with_capacity(plan.steps.len());
    let mut nudges: Vec<Option<Nudge>> = Vec::with_capacity(plan.steps.len());
    for step in &plan.steps {
        let flagged = |root: &str| -> Vec<&Verdict> {
            trees
                .get(root)
                .map(|t| t.iter().copied().filter(|v| v.flagged).collect())
                .unwrap_or_default()
        };
        let mut nudge = None;
        let ev = match step {
            Step::Open {
                kind: Kind::Loop,
                subject,
                severity,
                figures,
                opinion,
                marks,
                ..
            } => {
                let tree = flagged(subject);
                let news = text::LoopNews {
                    state: Transition::Trigger,
                    severity: *severity,
                    opened: now,
                    figures: figures.unwrap_or_default(),
                    reason: None,
                    again: again(marks),
                };
                let mut ev = text::loop_event(cfg, news, &tree, now);
                if let Some(o) = opinion {
                    ev.details.insert("opinion".into(), json!(o));
                }
                Some(ev)
            }
            Step::Open {
                kind: Kind::Blind, ..
            } => Some(text::blind_event(cfg, &tick.blind, now)),
            Step::Open {
                kind,
                subject,
                severity,
                ..
            } => {
                let v = sessions[subject.as_str()];
                if cfg.liveness.nudge && matches!(kind, Kind::Stalled | Kind::Unfinished) {
                    let class = v.liveness_class().map_or("", |c| c.as_str()).to_string();
                    nudge = Some(Nudge {
                        action: crate::scrub::hash_str(&format!(
                            "{subject}|{class}|{now}|{}",
                            crate::liveness::NUDGE_VERSION
                        )),
                        session: subject.clone(),
                        source: v.source.clone(),
                        prompt: crate::liveness::nudge_prompt(&class, v.liveness_evidence()),
                        observation: class,
                    });
                }
                Some(text::live_event(cfg, *kind, *severity, v, now))
            }
            Step::Count {
                episode,
                root,
                escalate: Some(reason),
                figures,
                opinion,
                marks,
                ..
            } => {
                let tree = flagged(root);
                let opened = by_id.get(episode).map(|e| e.opened).unwrap_or(now);
                let news = text::LoopNews {
                    state: Transition::Escalate,
                    severity: Severity::Critical,
                    opened,
                    figures: *figures,
                    reason: Some(*reason),
                    again: again(marks),
                };
                let mut ev = text::loop_event(cfg, news, &tree, now);
                if let Some(o) = opinion {
                    ev.details.insert("opinion".into(), json!(o));
                }
                ev.episode = Some(*episode);
                Some(ev)
            }
            Step::Resolve {
                episode,
                reason,
                why,
                figures,
                ..
            } => by_id
                .get(episode)
                .map(|ep| text::resolve_event(cfg, ep, *reason, why, *figures, now)),
            Step::Count { .. } | Step::Hold { .. } | Step::StillBlind { .. } => None,
        };
        events.push(ev);
        nudges.push(nudge);
    }
    let hour = local_hour(now);
    let mut routes = Vec::with_capacity(events.len());
    {
        let mut key_last = store.conn.prepare_cached(
            "SELECT max(d.t) FROM deliveries d JOIN events e ON e.id = d.event
             WHERE e.dedup_key = ?1 AND d.channel = ?2 AND d.status = 'sent'",
        )?;
        let mut episode_sent = store.conn.prepare_cached(
            "SELECT EXISTS (SELECT 1 FROM deliveries d JOIN events e ON e.id = d.event
             WHERE e.episode = ?1 AND d.channel = ?2 AND d.status IN ('sent', 'failed'))",
        )?;
        for (ev, step) in events.iter().zip(&plan.steps) {
            let mut rs = Vec::new();
            if let Some(ev) = ev {
                let episode = match step {
                    Step::Count { episode, .. } | Step::Resolve { episode, .. } => Some(*episode),
                    _ => None,
                };
                for c in chans {
                    let name = &c.cfg.name;
                    let sent = SentBefore {
                        key_last: key_last.query_row(params![ev.dedup_key, name], |r| r.get(0))?,
                        episode: match episode {
                            Some(e) => episode_sent.query_row(params![e, name], |r| r.get(0))?,
                            None => false,
                        },
                    };
                    let (status, detail) = route(c, ev, sent, hour, now);
                    rs.push((name.clone(), status, detail));
                }
            }
            routes.push(rs);
        }
    }
    let written = apply::apply(
        store,
        Prepared {
            plan: &plan,
            events,
            routes,
            nudges,
            trees: &trees,
            sessions: &sessions,
            open: &by_id,
            tick_key: key,
            tick_id,
            now,
        },
    )?;
    let Some((events, nudges)) = written else {
        eprintln!("wd-alert: {key} was already processed; nothing new to send");
        return Ok(Vec::new());
    };
    for ev in &events {
        log(ev);
    }
    for n in nudges {
        send_nudge(store, &n)?;
    }
    Ok(events)
}

/// Sends a recorded nudge into its session (opencode's `POST /session/{id}/prompt_async`) and
/// records the outcome. Never retried: at most once per action id.
fn send_nudge(store: &mut Store, n: &Nudge) -> Result<()> {
    let result = match n.source.as_deref() {
        Some(url) if url.starts_with("http") => crate::sources::Client::new(url)
            .post(
                &format!("/session/{}/prompt_async", n.session),
                &json!({"parts": [{"type": "text", "text": n.prompt}]}),
            )
            .map(|code| format!("HTTP {code}"))
            .map_err(|e| format!("{e:#}")),
        _ => Err("the session was read from a database: no server to send to".into()),
    };
    let (status, detail) = match &result {
        Ok(d) => ("sent", d.clone()),
        Err(e) => ("failed", e.clone()),
    };
    eprintln!(
        "oc-watchdog: nudge session={} action={} status={status} {detail}",
        n.session, n.action
    );
    let tx = store.write()?;
    tx.execute(
        "UPDATE actions SET status = ?2, detail = ?3 WHERE action_id = ?1",
        params![n.action, status, detail],
    )?;
    tx.commit()?;
    Ok(())
}

/// One row of the outbox.
struct Owed {
    event: i64,
    channel: String,
    status: Delivery,
    body: String,
    attempts: i64,
    key: String,
    state: String,
}

/// Delivers what is pending (and deferred deliveries whose quiet hours ended, and failed
/// resolves, up to 5 attempts). Each outcome is recorded as soon as it is known. A pending or
/// deferred trigger or escalation that a newer event of its alert superseded is not sent. The
/// desktop channel gets its `timeout_secs` per run in all; what it could not try stays pending.
fn deliver_pending(store: &mut Store, chans: &[Chan], now: i64) -> Result<()> {
    let todo: Vec<Owed> = {
        let mut st = store.conn.prepare(
            "SELECT d.event, d.channel, d.status, e.body, d.attempts, e.dedup_key, e.state FROM deliveries d JOIN events e ON e.id = d.event
             WHERE d.status IN ('pending', 'deferred') OR (d.status = 'failed' AND e.state = 'resolve' AND d.attempts < 5)
             ORDER BY d.event",
        )?;
        let rows = st.query_map([], |r| {
            Ok(Owed {
                event: r.get(0)?,
                channel: r.get(1)?,
                status: Delivery::parse(&r.get::<_, String>(2)?).unwrap_or(Delivery::Pending),
                body: r.get(3)?,
                attempts: r.get(4)?,
                key: r.get(5)?,
                state: r.get(6)?,
            })
        })?;
        rows.collect::<rusqlite::Result<_>>()?
    };
    let hour = local_hour(now);
    let mut desktop: HashMap<String, Deadline> = HashMap::new();
    for o in todo {
        let set = |store: &mut Store,
                   st: Delivery,
                   detail: &str,
                   peers: Option<String>|
         -> Result<()> {
            let tx = store.write()?;
            let tried = matches!(st, Delivery::Sent | Delivery::Failed) as i64;
            tx.execute(
                "UPDATE deliveries SET status = ?3, attempts = ?4, t = ?5, detail = ?6, peer_failures = ?7
                 WHERE event = ?1 AND channel = ?2",
                params![o.event, o.channel, st.as_str(), o.attempts + tried, now, detail, peers],
            )?;
            tx.commit()?;
            Ok(())
        };
        let Some(c) = chans.iter().find(|c| c.cfg.name == o.channel) else {
            set(
                store,
                Delivery::Skipped,
                "channel no longer configured",
                None,
            )?;
            continue;
        };
        if o.status != Delivery::Failed && o.state != "resolve" {
            let newer: bool = store.conn.query_row(
                "SELECT EXISTS (SELECT 1 FROM events WHERE dedup_key = ?1 AND id > ?2)",
                params![o.key, o.event],
                |r| r.get(0),
            )?;
            if newer {
                set(
                    store,
                    Delivery::Skipped,
                    "superseded before it was sent",
                    None,
                )?;
                continue;
            }
        }
        if o.status == Delivery::Deferred && quiet(&c.cfg, hour) {
            continue;
        }
        let left = if c.cfg.kind == ChannelType::Desktop {
            let d = desktop
                .entry(c.cfg.name.clone())
                .or_insert_with(|| Deadline::after(Duration::from_secs(c.cfg.timeout_secs.max(1))));
            let left = d.left();
            if left < Duration::from_millis(50) {
                // not tried this run: stays owed for the next one
                continue;
            }
            left
        } else {
            Duration::ZERO
        };
        let ev: Event = serde_json::from_str(&o.body).context("stored event")?;
        match deliver(&c.cfg, &ev, now, left) {
            Ok(Sent {
                detail,
                peer_failures,
            }) => {
                // some peers of an HA pair may be down: logged and recorded, not raised
                let peers = (!peer_failures.is_empty()).then(|| {
                    eprintln!(
                        "oc-watchdog: channel={} dedup={} state={} partly failed: {}",
                        o.channel,
                        ev.dedup_key,
                        ev.state.as_str(),
                        peer_failures.join("; ")
                    );
                    json!(peer_failures).to_string()
                });
                set(store, Delivery::Sent, &detail, peers)?
            }
            Err(e) => {
                eprintln!(
                    "oc-watchdog: channel={} dedup={} state={} delivery failed: {e}",
                    o.channel,
                    ev.dedup_key,
                    ev.state.as_str()
                );
                set(store, Delivery::Failed, &e, None)?;
            }
        }
    }
    Ok(())
}

/// Alertmanager resolves alerts that are not re-sent: re-post every open alert on every tick
/// to each enabled alertmanager channel. Not a new notification (Alertmanager dedups by labels).
fn refresh_alertmanager(store: &Store, chans: &[Chan], now: i64) -> Result<()> {
    let ams: Vec<&Chan> = chans
        .iter()
        .filter(|c| c.enabled && c.cfg.kind == ChannelType::Alertmanager)
        .collect();
    if ams.is_empty() {
        return Ok(());
    }
    let mut st = store.conn.prepare(
        "SELECT e.body FROM episodes p JOIN events e ON e.id = (SELECT max(id) FROM events WHERE episode = p.id)
         WHERE p.state = 'open'",
    )?;
    let open: Vec<Event> = st
        .query_map([], |r| r.get::<_, String>(0))?
        .filter_map(|b| b.ok().and_then(|b| serde_json::from_str::<Event>(&b).ok()))
        .map(|mut e| {
            e.state = Transition::Trigger;
            e
        })
        .collect();
    for c in ams {
        let mine: Vec<(Event, Option<i64>)> = open
            .iter()
            .filter(|e| e.severity >= c.min)
            .map(|e| (e.clone(), None))
            .collect();
        if mine.is_empty() {
            continue;
        }
        match channels::alertmanager(&c.cfg, &mine, now) {
            Err(e) => eprintln!(
                "oc-watchdog: channel={} re-post of open alerts failed: {e}",
                c.cfg.name
            ),
            Ok(s) if !s.peer_failures.is_empty() => eprintln!(
                "oc-watchdog: channel={} re-post of open alerts partly failed: {}",
                c.cfg.name,
                s.peer_failures.join("; ")
            ),
            Ok(_) => {}
        }
    }
    Ok(())
}

fn test(store: &Store, cfg: &Config, args: &Args, now: i64, out: &mut Out) -> Result<Exit> {
    let chans = effective_channels(store, cfg)?;
    let sev = Severity::parse(&args.severity)?;
    let targets: Vec<&Chan> = match &args.channel {
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
            dedup_key: super::TEST_KEY.into(),
            severity: sev,
            state: Transition::Trigger,
            title: "oc-watchdog test alert".into(),
            summary: format!(
                "a test of the {} channel ({:?}); nothing is looping",
                c.cfg.name, c.cfg.kind
            ),
            details,
            source: cfg.alert.source.clone(),
            t: now,
            alert: Kind::Test,
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
