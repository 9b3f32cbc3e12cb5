//! `wd-alert`: verdicts in, alert transitions out, delivered through channels.
//!
//! In: the tick stream (`verdict`, `blind`, `source` and the `tick` record `wd-store tick`
//! appends). State lives in the watchdog database. Each run decides transitions and writes
//! them, with one pending delivery per channel (an outbox), in one transaction; only then are
//! deliveries attempted and their outcome recorded. So the same tick twice sends nothing, and a
//! crash can at worst repeat one notification, never lose a resolve. Out: each new event as
//! JSONL; a log line per transition and per failed delivery on stderr.

use super::channels::{self, deliver};
use super::opinion::{self, Opinion};
use super::{
    decide, details_of, live_key, loop_key, Decision, Event, Open, TickView, Verdict, BLIND_KEY,
};
use crate::cli::{for_each_line, now_ms, Exit, Out};
use crate::config::{ChannelConfig, ChannelType, Config, Severity};
use crate::record::{kind_of, Blind, Signal};
use crate::store::Store;
use anyhow::{Context, Result};
use clap::Parser;
use rusqlite::{params, OptionalExtension, Transaction};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::io::BufRead;
use std::path::PathBuf;

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

/// A channel with its run-time settings applied.
struct Chan {
    cfg: ChannelConfig,
    enabled: bool,
    min: Severity,
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
    eprintln!(
        "oc-watchdog: dedup={} state={} severity={} title={:?}",
        ev.dedup_key,
        ev.state,
        ev.severity.as_str(),
        ev.title
    );
}

pub fn run(args: Args, stdin: &mut dyn BufRead, out: &mut Out) -> Result<Exit> {
    let cfg = Config::load(args.config.as_deref())?;
    let now = args.now.unwrap_or_else(now_ms);
    let path = args.db.clone().unwrap_or_else(|| cfg.store_db());
    let mut store = Store::open_with(&path, cfg.store_busy())?;
    if args.test {
        return test(&store, &cfg, &args, now, out);
    }
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
    let key = match tick_id {
        Some(id) => format!("tick:{id}"),
        None => format!("input:{}", hasher.finish()),
    };
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

fn load_open(store: &Store) -> Result<Vec<Open>> {
    let mut st = store.conn.prepare(
        "SELECT dedup_key, kind, root, severity, flagged_ticks, asked, source FROM alerts WHERE state = 'open'",
    )?;
    let rows = st.query_map([], |r| {
        Ok(Open {
            dedup_key: r.get(0)?,
            kind: r.get(1)?,
            root: r.get(2)?,
            severity: Severity::parse(&r.get::<_, String>(3)?).unwrap_or(Severity::Warning),
            flagged_ticks: r.get(4)?,
            asked: r.get(5)?,
            source: r.get(6)?,
        })
    })?;
    Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
}

fn link(cfg: &Config, root: &str) -> Option<String> {
    (!cfg.alert.link_base.is_empty()).then(|| format!("{}{}", cfg.alert.link_base, root))
}

fn loop_event(
    cfg: &Config,
    state: &str,
    sev: Severity,
    tree: &[&Verdict],
    now: i64,
    opened: i64,
) -> Event {
    let v = tree[0];
    let agent = v.agent.clone().unwrap_or_else(|| "agent".into());
    let repeats = v.repeats();
    let title = format!("opencode loop: {agent} {repeats}");
    let in_tree = if v.root() != v.session {
        format!(" (in the tree of {})", v.root())
    } else {
        String::new()
    };
    let summary = format!(
        "session {}{in_tree}, agent {agent}{}: {repeats}; {} calls and ${:.2} since its last landed change (flagged by {})",
        v.session,
        v.model.as_deref().map(|m| format!(", model {m}")).unwrap_or_default(),
        v.calls_since_landed,
        v.cost_since_landed,
        v.reasons
            .iter()
            .map(|r| r.name())
            .collect::<Vec<_>>()
            .join(", ")
    );
    let mut details = details_of(v, tree);
    details.insert("opened".into(), json!(opened));
    Event {
        dedup_key: loop_key(v.root()),
        severity: sev,
        state: state.into(),
        title,
        summary,
        details,
        source: cfg.alert.source.clone(),
        t: now,
        alert: "loop".into(),
        root: v.root().to_string(),
        agent: v.agent.clone(),
        model: v.model.clone(),
        link: link(cfg, v.root()),
    }
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
    let seen: Option<i64> = store
        .conn
        .query_row(
            "SELECT t FROM alert_ticks WHERE tick_key = ?1",
            [key],
            |r| r.get(0),
        )
        .optional()?;
    if seen.is_some() {
        eprintln!("wd-alert: {key} was already processed; nothing new to send");
        return Ok(Vec::new());
    }
    let open = load_open(store)?;
    let decisions = decide(&open, tick, cfg.alert.escalate_after_ticks);
    let flagged = tick.flagged_roots();
    // second opinions: newly flagged trees, and once more on the next flagged tick
    let mut asks: Vec<(String, Verdict)> = Vec::new();
    if cfg.second_opinion.enabled {
        for d in &decisions {
            match d {
                Decision::Trigger { root } => asks.push((root.clone(), flagged[root][0].clone())),
                Decision::Continue {
                    root,
                    ask_again: true,
                    escalate: false,
                    ..
                } => asks.push((root.clone(), flagged[root][0].clone())),
                _ => {}
            }
        }
    }
    let answers = opinion::ask_all(
        &cfg.second_opinion,
        &asks.iter().map(|a| a.1.clone()).collect::<Vec<_>>(),
    );
    let opinions: HashMap<String, Opinion> = asks.into_iter().map(|a| a.0).zip(answers).collect();
    let tx = store.write()?;
    let mut events = Vec::new();
    let mut nudges: Vec<Nudge> = Vec::new();
    for d in decisions {
        match d {
            Decision::Trigger { root } => {
                let tree = &flagged[&root];
                let op = opinions.get(&root);
                let sev = if op.is_some_and(Opinion::yes) {
                    Severity::Critical
                } else {
                    Severity::Warning
                };
                let mut ev = loop_event(cfg, "trigger", sev, tree, now, now);
                if let Some(o) = op {
                    ev.details.insert("opinion".into(), json!(o));
                }
                let v = tree[0];
                tx.execute(
                    "INSERT INTO alerts (dedup_key, kind, root, state, severity, opened, last_fired, resolved, flagged_ticks,
                        asked, agent, model, title, top_target, calls_since_landed, cost_since_landed, opinion, source)
                     VALUES (?1, 'loop', ?2, 'open', ?3, ?4, ?4, NULL, 1, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)
                     ON CONFLICT (dedup_key) DO UPDATE SET state = 'open', severity = ?3, opened = ?4, last_fired = ?4,
                        resolved = NULL, flagged_ticks = 1, asked = ?5, agent = ?6, model = ?7, title = ?8, top_target = ?9,
                        calls_since_landed = ?10, cost_since_landed = ?11, opinion = ?12, source = ?13",
                    params![
                        ev.dedup_key, root, sev.as_str(), now, op.is_some() as i64, v.agent, v.model, ev.title,
                        v.signals.what(Signal::Top), v.calls_since_landed as i64,
                        v.cost_since_landed, op.map(|o| json!(o).to_string()), v.source
                    ],
                )?;
                record_opinion(&tx, tick_id, v, op)?;
                events.push(ev);
            }
            Decision::Continue {
                key: k,
                root,
                flagged_ticks,
                escalate,
                ask_again,
            } => {
                let tree = &flagged[&root];
                let v = tree[0];
                let op = opinions.get(&root).filter(|_| ask_again);
                let up = escalate || op.is_some_and(Opinion::yes);
                tx.execute(
                    "UPDATE alerts SET flagged_ticks = ?2, agent = ?3, model = ?4, top_target = ?5, calls_since_landed = ?6,
                        cost_since_landed = ?7, asked = asked + ?8, opinion = coalesce(?9, opinion)
                     WHERE dedup_key = ?1",
                    params![
                        k, flagged_ticks, v.agent, v.model, v.signals.what(Signal::Top),
                        v.calls_since_landed as i64, v.cost_since_landed, op.is_some() as i64,
                        op.map(|o| json!(o).to_string())
                    ],
                )?;
                record_opinion(&tx, tick_id, v, op)?;
                if up {
                    let opened: i64 = tx.query_row(
                        "SELECT opened FROM alerts WHERE dedup_key = ?1",
                        [&k],
                        |r| r.get(0),
                    )?;
                    let mut ev = loop_event(cfg, "escalate", Severity::Critical, tree, now, opened);
                    ev.details
                        .insert("flagged_ticks".into(), json!(flagged_ticks));
                    if let Some(o) = op {
                        ev.details.insert("opinion".into(), json!(o));
                    }
                    tx.execute(
                        "UPDATE alerts SET severity = 'critical', last_fired = ?2, title = ?3 WHERE dedup_key = ?1",
                        params![k, now, ev.title],
                    )?;
                    events.push(ev);
                }
            }
            Decision::Resolve { key: k, why } => {
                let (kind, root, title, agent, model, opened): (String, String, String, Option<String>, Option<String>, i64) =
                    tx.query_row(
                        "SELECT kind, root, title, agent, model, opened FROM alerts WHERE dedup_key = ?1",
                        [&k],
                        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?)),
                    )?;
                tx.execute(
                    "UPDATE alerts SET state = 'resolved', severity = 'info', resolved = ?2, last_fired = ?2 WHERE dedup_key = ?1",
                    params![k, now],
                )?;
                let mut details = serde_json::Map::new();
                details.insert("why".into(), json!(why));
                details.insert("opened".into(), json!(opened));
                details.insert("open_for_ms".into(), json!(now - opened));
                events.push(Event {
                    dedup_key: k.clone(),
                    severity: Severity::Info,
                    state: "resolve".into(),
                    title: format!("resolved: {title}"),
                    summary: format!("{root}: {why}"),
                    details,
                    source: cfg.alert.source.clone(),
                    t: now,
                    alert: kind,
                    root: root.clone(),
                    agent,
                    model,
                    link: link(cfg, &root),
                });
            }
            Decision::Live {
                session,
                kind,
                severity,
            } => {
                let v = tick.verdicts.iter().find(|v| v.session == session).unwrap();
                let l = v.liveness.clone().unwrap_or_default();
                let evidence = l.evidence.clone();
                let agent = v.agent.clone().unwrap_or_else(|| "agent".into());
                let what = match kind {
                    "stalled" => "stalled",
                    "retrying" => "keeps retrying its provider",
                    "waiting" => "needs a person",
                    "interrupted" => "was interrupted",
                    _ => "stopped with its own list unfinished",
                };
                let key = live_key(kind, &session);
                let title = format!("opencode {agent} session {what}");
                if cfg.liveness.nudge && matches!(kind, "stalled" | "unfinished") {
                    // one prompt per alert episode: recorded here, in the transaction that opens
                    // the alert, before anything is sent; a rerun finds the row and sends nothing
                    let class = l.class.as_str();
                    let action = crate::scrub::hash_str(&format!(
                        "{session}|{class}|{now}|{}",
                        crate::liveness::NUDGE_VERSION
                    ));
                    let prompt = crate::liveness::nudge_prompt(class, &evidence);
                    let fresh = tx.execute(
                        "INSERT OR IGNORE INTO actions (action_id, session, observation, prompt, t, status)
                         VALUES (?1, ?2, ?3, ?4, ?5, 'sending')",
                        params![action, session, class, crate::liveness::NUDGE_VERSION, now],
                    )? == 1;
                    if fresh {
                        nudges.push(Nudge {
                            action,
                            session: session.clone(),
                            source: v.source.clone(),
                            prompt,
                        });
                    }
                }
                let mut details = serde_json::Map::new();
                details.insert("session".into(), json!(session));
                details.insert("root".into(), json!(v.root()));
                details.insert("agent".into(), json!(v.agent));
                details.insert("model".into(), json!(v.model));
                details.insert("liveness".into(), json!(l));
                details.insert("opened".into(), json!(now));
                tx.execute(
                    "INSERT INTO alerts (dedup_key, kind, root, state, severity, opened, last_fired, resolved, flagged_ticks,
                        agent, model, title, top_target, source)
                     VALUES (?1, ?2, ?3, 'open', ?4, ?5, ?5, NULL, 1, ?6, ?7, ?8, ?9, ?10)
                     ON CONFLICT (dedup_key) DO UPDATE SET state = 'open', severity = ?4, opened = ?5, last_fired = ?5,
                        resolved = NULL, flagged_ticks = 1, agent = ?6, model = ?7, title = ?8, top_target = ?9, source = ?10",
                    params![key, kind, session, severity.as_str(), now, v.agent, v.model, title, evidence, v.source],
                )?;
                events.push(Event {
                    dedup_key: key,
                    severity,
                    state: "trigger".into(),
                    title,
                    summary: format!("session {session} (agent {agent}): {evidence}"),
                    details,
                    source: cfg.alert.source.clone(),
                    t: now,
                    alert: kind.into(),
                    root: session.clone(),
                    agent: v.agent.clone(),
                    model: v.model.clone(),
                    link: link(cfg, &session),
                });
            }
            Decision::Blind { reasons } => {
                let is_open: bool = tx
                    .query_row(
                        "SELECT state = 'open' FROM alerts WHERE dedup_key = ?1",
                        [BLIND_KEY],
                        |r| r.get(0),
                    )
                    .optional()?
                    .unwrap_or(false);
                let text: Vec<String> = reasons.iter().map(|(s, r)| format!("{s}: {r}")).collect();
                if is_open {
                    tx.execute(
                        "UPDATE alerts SET flagged_ticks = flagged_ticks + 1, top_target = ?2 WHERE dedup_key = ?1",
                        params![BLIND_KEY, text.join("; ")],
                    )?;
                    continue;
                }
                let title = "watchdog is blind: cannot read opencode".to_string();
                let mut details = serde_json::Map::new();
                details.insert(
                    "sources".into(),
                    json!(reasons.iter().map(|r| &r.0).collect::<Vec<_>>()),
                );
                details.insert("reasons".into(), json!(text));
                details.insert("opened".into(), json!(now));
                tx.execute(
                    "INSERT INTO alerts (dedup_key, kind, root, state, severity, opened, last_fired, resolved, flagged_ticks,
                        title, top_target, source)
                     VALUES (?1, 'blind', ?2, 'open', 'warning', ?3, ?3, NULL, 1, ?4, ?5, ?2)
                     ON CONFLICT (dedup_key) DO UPDATE SET state = 'open', severity = 'warning', opened = ?3,
                        last_fired = ?3, resolved = NULL, flagged_ticks = 1, title = ?4, top_target = ?5, source = ?2",
                    params![BLIND_KEY, reasons[0].0, now, title, text.join("; ")],
                )?;
                events.push(Event {
                    dedup_key: BLIND_KEY.into(),
                    severity: Severity::Warning,
                    state: "trigger".into(),
                    title,
                    summary: format!(
                        "the watchdog cannot see opencode sessions, so it cannot tell loops: {}",
                        text.join("; ")
                    ),
                    details,
                    source: cfg.alert.source.clone(),
                    t: now,
                    alert: "blind".into(),
                    root: reasons[0].0.clone(),
                    agent: None,
                    model: None,
                    link: None,
                });
            }
        }
    }
    for ev in &events {
        log(ev);
        enqueue(&tx, chans, ev, now)?;
    }
    tx.execute(
        "INSERT INTO alert_ticks (tick_key, t) VALUES (?1, ?2)",
        params![key, now],
    )?;
    tx.execute(
        "DELETE FROM alert_ticks WHERE t < ?1",
        params![now - 30 * 86_400_000],
    )?;
    tx.commit()?;
    for n in nudges {
        send_nudge(store, &n)?;
    }
    Ok(events)
}

/// A continuation prompt decided this tick, already recorded as `sending`.
struct Nudge {
    action: String,
    session: String,
    source: Option<String>,
    prompt: String,
}

/// Sends a recorded nudge into its session (opencode's `POST /session/{id}/prompt_async`) and
/// records the outcome. Never retried: at most once per action id.
fn send_nudge(store: &mut Store, n: &Nudge) -> Result<()> {
    let result = match n.source.as_deref() {
        Some(url) if url.starts_with("http") => crate::opencode::Client::new(url)
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

fn record_opinion(
    tx: &Transaction,
    tick: Option<i64>,
    v: &Verdict,
    op: Option<&Opinion>,
) -> Result<()> {
    if let (Some(tick), Some(op)) = (tick, op) {
        tx.execute(
            "UPDATE verdicts SET opinion = ?3 WHERE tick = ?1 AND session = ?2",
            params![tick, v.session, json!(op).to_string()],
        )?;
    }
    Ok(())
}

/// Local hour now (the operator's wall clock), via date(1), which honours TZ.
fn local_hour(now: i64) -> Option<u8> {
    let out = std::process::Command::new("date")
        .args(["-d", &format!("@{}", now / 1000), "+%H"])
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout).trim().parse().ok()
}

fn quiet(c: &ChannelConfig, now: i64) -> bool {
    match (c.quiet_hours, local_hour(now)) {
        (Some([a, b]), Some(h)) if a != b => {
            if a < b {
                (a..b).contains(&h)
            } else {
                h >= a || h < b
            }
        }
        _ => false,
    }
}

/// Adds one delivery row per channel for a new event: pending, deferred (quiet hours) or
/// skipped (disabled, below the channel's severity, rate limited), with the reason.
fn enqueue(tx: &Transaction, chans: &[Chan], ev: &Event, now: i64) -> Result<()> {
    tx.execute(
        "INSERT INTO events (dedup_key, t, state, severity, body) VALUES (?1, ?2, ?3, ?4, ?5)",
        params![
            ev.dedup_key,
            now,
            ev.state,
            ev.severity.as_str(),
            serde_json::to_string(ev)?
        ],
    )?;
    let id = tx.last_insert_rowid();
    for c in chans {
        let name = &c.cfg.name;
        let last_sent: Option<i64> = tx.query_row(
            "SELECT max(d.t) FROM deliveries d JOIN events e ON e.id = d.event
                 WHERE e.dedup_key = ?1 AND d.channel = ?2 AND d.status = 'sent' AND e.id < ?3",
            params![ev.dedup_key, name, id],
            |r| r.get(0),
        )?;
        let (status, detail) = if !c.enabled {
            ("skipped", "channel disabled".to_string())
        } else if ev.state == "resolve" {
            // a resolve goes wherever the alert went, whatever the limits
            if last_sent.is_some() || ev.severity >= c.min {
                ("pending", String::new())
            } else {
                ("skipped", "nothing was sent here for this alert".into())
            }
        } else if ev.severity < c.min {
            ("skipped", format!("below min_severity {}", c.min.as_str()))
        } else if c.cfg.kind == ChannelType::Alertmanager {
            // Alertmanager groups, dedups and silences by itself; every transition goes
            ("pending", String::new())
        } else if last_sent.is_some_and(|t| {
            now.saturating_sub(t)
                < i64::try_from(c.cfg.rate_limit_secs)
                    .unwrap_or(i64::MAX)
                    .saturating_mul(1000)
        }) {
            (
                "skipped",
                format!("rate limited ({}s)", c.cfg.rate_limit_secs),
            )
        } else if quiet(&c.cfg, now) {
            ("deferred", "quiet hours".into())
        } else {
            ("pending", String::new())
        };
        tx.execute(
            "INSERT INTO deliveries (event, channel, status, attempts, t, detail) VALUES (?1, ?2, ?3, 0, ?4, ?5)",
            params![id, name, status, now, detail],
        )?;
    }
    Ok(())
}

/// Delivers what is pending (and deferred deliveries whose quiet hours ended, and failed
/// resolves, up to 5 attempts). Each outcome is recorded as soon as it is known.
fn deliver_pending(store: &mut Store, chans: &[Chan], now: i64) -> Result<()> {
    let todo: Vec<(i64, String, String, String, i64, String)> = {
        let mut st = store.conn.prepare(
            "SELECT d.event, d.channel, d.status, e.body, d.attempts, e.dedup_key FROM deliveries d JOIN events e ON e.id = d.event
             WHERE d.status IN ('pending', 'deferred') OR (d.status = 'failed' AND e.state = 'resolve' AND d.attempts < 5)
             ORDER BY d.event",
        )?;
        let rows = st.query_map([], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
            ))
        })?;
        rows.collect::<rusqlite::Result<_>>()?
    };
    for (event, channel, status, body, attempts, key) in todo {
        let set = |store: &mut Store, st: &str, detail: &str| -> Result<()> {
            let tx = store.write()?;
            tx.execute(
                "UPDATE deliveries SET status = ?3, attempts = ?4, t = ?5, detail = ?6 WHERE event = ?1 AND channel = ?2",
                params![event, channel, st, attempts + (st == "sent" || st == "failed") as i64, now, detail],
            )?;
            tx.commit()?;
            Ok(())
        };
        let Some(c) = chans.iter().find(|c| c.cfg.name == channel) else {
            set(store, "skipped", "channel no longer configured")?;
            continue;
        };
        if status == "deferred" {
            let newer: bool = store.conn.query_row(
                "SELECT EXISTS (SELECT 1 FROM events WHERE dedup_key = ?1 AND id > ?2)",
                params![key, event],
                |r| r.get(0),
            )?;
            if newer {
                set(store, "skipped", "superseded while deferred")?;
                continue;
            }
            if quiet(&c.cfg, now) {
                continue;
            }
        }
        let ev: Event = serde_json::from_str(&body).context("stored event")?;
        match deliver(&c.cfg, &ev, now) {
            Ok(detail) => {
                // some peers of an HA pair may be down: logged and recorded, not raised
                if let Some((_, f)) = detail.split_once("; failed: ") {
                    eprintln!(
                        "oc-watchdog: channel={channel} dedup={} state={} partly failed: {f}",
                        ev.dedup_key, ev.state
                    );
                }
                set(store, "sent", &detail)?
            }
            Err(e) => {
                eprintln!(
                    "oc-watchdog: channel={channel} dedup={} state={} delivery failed: {e}",
                    ev.dedup_key, ev.state
                );
                set(store, "failed", &e)?;
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
        "SELECT e.body FROM alerts a JOIN events e ON e.id = (SELECT max(id) FROM events WHERE dedup_key = a.dedup_key)
         WHERE a.state = 'open'",
    )?;
    let open: Vec<Event> = st
        .query_map([], |r| r.get::<_, String>(0))?
        .filter_map(|b| b.ok().and_then(|b| serde_json::from_str::<Event>(&b).ok()))
        .map(|mut e| {
            e.state = "trigger".into();
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
            Ok(d) => {
                if let Some((_, f)) = d.split_once("; failed: ") {
                    eprintln!(
                        "oc-watchdog: channel={} re-post of open alerts partly failed: {f}",
                        c.cfg.name
                    );
                }
            }
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
            dedup_key: "oc-watchdog-test".into(),
            severity: sev,
            state: "trigger".into(),
            title: "oc-watchdog test alert".into(),
            summary: format!(
                "a test of the {} channel ({:?}); nothing is looping",
                c.cfg.name, c.cfg.kind
            ),
            details,
            source: cfg.alert.source.clone(),
            t: now,
            alert: "test".into(),
            root: "test".into(),
            agent: None,
            model: None,
            link: None,
        };
        out.line(&serde_json::to_string(&ev)?)?;
        match deliver(&c.cfg, &ev, now) {
            Ok(d) => eprintln!("wd-alert: channel {}: sent ({d})", c.cfg.name),
            Err(e) => {
                eprintln!("wd-alert: channel {}: failed: {e}", c.cfg.name);
                failed = true;
            }
        }
    }
    Ok(if failed { Exit::Check } else { Exit::Ok })
}
