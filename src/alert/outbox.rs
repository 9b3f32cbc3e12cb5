//! Delivery after the transaction: what the outbox owes (pending deliveries, deferred ones
//! whose quiet hours ended, failed resolves), the re-post of open alerts to receivers that
//! want it, and the nudges recorded this tick. Each outcome is recorded as soon as it is known.

use super::stage::Nudge;
use super::{Delivery, Event, Transition};
use crate::channels::route::{local_hour, quiet};
use crate::channels::{deliver, Deadline, EffectiveChannel, Sent, ATTEMPTS};
use crate::store::Store;
use anyhow::{Context, Result};
use rusqlite::{params, OptionalExtension};
use serde_json::json;
use std::collections::HashMap;
use std::time::Duration;

/// The log line of a recorded event.
pub fn log(ev: &Event) {
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

/// Sends a recorded nudge into its session (opencode's `POST /session/{id}/prompt_async`) and
/// records the outcome. Never retried: at most once per action id.
pub fn send_nudge(store: &mut Store, n: &Nudge) -> Result<()> {
    // a server's `prompt_async`; a database or an export is refused, saying which it was
    let result = crate::sources::nudge(n.source.as_deref(), &n.session, &n.prompt);
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
    /// The episode of its event.
    episode: Option<i64>,
    /// The key its episode was announced under, when not its dedup key (schema 13).
    announced: Option<String>,
    /// When an alerter claimed it to send it (`detail = 'sending'`).
    claimed: Option<i64>,
    /// When it was last tried and failed (owed again).
    tried: Option<i64>,
}

/// How long after its `attempts`-th failed attempt a delivery is tried again: 10 s, then three
/// times longer each time (30 s, 90 s, 270 s). A timer's runs, 5 minutes apart, each try it; the
/// follow mode's, a second apart, would otherwise spend all [`ATTEMPTS`] in five seconds of an
/// outage.
fn retry_after_ms(attempts: i64) -> i64 {
    10_000 * 3_i64.pow(attempts.clamp(1, 5) as u32 - 1)
}

/// How long a claim on `c` holds: twice the channel's timeout and a minute. An older claim is
/// of an alerter that died while sending, and the delivery is owed again (at worst one
/// notification repeats, as after any crash mid-send).
fn claim_holds_ms(c: &EffectiveChannel) -> i64 {
    (2 * c.cfg.timeout_secs.max(1) as i64 + 60) * 1000
}

impl Owed {
    /// Claims this delivery for this run, in the statement that checks it is still owed as it
    /// was read and claimed by no one (`detail = 'sending'`, `t` the claim's time); `false` when
    /// another alerter claimed or recorded it first. Only the claimant sends it.
    fn claim(&self, store: &mut Store, c: &EffectiveChannel, now: i64) -> Result<bool> {
        let tx = store.write()?;
        let got = tx
            .query_row(
                "UPDATE deliveries SET detail = 'sending', t = ?2
                 WHERE event = ?3 AND channel = ?4 AND status = ?5 AND attempts = ?6
                     AND NOT (coalesce(detail, '') = 'sending' AND t > ?1)
                 RETURNING 1",
                params![
                    now - claim_holds_ms(c),
                    now,
                    self.event,
                    self.channel,
                    self.status.as_str(),
                    self.attempts
                ],
                |_| Ok(()),
            )
            .optional()?
            .is_some();
        tx.commit()?;
        Ok(got)
    }

    /// Records a failed attempt that leaves this delivery `st` (owed again).
    fn set_tried(&self, store: &mut Store, st: Delivery, detail: &str, now: i64) -> Result<()> {
        let tx = store.write()?;
        tx.execute(
            "UPDATE deliveries SET status = ?3, attempts = ?4, t = ?5, detail = ?6
             WHERE event = ?1 AND channel = ?2",
            params![
                self.event,
                self.channel,
                st.as_str(),
                self.attempts + 1,
                now,
                detail
            ],
        )?;
        tx.commit()?;
        Ok(())
    }

    /// Records what became of this delivery.
    fn set(
        &self,
        store: &mut Store,
        st: Delivery,
        detail: &str,
        peers: Option<String>,
        now: i64,
    ) -> Result<()> {
        let tx = store.write()?;
        let tried = matches!(st, Delivery::Sent | Delivery::Failed) as i64;
        tx.execute(
            "UPDATE deliveries SET status = ?3, attempts = ?4, t = ?5, detail = ?6, peer_failures = ?7
             WHERE event = ?1 AND channel = ?2",
            params![self.event, self.channel, st.as_str(), self.attempts + tried, now, detail, peers],
        )?;
        tx.commit()?;
        Ok(())
    }
}

/// What the outbox owes, oldest event first, with the claims on it.
fn owed(store: &Store) -> Result<Vec<Owed>> {
    let mut st = store.conn.prepare(
        "SELECT d.event, d.channel, d.status, e.body, d.attempts, e.dedup_key, e.state,
             CASE WHEN d.detail = 'sending' THEN d.t END,
             CASE WHEN d.attempts > 0 AND coalesce(d.detail, '') != 'sending' THEN d.t END,
             e.episode, (SELECT a.key FROM announced_keys a WHERE a.episode = e.episode)
         FROM deliveries d JOIN events e ON e.id = d.event
         WHERE d.status IN ('pending', 'deferred') OR (d.status = 'failed' AND e.state = 'resolve' AND d.attempts < ?1)
         ORDER BY d.event",
    )?;
    let rows = st.query_map([ATTEMPTS], |r| {
        Ok(Owed {
            event: r.get(0)?,
            channel: r.get(1)?,
            status: Delivery::parse(&r.get::<_, String>(2)?).unwrap_or(Delivery::Pending),
            body: r.get(3)?,
            attempts: r.get(4)?,
            key: r.get(5)?,
            state: r.get(6)?,
            claimed: r.get(7)?,
            tried: r.get(8)?,
            episode: r.get(9)?,
            announced: r.get(10)?,
        })
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// Delivers what is pending (and deferred deliveries whose quiet hours ended, and failed
/// resolves, up to [`ATTEMPTS`] attempts, each after the back-off of [`retry_after_ms`]; a delivery the channel certainly did not show, such
/// as a desktop Notify call that failed, stays pending for as many), each claimed before it is sent, so two alerters running at
/// once send it once. Each outcome is recorded as soon as it is known. A pending or
/// deferred trigger or escalation that a newer event of its alert superseded is not sent. A
/// channel with a run budget (desktop) gets its `timeout_secs` per run in all; what it could
/// not try stays pending, said once per channel and run ("owed to the next run"), not as a
/// failure: a delivery is not started with less than [`LEAST_TO_TRY`] of the budget left.
pub fn deliver_pending(store: &mut Store, chans: &[EffectiveChannel], now: i64) -> Result<()> {
    deliver_pending_but(store, chans, now, &[])
}

/// [`deliver_pending`], holding back the events of the episodes `held` (those about to be
/// stopped: their stop may supersede them).
pub fn deliver_pending_but(
    store: &mut Store,
    chans: &[EffectiveChannel],
    now: i64,
    held: &[i64],
) -> Result<()> {
    let hour = local_hour(now);
    let mut run = RunBudgets::default();
    let owed = owed(store)?;
    for o in owed
        .into_iter()
        .filter(|o| o.episode.map_or(true, |e| !held.contains(&e)))
    {
        let Some(c) = chans.iter().find(|c| c.cfg.name == o.channel) else {
            o.set(
                store,
                Delivery::Skipped,
                "channel no longer configured",
                None,
                now,
            )?;
            continue;
        };
        if o.claimed.is_some_and(|t| t > now - claim_holds_ms(c)) {
            // another alerter is sending it
            continue;
        }
        if superseded(store, &o)? {
            o.set(
                store,
                Delivery::Skipped,
                "superseded before it was sent",
                None,
                now,
            )?;
            continue;
        }
        if o.status == Delivery::Deferred && quiet(&c.cfg, hour) {
            continue;
        }
        // failed a moment ago: tried again after its back-off. A last try later than now is
        // a wall clock stepped back since: its back-off is not waited out again on the new
        // clock (an hour's step would hold it an hour)
        if o.tried
            .is_some_and(|t| t <= now && now - t < retry_after_ms(o.attempts))
        {
            continue;
        }
        let Some(left) = run.time_to_try(c) else {
            continue;
        };
        let ev = announced(
            serde_json::from_str(&o.body).context("stored event")?,
            o.announced.clone(),
        );
        if !o.claim(store, c, now)? {
            // another alerter is sending it, or sent it
            continue;
        }
        let earlier = earlier_answer(store, &ev, &o.channel, o.event)?;
        let sent = deliver(&c.cfg, &ev, now, left, earlier.as_deref());
        record(store, &o, c, &ev, sent, now)?;
    }
    run.say_owed(chans);
    Ok(())
}

/// Is this a pending or deferred trigger or escalation that a newer event of its alert
/// superseded? Then it is not sent: the newer one says what holds now. Resolves and failed
/// deliveries are owed whatever came after.
fn superseded(store: &Store, o: &Owed) -> Result<bool> {
    if o.status == Delivery::Failed || o.state == "resolve" {
        return Ok(false);
    }
    Ok(store.conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM events WHERE dedup_key = ?1 AND id > ?2)",
        params![o.key, o.event],
        |r| r.get(0),
    )?)
}

/// This run's time for the channels with a run budget (desktop), and what each could not try.
#[derive(Default)]
struct RunBudgets {
    budgets: HashMap<String, Deadline>,
    /// per channel with a run budget: what it could not try this run
    left_owed: HashMap<String, usize>,
    /// whether each channel's receiver answered this run's first question
    asked: HashMap<String, bool>,
}

impl RunBudgets {
    /// How long a delivery on `c` may take (zero: the channel's own timeout), or `None` when
    /// it is not tried this run: the budget is spent, or the receiver does not answer. What is
    /// not tried for want of budget is counted, to be said once by [`RunBudgets::say_owed`].
    fn time_to_try(&mut self, c: &EffectiveChannel) -> Option<Duration> {
        if !c.cfg.unit().run_budget() {
            return Some(Duration::ZERO);
        }
        let d = self
            .budgets
            .entry(c.cfg.name.clone())
            .or_insert_with(|| Deadline::after(Duration::from_secs(c.cfg.timeout_secs.max(1))));
        let left = d.left();
        if left < LEAST_TO_TRY {
            // not tried this run: stays owed for the next one
            *self.left_owed.entry(c.cfg.name.clone()).or_default() += 1;
            return None;
        }
        if !answers(&mut self.asked, c, left) {
            return None;
        }
        // the question may have spent the rest (a stop of this process inside it does)
        let left = d.left();
        if left < LEAST_TO_TRY {
            *self.left_owed.entry(c.cfg.name.clone()).or_default() += 1;
            return None;
        }
        Some(left)
    }

    /// Says once per channel what it still owes for want of this run's budget: owed to the
    /// next run, not failed.
    fn say_owed(self, chans: &[EffectiveChannel]) {
        for (name, n) in self.left_owed {
            let budget = chans
                .iter()
                .find(|c| c.cfg.name == name)
                .map_or(0, |c| c.cfg.timeout_secs.max(1));
            eprintln!(
                "oc-watchdog: channel={name} {n} deliveries owed to the next run: this run's {budget} s for the channel are spent"
            );
        }
    }
}

/// The least of a channel's run budget worth starting a delivery with: one that starts with
/// less cannot have the receiver answer in time under the load that spent the budget (seen in
/// a burst of 107 triggers: "no answer within 0.0s", recorded as a failure of a notification
/// that may well have shown).
const LEAST_TO_TRY: Duration = Duration::from_millis(500);

/// Does `c`'s receiver answer at all? Asked once per run (`asked` keeps the answer); when it
/// does not, that is logged once and what the channel owes stays pending, untried.
fn answers(asked: &mut HashMap<String, bool>, c: &EffectiveChannel, left: Duration) -> bool {
    *asked
        .entry(c.cfg.name.clone())
        .or_insert_with(|| match c.cfg.unit().unanswered(left) {
            Some(why) => {
                eprintln!(
                    "oc-watchdog: channel={} not tried this run, what it owes stays pending: {why}",
                    c.cfg.name
                );
                false
            }
            None => true,
        })
}

/// What `channel` answered for the latest earlier event of `ev`'s episode it delivered
/// (the desktop's "notification 7"), for a receiver that updates what it showed.
fn earlier_answer(store: &Store, ev: &Event, channel: &str, event: i64) -> Result<Option<String>> {
    let Some(episode) = ev.episode else {
        return Ok(None);
    };
    Ok(store
        .conn
        .query_row(
            "SELECT d.detail FROM deliveries d JOIN events e ON e.id = d.event
             WHERE e.episode = ?1 AND d.channel = ?2 AND d.status = 'sent' AND e.id < ?3
             ORDER BY e.id DESC LIMIT 1",
            params![episode, channel, event],
            |r| r.get(0),
        )
        .optional()?)
}

/// Logs and records the outcome of one delivery.
fn record(
    store: &mut Store,
    o: &Owed,
    c: &EffectiveChannel,
    ev: &Event,
    sent: Result<Sent, String>,
    now: i64,
) -> Result<()> {
    match sent {
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
            o.set(store, Delivery::Sent, &detail, peers, now)
        }
        Err(e) => {
            // nothing was shown: owed again next run (a trigger too, not only a resolve)
            let again = c.cfg.unit().unsent(&e) && o.attempts + 1 < ATTEMPTS;
            eprintln!(
                "oc-watchdog: channel={} dedup={} state={} delivery failed{}: {e}",
                o.channel,
                ev.dedup_key,
                ev.state.as_str(),
                if again { " (tried again next run)" } else { "" }
            );
            if again {
                o.set_tried(store, Delivery::Pending, &e, now)
            } else {
                o.set(store, Delivery::Failed, &e, None, now)
            }
        }
    }
}

/// A receiver that resolves what is not re-sent (Alertmanager) gets every open alert again on
/// every tick, on each enabled channel of its type. Not a new notification (it dedups by labels).
pub fn repost_open(store: &Store, chans: &[EffectiveChannel], now: i64) -> Result<()> {
    let mut open: Option<Vec<Event>> = None;
    for c in chans.iter().filter(|c| c.enabled && c.cfg.unit().reposts()) {
        let open = match &open {
            Some(o) => o,
            None => open.insert(open_events(store)?),
        };
        let mine: Vec<Event> = open
            .iter()
            .filter(|e| e.severity >= c.min)
            .map(crate::channels::readable)
            .collect();
        if mine.is_empty() {
            continue;
        }
        match c.cfg.unit().repost(&c.cfg, &mine, now) {
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

/// The latest event of every open episode, as a trigger.
fn open_events(store: &Store) -> Result<Vec<Event>> {
    let mut st = store.conn.prepare(
        "SELECT e.body, a.key FROM episodes p
           JOIN events e ON e.id = (SELECT max(id) FROM events WHERE episode = p.id)
           LEFT JOIN announced_keys a ON a.episode = p.id
         WHERE p.state = 'open'",
    )?;
    let open = st
        .query_map([], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, Option<String>>(1)?))
        })?
        .filter_map(|row| {
            let (body, key) = row.ok()?;
            Some(announced(serde_json::from_str::<Event>(&body).ok()?, key))
        })
        .map(|mut e| {
            e.state = Transition::Trigger;
            e
        })
        .collect();
    Ok(open)
}

/// The event as the outside systems know its episode: an episode announced before schema 13
/// keeps the `opencode-<kind>:` key it was announced under until it ends, so PagerDuty
/// resolves the incident it opened and Alertmanager ends the alert it fires, instead of a
/// second one opening beside it.
fn announced(mut ev: Event, key: Option<String>) -> Event {
    if let Some(k) = key {
        ev.dedup_key = k;
    }
    ev
}
