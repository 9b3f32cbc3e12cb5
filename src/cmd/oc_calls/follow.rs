//! `oc-calls --follow`: the calls of a stream that never ends (`oc-sessions --follow`), read
//! incrementally and written only when they changed.
//!
//! Each `session` record is passed on and its source asked for the messages changed since that
//! session's cursor ([`Source::messages_since`]: the database reads the message and part rows
//! whose `time_updated` is at or after it, each message whole; a server gives them all). The
//! calls of one message depend on that message alone, so converting the changed messages gives
//! every call that may have changed; each is written when its line differs from the last one
//! written for that (session, id) (a hash is kept, not the line), and a later line of the same
//! call replaces the earlier one downstream. The session's `activity` is merged (latest
//! progress; in flight, error and running tools of the newest assistant message) and written
//! when it changed. A `sweep` record is passed on and stdout flushed: the batch is complete.
//!
//! Another agent's session (Claude Code's, Codex's) is read from its directory, kept open across
//! batches ([`sources::Records::refresh`]): a read parses only the lines appended to its files
//! since the last one, and gives the calls that changed since the mark of the session's last
//! read (and those still open), each written when its line differs as above.
//!
//! Memory stays flat: a session not listed for [`FORGET_AFTER_FULL`] full sweeps (an hour at
//! the default `full_every_secs`) is forgotten; if it comes back, it is read whole again and
//! its calls written again (downstream replaces them by id).

use super::source_to_read;
use crate::cli::{Exit, Out};
use crate::cmd::oc_sessions::blind;
use crate::record::{each_record, to_line, Activity, Line, Record, Session, Sweep};
use crate::sources::opencode::{self, convert, Fault, Source};
use crate::sources::{self, SourceId};
use anyhow::Result;
use serde_json::Value;
use std::collections::hash_map::DefaultHasher;
use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::io::BufRead;

/// Full sweeps a session may go unlisted before its state is dropped. A full sweep lists every
/// session active since the previous one and the trees of open alerts, so a session unlisted
/// this long has been quiet (and unalerted) for as long: an hour at `full_every_secs = 60`.
pub const FORGET_AFTER_FULL: u64 = 60;

/// How far before a session's cursor its rows are read again (ms). Rows updated in the same
/// millisecond as the cursor, or committed a little out of clock order by two opencode
/// processes sharing the database, are read again rather than missed; what they give again is
/// not written again (the hashes say it is the same).
pub const LOOKBACK_MS: i64 = 2000;

/// A sweep this much older than the previous one says the clock went back (ms): every
/// cursor, taken on the old clock, is dropped and the sessions read whole at their next listing
/// (only what changed is written).
const CLOCK_BACK_MS: i64 = 5000;

/// What oc-calls remembers of one session between batches.
#[derive(Default)]
struct Known {
    /// The newest `time_updated` read (None: read whole next time).
    cursor: Option<i64>,
    /// The session record's `updated` when last listed.
    updated: Option<i64>,
    /// Hash of the line last written per call id.
    calls: HashMap<String, u64>,
    /// For another agent's session: the mark of its last read (its calls that changed after
    /// it are read next time; 0: all of them).
    mark: u64,
    activity: Option<Merged>,
    /// The count of full sweeps when it was last listed.
    listed_at: u64,
}

/// A session's activity merged over its reads.
#[derive(Debug, Clone)]
struct Merged {
    record: Activity,
    /// The newest assistant message (created, id) its state was taken from.
    newest: Option<(i64, String)>,
    /// Hash of the line last written (0: none).
    hash: u64,
    /// The calls of its turn counted as landed (each once, whichever batch it came in).
    landed: HashSet<String>,
}

/// `oc-calls --follow`'s state: where it writes, the sources it opened, and what it knows of
/// each session listed.
struct CallsFollow<'a> {
    out: &'a mut Out,
    opened: HashMap<SourceId, Box<dyn Source>>,
    /// Other agents' directories, kept open (what they read of their files with them) and
    /// refreshed at each batch.
    records: HashMap<SourceId, Box<dyn sources::Records>>,
    limits: opencode::Limits,
    known: HashMap<String, Known>,
    /// Sessions listed in the current batch (a session listed twice is read once).
    batch: HashSet<String>,
    full_sweeps: u64,
    last_sweep: Option<i64>,
}

/// Reads the stream until its end; each sweep passes on and flushes.
pub fn run(limits: opencode::Limits, stdin: &mut dyn BufRead, out: &mut Out) -> Result<Exit> {
    let mut f = CallsFollow {
        out,
        opened: HashMap::new(),
        records: HashMap::new(),
        limits,
        known: HashMap::new(),
        batch: HashSet::new(),
        full_sweeps: 0,
        last_sweep: None,
    };
    let mut bad = false;
    let skipped = each_record(&[], stdin, |line| f.line(line, &mut bad))?;
    f.out.flush()?;
    Ok(if bad || skipped > 0 {
        Exit::Error
    } else {
        Exit::Ok
    })
}

fn hash_of(s: &str) -> u64 {
    let mut h = DefaultHasher::new();
    s.hash(&mut h);
    h.finish()
}

impl CallsFollow<'_> {
    fn line(&mut self, line: Line, bad: &mut bool) -> Result<()> {
        let at = line.at();
        match line.record {
            Ok(Record::Session(s)) => {
                if !s.has_opencode_ids("oc-calls") || !self.batch.insert(s.id.clone()) {
                    return Ok(());
                }
                self.out.line(line.raw)?;
                self.session(&s, &at, bad)
            }
            Ok(Record::Sweep(sw)) => {
                self.out.line(line.raw)?;
                self.sweep(sw);
                self.out.flush()?;
                Ok(())
            }
            Err(e) if e.kind.as_deref() == Some("session") || e.kind.is_none() => {
                eprintln!("oc-calls: {at}: {e}");
                *bad = true;
                self.out.line(line.raw)?;
                Ok(())
            }
            _ => {
                self.out.line(line.raw)?;
                Ok(())
            }
        }
    }

    /// The end of a batch: forget what has not been listed for long; on a clock gone back,
    /// read every session whole next time.
    fn sweep(&mut self, sw: Sweep) {
        self.batch.clear();
        // a server's client has one overall deadline for all its requests (as a batch command
        // has): a fresh one for each batch, or every read after the first seconds times out
        self.opened
            .retain(|id, _| !matches!(id, SourceId::Server(_)));
        for r in self.records.values_mut() {
            r.refresh();
        }
        if sw.full {
            self.full_sweeps += 1;
            let now = self.full_sweeps;
            self.known
                .retain(|_, k| now.saturating_sub(k.listed_at) <= FORGET_AFTER_FULL);
        }
        if self.last_sweep.is_some_and(|t| sw.t < t - CLOCK_BACK_MS) {
            for k in self.known.values_mut() {
                k.cursor = None;
            }
        }
        self.last_sweep = Some(sw.t);
    }

    /// Reads what changed in one listed session and writes the calls and activity that did.
    fn session(&mut self, s: &Session, at: &str, bad: &mut bool) -> Result<()> {
        let Some(src) = source_to_read(s) else {
            eprintln!("oc-calls: {at}: session {} has no \"source\"", s.id);
            *bad = true;
            return Ok(());
        };
        if !self.records.contains_key(&src) {
            if let Some(r) = src.records() {
                self.records.insert(src.clone(), r);
            }
        }
        if self.records.contains_key(&src) {
            return self.transcript(s, &src);
        }
        // a database deleted or replaced since it was opened: this connection reads the old file
        if self.opened.get(&src).is_some_and(|o| !o.is_current()) {
            self.opened.remove(&src);
        }
        if !self.opened.contains_key(&src) {
            match opencode::open(&src, self.limits) {
                Ok(Some(o)) => {
                    self.opened.insert(src.clone(), o);
                }
                // read from an export upstream: its calls are in the stream already
                Ok(None) => return Ok(()),
                Err(why) => return blind(self.out, &src.to_string(), &why),
            }
        }
        let full_sweeps = self.full_sweeps;
        let k = self.known.entry(s.id.clone()).or_default();
        k.listed_at = full_sweeps;
        // its row updated earlier than last time: the clock went back, or another database
        if s.updated.is_some() && s.updated < k.updated {
            k.cursor = None;
        }
        k.updated = s.updated;
        let since = k.cursor.map_or(i64::MIN, |c| c.saturating_sub(LOOKBACK_MS));
        let source = &self.opened[&src];
        let (msgs, newest) = match source.messages_since(&s.id, since) {
            Ok(m) => m,
            // deleted between listing and reading: nothing to judge, nothing wrong
            Err(Fault::NotFound(_)) => return Ok(()),
            Err(f) => {
                // read it again from a fresh connection next time
                self.opened.remove(&src);
                return blind(
                    self.out,
                    &src.to_string(),
                    &format!("session {}: {f}", s.id),
                );
            }
        };
        let calls = match convert::calls_of(&s.id, &msgs, &mut convert::LineCache::default()) {
            Ok(c) => c,
            Err(why) => {
                return blind(
                    self.out,
                    &src.to_string(),
                    &format!("session {}: {why}", s.id),
                )
            }
        };
        for c in &calls {
            let line = to_line("call", c)?;
            let h = hash_of(&line);
            if k.calls.get(&c.id) != Some(&h) {
                self.out.line(&line)?;
                k.calls.insert(c.id.clone(), h);
            }
        }
        let mut merged = merge_activity(k.activity.take(), &s.id, &msgs, &calls);
        let line = to_line("activity", &merged.record)?;
        let h = hash_of(&line);
        if merged.hash != h {
            self.out.line(&line)?;
            merged.hash = h;
        }
        k.activity = Some(merged);
        k.cursor = k.cursor.max(newest);
        Ok(())
    }
}

impl CallsFollow<'_> {
    /// Another agent's session: what was appended to its files read by its wing, and the calls
    /// that changed since the last read (and the activity) written when their lines did.
    fn transcript(&mut self, s: &Session, src: &SourceId) -> Result<()> {
        let full_sweeps = self.full_sweeps;
        let mark = self.known.get(&s.id).map_or(0, |k| k.mark);
        let t = match self.records[src].read_since(&s.id, mark) {
            Ok(Some(t)) => t,
            // gone since listed: nothing to judge, nothing wrong
            Ok(None) => return Ok(()),
            Err(why) => return blind(self.out, &src.to_string(), &why),
        };
        let k = self.known.entry(s.id.clone()).or_default();
        k.listed_at = full_sweeps;
        k.mark = t.mark;
        for c in &t.calls {
            let line = to_line("call", c)?;
            let h = hash_of(&line);
            if k.calls.get(&c.id) != Some(&h) {
                self.out.line(&line)?;
                k.calls.insert(c.id.clone(), h);
            }
        }
        let line = to_line("activity", &t.activity)?;
        let h = hash_of(&line);
        let had = k.activity.as_ref().map(|m| m.hash);
        if had != Some(h) {
            self.out.line(&line)?;
            k.activity = Some(Merged {
                record: t.activity.clone(),
                newest: None,
                hash: h,
                landed: HashSet::new(),
            });
        }
        Ok(())
    }
}

/// The newest assistant message among `msgs` (by creation time, then id: the order messages
/// come in).
fn newest_assistant(msgs: &Value) -> Option<(i64, String)> {
    msgs.as_array()?
        .iter()
        .map(|m| &m["info"])
        .filter(|i| i["role"] == "assistant")
        .map(|i| {
            (
                i["time"]["created"].as_i64().unwrap_or(0),
                i["id"].as_str().unwrap_or("").to_string(),
            )
        })
        .max()
}

/// The activity of a session from what it was and the messages that changed (with their
/// calls): the latest progress of both; in flight, error and running tools from the newest
/// assistant message of either; the turn begun by the latest prompt of either, finished as the
/// newest assistant message says, with the landed calls of every batch since it began, each
/// once. The same as [`convert::activity_of`] and [`crate::sources::transcript::land_turn`] over all messages, as
/// long as changed messages come whole. Keeps the hash of the line last written.
fn merge_activity(
    had: Option<Merged>,
    session: &str,
    msgs: &Value,
    calls: &[crate::record::Call],
) -> Merged {
    let new = convert::activity_of(session, msgs);
    let newest = newest_assistant(msgs);
    let mut m = match had {
        None => Merged {
            record: Activity {
                turn: None,
                ..new.clone()
            },
            newest: newest.clone(),
            hash: 0,
            landed: HashSet::new(),
        },
        Some(mut m) => {
            m.record.last_progress = m.record.last_progress.max(new.last_progress);
            if newest.is_some() && newest >= m.newest {
                m.record.in_flight = new.in_flight;
                m.record.error = new.error;
                m.record.running = new.running;
                m.newest = newest.clone();
            }
            m
        }
    };
    let start = |t: &Option<crate::record::Turn>| t.as_ref().map(|t| t.start);
    if start(&new.turn) > start(&m.record.turn) {
        // a new prompt: a new turn, nothing of it landed yet
        m.record.turn = new.turn;
        m.landed.clear();
    } else if let (Some(t), true) = (&mut m.record.turn, newest.is_some() && newest == m.newest) {
        t.end = convert::turn_end(msgs, t.start);
    }
    if let Some(t) = &mut m.record.turn {
        let fresh: Vec<crate::record::Call> = calls
            .iter()
            .filter(|c| c.landed && c.t >= t.start && m.landed.insert(c.id.clone()))
            .cloned()
            .collect();
        crate::sources::transcript::land_turn(t, &fresh);
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn msg(id: &str, role: &str, created: i64, completed: Option<i64>, parts: Value) -> Value {
        json!({"info": {"id": id, "role": role, "time": {"created": created, "completed": completed}},
               "parts": parts})
    }

    fn tool(id: &str, status: &str, start: i64) -> Value {
        json!({"id": id, "type": "tool", "tool": "read",
               "state": {"status": status, "input": {"filePath": "/p/a"}, "time": {"start": start}}})
    }

    /// Activity merged over changed messages equals the activity of all of them at once.
    #[test]
    fn activity_merged_from_changes_is_the_activity_of_the_whole_session() {
        let m1 = msg("msg_1", "user", 100, None, json!([]));
        let m2 = msg(
            "msg_2",
            "assistant",
            110,
            Some(130),
            json!([tool("prt_1", "completed", 120)]),
        );
        let m3 = msg(
            "msg_3",
            "assistant",
            140,
            None,
            json!([tool("prt_2", "running", 150)]),
        );
        let whole = convert::activity_of("ses_a", &json!([m1, m2, m3]));
        let mut first = merge_activity(None, "ses_a", &json!([m1, m2]), &[]);
        assert!(!first.record.in_flight);
        first.hash = 7;
        let merged = merge_activity(Some(first), "ses_a", &json!([m3]), &[]);
        assert_eq!(merged.record, whole);
        assert_eq!(merged.record.running.len(), 1);
        assert_eq!(
            (merged.record.last_progress, merged.newest.clone()),
            (Some(150), Some((140, "msg_3".into())))
        );
        assert_eq!(merged.hash, 7);
        // an older message changing again does not take the newest one's state
        let again = merge_activity(Some(merged), "ses_a", &json!([m2]), &[]);
        assert_eq!(again.record, whole);
    }

    /// Issue 41, done: the turn merged over batches counts each landed call once, whichever
    /// batches it came in, finishes as its newest assistant message says, and a new prompt
    /// begins another.
    #[test]
    fn a_turn_merged_over_batches_counts_each_landed_call_once() {
        let mut m2 = msg("msg_2", "assistant", 110, Some(130), json!([]));
        m2["info"]["finish"] = json!("stop");
        let m1 = msg("msg_1", "user", 100, None, json!([]));
        let landed = crate::record::Call {
            session: "ses_a".into(),
            id: "prt_1".into(),
            t: 120,
            tool: "write".into(),
            status: "completed".into(),
            landed: true,
            ..crate::record::Call::default()
        };
        let first = merge_activity(
            None,
            "ses_a",
            &json!([m1, m2]),
            std::slice::from_ref(&landed),
        );
        let again = merge_activity(
            Some(first),
            "ses_a",
            &json!([m2]),
            std::slice::from_ref(&landed),
        );
        let t = again.record.turn.clone().unwrap();
        assert_eq!((t.start, t.end, t.landed), (100, Some(130), 1));
        let m4 = msg("msg_4", "user", 200, None, json!([]));
        let next = merge_activity(Some(again), "ses_a", &json!([m4]), &[]);
        let t = next.record.turn.unwrap();
        assert_eq!((t.start, t.end, t.landed), (200, None, 0));
    }
}
