//! opencode's sources as sources of the project's own records: a database or a server opened
//! as a [`Source`] and read through [`Records`], its messages converted here
//! ([`calls_and_activity`]) so that what reads them sees sessions, calls and activity, never
//! opencode's JSON.
//!
//! In: a source's name ([`super::records`] opens it with [`super::open`]) and the session ids to
//! read. Out: [`Transcript`]s, and [`Listing`]s picked from the source's index as `oc-sessions`
//! picks ([`super::merge::pick`]).
//!
//! A read from a mark (follow mode) asks the source for the messages changed since the mark, a
//! time on opencode's clock: the database reads the message and part rows whose `time_updated`
//! is at or after it ([`LOOKBACK_MS`] before), each message whole; a server gives them all. The
//! calls of one message depend on that message alone, so converting the changed messages gives
//! every call that may have changed. The session's activity is merged over its reads
//! ([`merge_activity`]: latest progress; in flight, error and running tools of the newest
//! assistant message), kept here until the reader is told to forget the session.

use super::merge::pick;
use super::{convert, Fault, Limits, Source};
use crate::record::{Activity, Call, Program, Session, Turn};
use crate::sources::transcript::{self, Transcript};
use crate::sources::{Listing, Records, SourceId};
use serde_json::Value;
use std::cell::RefCell;
use std::collections::{HashMap, HashSet};

/// How far before a read's mark its rows are read again (ms). Rows updated in the same
/// millisecond as the mark, or committed a little out of clock order by two opencode processes
/// sharing the database, are read again rather than missed; what they give again is the same
/// call, which the reader's caller does not write again.
pub const LOOKBACK_MS: i64 = 2000;

/// A database or a server read as a source of records. The files' line counts a call's
/// `file_lines` gives are counted once per open ([`convert::LineCache`]) in a whole read, afresh
/// in a read from a mark.
pub struct Reader {
    /// The name it was opened by (opened again by it).
    key: SourceId,
    /// What the records read from here name as their `source`.
    name: SourceId,
    limits: Limits,
    /// `None`: to be opened again (a fault, a server's next batch, a database replaced).
    source: RefCell<Option<Box<dyn Source>>>,
    lines: RefCell<convert::LineCache>,
    /// The activity of each session read from a mark, merged over its reads.
    merged: RefCell<HashMap<String, Merged>>,
}

/// A session's activity merged over its reads.
#[derive(Debug, Clone)]
struct Merged {
    record: Activity,
    /// The newest assistant message (created, id) its state was taken from.
    newest: Option<(i64, String)>,
    /// The calls of its turn counted as landed (each once, whichever read they came in).
    landed: HashSet<String>,
}

impl Reader {
    /// `source`, opened from `key` with `limits` (and opened again so when needed).
    pub fn new(key: SourceId, limits: Limits, source: Box<dyn Source>) -> Reader {
        Reader {
            key,
            name: source.id(),
            limits,
            source: RefCell::new(Some(source)),
            lines: RefCell::default(),
            merged: RefCell::default(),
        }
    }

    /// Opens the source again if it was let go (or, `check`ing, if what was opened is no longer
    /// what its name names).
    fn reopen(&self, check: bool) -> Result<(), String> {
        let mut slot = self.source.borrow_mut();
        if check && slot.as_ref().is_some_and(|s| !s.is_current()) {
            *slot = None;
        }
        if slot.is_none() {
            *slot = super::open(&self.key, self.limits)?;
        }
        Ok(())
    }

    /// The session's record as this source has it (`None`: gone).
    fn session(source: &dyn Source, name: &str, id: &str) -> Result<Option<Session>, String> {
        let v = match source.session(id) {
            Ok(Some(v)) => v,
            Ok(None) | Err(Fault::NotFound(_)) => return Ok(None),
            Err(f) => return Err(format!("session {id}: {f}")),
        };
        convert::session_of(&v, source.status_alone(), name)
            .map(Some)
            .map_err(|why| format!("session {id}: {why}"))
    }
}

impl Records for Reader {
    fn id(&self) -> SourceId {
        self.name.clone()
    }

    fn program(&self) -> Program {
        Program::Opencode
    }

    fn list(&self, since: i64, also: &[String]) -> Listing {
        let name = self.name.to_string();
        if let Err(why) = self.reopen(false) {
            return Listing {
                problems: vec![why],
                ..Listing::default()
            };
        }
        let slot = self.source.borrow();
        let Some(source) = slot.as_deref() else {
            return Listing::default();
        };
        let picked = source.index().and_then(|index| {
            let keep = pick(&index, since, also);
            source.sessions(&keep)
        });
        match picked {
            Ok(sessions) => Listing {
                sessions,
                ..Listing::default()
            },
            Err(f) => Listing {
                problems: vec![format!("{name}: {f}")],
                ..Listing::default()
            },
        }
    }

    /// The session with all its calls.
    fn read(&self, id: &str) -> Result<Option<Transcript>, String> {
        self.reopen(false)?;
        let slot = self.source.borrow();
        let Some(source) = slot.as_deref() else {
            return Ok(None);
        };
        let msgs = match source.messages(id) {
            Ok(m) => m,
            // deleted between listing and reading: nothing to judge, nothing wrong
            Err(Fault::NotFound(_)) => return Ok(None),
            Err(f) => return Err(format!("session {id}: {f}")),
        };
        let Some(session) = Reader::session(source, &self.name.to_string(), id)? else {
            return Ok(None);
        };
        let (calls, activity) = calls_and_activity(id, &msgs, &mut self.lines.borrow_mut())?;
        Ok(Some(Transcript {
            session,
            calls,
            activity,
            mark: 0,
        }))
    }

    /// The calls of the messages changed since `mark` (a time on opencode's clock, as the last
    /// read gave it; 0: all of them), and the session's activity merged with what earlier reads
    /// gave. A fault lets the source go: it is opened afresh for the next read.
    fn read_since(&self, id: &str, mark: u64) -> Result<Option<Transcript>, String> {
        self.reopen(true)?;
        let slot = self.source.borrow();
        let Some(source) = slot.as_deref() else {
            return Ok(None);
        };
        let cursor = i64::try_from(mark).ok().filter(|&m| m > 0);
        let since = cursor.map_or(i64::MIN, |c| c.saturating_sub(LOOKBACK_MS));
        let (msgs, newest) = match source.messages_since(id, since) {
            Ok(m) => m,
            // deleted between listing and reading: nothing to judge, nothing wrong
            Err(Fault::NotFound(_)) => return Ok(None),
            Err(f) => {
                drop(slot);
                *self.source.borrow_mut() = None;
                return Err(format!("session {id}: {f}"));
            }
        };
        let calls = convert::calls_of(id, &msgs, &mut convert::LineCache::default())
            .map_err(|why| format!("session {id}: {why}"))?;
        let Some(session) = Reader::session(source, &self.name.to_string(), id)? else {
            return Ok(None);
        };
        let mut merged = self.merged.borrow_mut();
        let m = merge_activity(merged.remove(id), id, &msgs, &calls);
        let activity = m.record.clone();
        merged.insert(id.to_string(), m);
        let mark = cursor
            .max(newest)
            .map_or(0, |c| u64::try_from(c).unwrap_or(0));
        Ok(Some(Transcript {
            session,
            calls,
            activity,
            mark,
        }))
    }

    /// A server's client has one overall deadline for all its requests (as a batch command
    /// has): a fresh one for each batch, or every read after the first seconds times out.
    fn refresh(&mut self) {
        if matches!(self.key, SourceId::Server(_)) {
            *self.source.get_mut() = None;
        }
    }

    fn forget(&mut self, session: &str) {
        self.merged.get_mut().remove(session);
    }
}

/// A session's calls and activity from its messages (`[{info, parts}]`, as [`Source::messages`]
/// and an export's documents hold them): the calls in call order, the activity's turn landed by
/// them. A shape not understood is `session {id}: {why}`.
pub fn calls_and_activity(
    id: &str,
    messages: &Value,
    lines: &mut convert::LineCache,
) -> Result<(Vec<Call>, Activity), String> {
    let calls =
        convert::calls_of(id, messages, lines).map_err(|why| format!("session {id}: {why}"))?;
    let mut activity = convert::activity_of(id, messages);
    if let Some(t) = &mut activity.turn {
        transcript::land_turn(t, &calls);
    }
    Ok((calls, activity))
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
/// newest assistant message says, with the landed calls of every read since it began, each
/// once. The same as [`convert::activity_of`] and [`transcript::land_turn`] over all messages,
/// as long as changed messages come whole.
fn merge_activity(had: Option<Merged>, session: &str, msgs: &Value, calls: &[Call]) -> Merged {
    let new = convert::activity_of(session, msgs);
    let newest = newest_assistant(msgs);
    let mut m = match had {
        None => Merged {
            record: Activity {
                turn: None,
                ..new.clone()
            },
            newest: newest.clone(),
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
    let start = |t: &Option<Turn>| t.as_ref().map(|t| t.start);
    if start(&new.turn) > start(&m.record.turn) {
        // a new prompt: a new turn, nothing of it landed yet
        m.record.turn = new.turn;
        m.landed.clear();
    } else if let (Some(t), true) = (&mut m.record.turn, newest.is_some() && newest == m.newest) {
        t.end = convert::turn_end(msgs, t.start);
    }
    if let Some(t) = &mut m.record.turn {
        let fresh: Vec<Call> = calls
            .iter()
            .filter(|c| c.landed && c.t >= t.start && m.landed.insert(c.id.clone()))
            .cloned()
            .collect();
        transcript::land_turn(t, &fresh);
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
        let first = merge_activity(None, "ses_a", &json!([m1, m2]), &[]);
        assert!(!first.record.in_flight);
        let merged = merge_activity(Some(first), "ses_a", &json!([m3]), &[]);
        assert_eq!(merged.record, whole);
        assert_eq!(merged.record.running.len(), 1);
        assert_eq!(
            (merged.record.last_progress, merged.newest.clone()),
            (Some(150), Some((140, "msg_3".into())))
        );
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
        let landed = Call {
            session: "ses_a".into(),
            id: "prt_1".into(),
            t: 120,
            tool: "write".into(),
            status: "completed".into(),
            landed: true,
            ..Call::default()
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
