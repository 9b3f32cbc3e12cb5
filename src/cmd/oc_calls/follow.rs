//! `oc-calls --follow`: the calls of a stream that never ends (`oc-sessions --follow`), read
//! incrementally and written only when they changed.
//!
//! Each `session` record is passed on and read from its source, kept open across batches as a
//! [`sources::Records`] (another agent's directory as its kind opens it, opencode's database or
//! server as its wing does, [`opencode::records`]), from the mark of the session's last read:
//! the source gives the calls that may have changed since (opencode's: those of the messages
//! changed since the mark; another agent's: those of the lines appended to its files, and those
//! still open) and the session's activity. Each call is written when its line differs from the
//! last one written for that (session, id) (a hash is kept, not the line), and a later line of
//! the same call replaces the earlier one downstream; the activity is written when it changed.
//! A `sweep` record is passed on, every source refreshed ([`sources::Records::refresh`]) and
//! stdout flushed: the batch is complete.
//!
//! A session listed with an older `updated` than before, or every session after a sweep whose
//! clock went back, is read from mark 0 again (all its calls; only what changed is written).
//! Memory stays flat: a session not listed for [`FORGET_AFTER_FULL`] full sweeps (an hour at
//! the default `full_every_secs`) is forgotten, here and by its source
//! ([`sources::Records::forget`]); if it comes back, it is read whole again and its calls
//! written again (downstream replaces them by id).

use super::source_to_read;
use crate::cli::{Exit, Out};
use crate::cmd::oc_sessions::blind;
use crate::record::{each_record, to_line, Line, Record, Session, Sweep};
use crate::sources::opencode;
use crate::sources::{self, SourceId};
use anyhow::Result;
use std::collections::hash_map::DefaultHasher;
use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::io::BufRead;

/// Full sweeps a session may go unlisted before its state is dropped. A full sweep lists every
/// session active since the previous one and the trees of open alerts, so a session unlisted
/// this long has been quiet (and unalerted) for as long: an hour at `full_every_secs = 60`.
pub const FORGET_AFTER_FULL: u64 = 60;

/// A sweep this much older than the previous one says the clock went back (ms): every mark,
/// taken on the old clock, is dropped and the sessions read from 0 at their next listing (only
/// what changed is written).
const CLOCK_BACK_MS: i64 = 5000;

/// What oc-calls remembers of one session between batches.
#[derive(Default)]
struct Known {
    /// The session record's `updated` when last listed.
    updated: Option<i64>,
    /// Hash of the line last written per call id.
    calls: HashMap<String, u64>,
    /// The mark of its last read (the calls that changed after it are read next time; 0: all
    /// of them).
    mark: u64,
    /// Hash of the activity line last written.
    activity: Option<u64>,
    /// The count of full sweeps when it was last listed.
    listed_at: u64,
}

/// `oc-calls --follow`'s state: where it writes, the sources it opened, and what it knows of
/// each session listed.
struct CallsFollow<'a> {
    out: &'a mut Out,
    /// The sources read, kept open (what they read with them) and refreshed at each batch.
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
    /// read every session from 0 next time.
    fn sweep(&mut self, sw: Sweep) {
        self.batch.clear();
        for r in self.records.values_mut() {
            r.refresh();
        }
        if sw.full {
            self.full_sweeps += 1;
            let now = self.full_sweeps;
            let gone: Vec<String> = self
                .known
                .iter()
                .filter(|(_, k)| now.saturating_sub(k.listed_at) > FORGET_AFTER_FULL)
                .map(|(id, _)| id.clone())
                .collect();
            for id in &gone {
                self.known.remove(id);
                for r in self.records.values_mut() {
                    r.forget(id);
                }
            }
        }
        if self.last_sweep.is_some_and(|t| sw.t < t - CLOCK_BACK_MS) {
            for k in self.known.values_mut() {
                k.mark = 0;
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
            let opened = match src.records() {
                Some(r) => r,
                None => match opencode::records(&src, self.limits) {
                    Ok(Some(r)) => r,
                    // read from an export upstream: its calls are in the stream already
                    Ok(None) => return Ok(()),
                    Err(why) => return blind(self.out, &src.to_string(), &why),
                },
            };
            self.records.insert(src.clone(), opened);
        }
        let k = self.known.entry(s.id.clone()).or_default();
        k.listed_at = self.full_sweeps;
        // its record updated earlier than last time: the clock went back, or another database
        if s.updated.is_some() && s.updated < k.updated {
            k.mark = 0;
        }
        k.updated = s.updated;
        let t = match self.records[&src].read_since(&s.id, k.mark) {
            Ok(Some(t)) => t,
            // gone since listed: nothing to judge, nothing wrong
            Ok(None) => return Ok(()),
            Err(why) => return blind(self.out, &src.to_string(), &why),
        };
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
        if k.activity != Some(h) {
            self.out.line(&line)?;
            k.activity = Some(h);
        }
        Ok(())
    }
}
