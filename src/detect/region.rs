//! What the signals look at: each call as the detector sees it ([`Obs`]), and the session's
//! calls since its last landed change, at most `window` of them ([`Region`]).
//!
//! A landed change empties the region: every window-based signal judges only the work done
//! since the session last made progress, so a loop that follows real work is seen from its
//! first call, not once the landings have aged out of a fixed window.

use crate::record::CallRef;
use serde_json::{Map, Value};
use std::collections::VecDeque;

/// One call, with the features every signal shares, computed once.
pub struct Obs<'a> {
    /// 1-based number of the call within its session.
    pub index: u64,
    pub t: i64,
    pub id: &'a str,
    pub tool: &'a str,
    pub args: &'a Map<String, Value>,
    /// Tool and canonical arguments.
    pub exact: u64,
    /// What the call works on.
    pub target: u64,
    /// A read with a known file length.
    pub read: Option<Read>,
    /// A hash of the call's output; `None` is unknown, which never matches anything.
    pub out: Option<u64>,
    /// The call failed (an error, or a non-zero exit).
    pub failed: bool,
    /// The session's directory, for describing targets relative to it.
    pub dir: Option<&'a str>,
}

impl Obs<'_> {
    pub fn describe(&self) -> Box<str> {
        super::target::describe(self.tool, self.args, self.dir).into_boxed_str()
    }
    pub fn at(&self) -> CallRef {
        CallRef {
            index: self.index,
            t: self.t,
            id: self.id.to_string(),
        }
    }
}

/// The lines one read requests from its file.
#[derive(Clone, Copy)]
pub struct Read {
    pub file: u64,
    pub lines: u32,
    pub total: u32,
}

/// A call in the region, as far as signals need it after the call has passed.
pub struct Entry {
    pub index: u64,
    pub t: i64,
    pub id: Box<str>,
    pub read: Option<Read>,
}

impl Entry {
    pub fn at(&self) -> CallRef {
        CallRef {
            index: self.index,
            t: self.t,
            id: self.id.to_string(),
        }
    }
}

/// The calls since the last landed change, oldest first, at most `window`. The exact and target
/// keys sit in their own columns so that a scan over them reads a few contiguous cache lines.
#[derive(Default)]
pub struct Region {
    pub exact: VecDeque<u64>,
    pub target: VecDeque<u64>,
    pub entries: VecDeque<Entry>,
}

impl Region {
    pub fn len(&self) -> usize {
        self.entries.len()
    }
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
    pub fn push(&mut self, c: &Obs) {
        self.exact.push_back(c.exact);
        self.target.push_back(c.target);
        self.entries.push_back(Entry {
            index: c.index,
            t: c.t,
            id: c.id.into(),
            read: c.read,
        });
    }
    /// Takes the oldest call out; returns its (exact, target, entry).
    pub fn pop(&mut self) -> Option<(u64, u64, Entry)> {
        Some((
            self.exact.pop_front()?,
            self.target.pop_front()?,
            self.entries.pop_front()?,
        ))
    }
    pub fn clear(&mut self) {
        *self = Region::default();
    }
    /// The calls of the region whose key (from `column`) is `key`, oldest first.
    pub fn calls_with(&self, column: &VecDeque<u64>, key: u64) -> Vec<CallRef> {
        column
            .iter()
            .zip(&self.entries)
            .filter(|(k, _)| **k == key)
            .map(|(_, e)| e.at())
            .collect()
    }
    /// The calls from index `from` on.
    pub fn calls_from(&self, from: u64) -> Vec<CallRef> {
        self.entries
            .iter()
            .filter(|e| e.index >= from)
            .map(Entry::at)
            .collect()
    }
}
