//! What the signals look at: each call as the detector sees it ([`Obs`]), and the session's
//! calls since its last landed change, at most `window` of them ([`Region`]).
//!
//! A landed change empties the region: every window-based signal judges only the work done
//! since the session last made progress, so a loop that follows real work is seen from its
//! first call, not once the landings have aged out of a fixed window.

use crate::record::CallRef;
use crate::vocab::Tool;
use std::collections::VecDeque;

/// One call, with the features every signal shares, computed once.
pub struct Obs<'a> {
    /// 1-based number of the call within its session.
    pub index: u64,
    pub t: i64,
    pub id: &'a str,
    pub tool: &'a str,
    pub args: super::target::CallArgs<'a>,
    /// Tool and canonical arguments.
    pub exact: u64,
    /// What the call works on, as `top` and `short_loop` count it: a key of its own when the
    /// call explores (see [`Region::explores`]).
    pub target: u64,
    /// What the call works on.
    pub worked: u64,
    /// A read with a known file length.
    pub read: Option<ReadSpan>,
    /// A hash of the call's output; `None` is unknown, which never matches anything.
    pub out: Option<u64>,
    /// The call failed (an error, or a non-zero exit).
    pub failed: bool,
    /// A command's exit code, if known.
    pub exit: Option<i64>,
    /// The call says it landed a change identical to one the session already landed (the same
    /// tool and arguments): the change is made again, which is no progress.
    pub relanded: bool,
    /// The session's directory, for describing targets relative to it.
    pub dir: Option<&'a str>,
}

impl<'a> Obs<'a> {
    /// Call number `index` of its session (whose directory is `dir`), with its features.
    pub fn of(
        c: &super::CallIn<'a>,
        args: super::target::CallArgs<'a>,
        index: u64,
        dir: Option<&'a str>,
    ) -> Obs<'a> {
        let keys = super::target::keys_of(c.tool, &args);
        let tool = args.tool;
        let read = match (tool, c.file_lines) {
            (Tool::Read, Some(n)) if n > 0 => Some(ReadSpan {
                file: args.file_h,
                lines: super::target::lines_of(&args, n).min(u32::MAX as i64) as u32,
                total: n.min(u32::MAX as i64) as u32,
            }),
            _ => None,
        };
        Obs {
            index,
            t: c.t,
            id: c.id,
            tool: c.tool,
            args,
            exact: keys.exact,
            target: keys.target,
            worked: keys.target,
            read,
            // a subagent's answer names the child it spawned, new each time: what a `task`
            // answers is no outcome to compare (the same task spawned again is a repeat)
            out: c
                .out
                .filter(|_| tool != Tool::Task)
                .map(super::target::hash_str),
            failed: c.status == "error" || c.exit.is_some_and(|e| e != 0),
            exit: c.exit,
            relanded: false,
            dir,
        }
    }

    pub fn describe(&self) -> Box<str> {
        let mut s = String::new();
        super::target::describe_into(&mut s, self.tool, &self.args, self.dir);
        s.into_boxed_str()
    }
    pub fn at(&self) -> CallRef {
        CallRef {
            index: self.index,
            t: self.t,
            id: self.id.to_string(),
        }
    }
}

/// Makes room for one more element, growing by half rather than doubling: most sessions are
/// short, and 200,000 of them each carrying unused room is most of the detector's memory.
pub fn room<T>(v: &mut Vec<T>) {
    room_upto(v, usize::MAX);
}

/// [`room`] for a vector that never holds more than `max`: it grows no further than that.
pub fn room_upto<T>(v: &mut Vec<T>, max: usize) {
    if v.len() == v.capacity() {
        let half = (v.len() / 2).max(1);
        v.reserve_exact(half.min(max.saturating_sub(v.len())).max(1));
    }
}

/// [`room`] for a ring.
pub fn room_ring<T>(v: &mut VecDeque<T>) {
    if v.len() == v.capacity() {
        v.reserve_exact((v.len() / 2).max(1));
    }
}

/// The lines one read requests from its file.
#[derive(Clone, Copy)]
pub struct ReadSpan {
    pub file: u64,
    pub lines: u32,
    pub total: u32,
}

/// A short string kept without a heap allocation when it fits `N` bytes: a call id (opencode's
/// `prt_` ids are 30 bytes; the region holds one per call, and allocating each was a measured
/// share of the detector's time).
#[derive(Clone)]
pub enum Small<const N: usize> {
    Inline { len: u8, bytes: [u8; N] },
    Heap(Box<str>),
}

/// A call id.
pub type Id = Small<30>;

impl<const N: usize> Default for Small<N> {
    fn default() -> Small<N> {
        Small::new("")
    }
}

impl<const N: usize> Small<N> {
    pub fn new(s: &str) -> Small<N> {
        const { assert!(N <= u8::MAX as usize) };
        if s.len() <= N {
            let mut bytes = [0; N];
            bytes[..s.len()].copy_from_slice(s.as_bytes());
            Small::Inline {
                len: s.len() as u8,
                bytes,
            }
        } else {
            Small::Heap(s.into())
        }
    }

    pub fn bytes(&self) -> &[u8] {
        match self {
            Small::Inline { len, bytes } => &bytes[..*len as usize],
            Small::Heap(s) => s.as_bytes(),
        }
    }

    pub fn as_str(&self) -> &str {
        match self {
            // whole UTF-8 characters went in, so the bytes are valid
            Small::Inline { len, bytes } => {
                std::str::from_utf8(&bytes[..*len as usize]).unwrap_or("")
            }
            Small::Heap(s) => s,
        }
    }
}

/// A call in the region, as far as signals need it after the call has passed.
#[derive(Clone)]
pub struct RegionEntry {
    pub index: u64,
    pub t: i64,
    pub id: Id,
    pub read: Option<ReadSpan>,
    /// The call's output hash: signals compare outcomes across the region.
    pub out: Option<u64>,
    pub failed: bool,
    /// What it worked on (its target before [`Region::explores`]).
    pub worked: u64,
}

impl RegionEntry {
    pub fn at(&self) -> CallRef {
        CallRef {
            index: self.index,
            t: self.t,
            id: self.id.as_str().to_string(),
        }
    }
}

/// The calls since the last landed change, oldest first, at most `window`. The exact and target
/// keys sit in their own columns so that a scan over them reads a few contiguous cache lines.
#[derive(Default, Clone)]
pub struct Region {
    pub exact: VecDeque<u64>,
    pub target: VecDeque<u64>,
    pub entries: VecDeque<RegionEntry>,
    /// How many calls of the region work on the latest call's target, itself included (counted
    /// once by [`Region::push`] for the signals that need it; kept up without a scan while the
    /// calls keep to one target, as a loop does).
    pub target_n: u32,
    /// The latest call's target, while the region has held it since.
    last_target: Option<u64>,
}

impl Region {
    pub fn len(&self) -> usize {
        self.entries.len()
    }
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
    pub fn push(&mut self, c: &Obs) {
        room_ring(&mut self.exact);
        room_ring(&mut self.target);
        room_ring(&mut self.entries);
        self.exact.push_back(c.exact);
        self.target.push_back(c.target);
        self.entries.push_back(RegionEntry {
            index: c.index,
            t: c.t,
            id: Id::new(c.id),
            read: c.read,
            out: c.out,
            failed: c.failed,
            worked: c.worked,
        });
        if self.last_target == Some(c.target) {
            self.target_n += 1;
        } else {
            self.target_n = self.target.iter().filter(|&&t| t == c.target).count() as u32;
            self.last_target = Some(c.target);
        }
    }
    /// Whether call `c` explores: it works a target the region worked before, and its known
    /// output is new to that target, or is an answer the target gave to other calls only
    /// (different searches that each find nothing, different fixes rejected with one text) while
    /// none of the target's calls has come back and no exit code says it failed. An agent trying
    /// things is not repeating itself: such a call is counted as a target of its own. Identical
    /// answers of different calls count once the calls themselves come back. An unknown output
    /// proves nothing and counts. `worked` is room for the target's calls, the caller's to keep.
    pub fn explores(&self, c: &Obs, worked: &mut Vec<u64>) -> bool {
        let Some(out) = c.out else { return false };
        worked.clear();
        let (mut answered, mut repeated) = (false, c.exit.is_some_and(|e| e != 0));
        for (e, &exact) in self.entries.iter().zip(&self.exact) {
            if e.worked != c.worked {
                continue;
            }
            if e.out == Some(out) {
                if exact == c.exact {
                    return false;
                }
                answered = true;
            }
            repeated |= exact == c.exact || worked.contains(&exact);
            worked.push(exact);
        }
        !worked.is_empty() && (!answered || !repeated)
    }
    /// How many calls of the region work on `target`.
    pub fn count_target(&self, target: u64) -> usize {
        if self.last_target == Some(target) {
            return self.target_n as usize;
        }
        self.target.iter().filter(|&&t| t == target).count()
    }
    /// Takes the oldest call out; returns its (exact, target, entry).
    pub fn pop(&mut self) -> Option<(u64, u64, RegionEntry)> {
        let out = (
            self.exact.pop_front()?,
            self.target.pop_front()?,
            self.entries.pop_front()?,
        );
        if self.last_target == Some(out.1) {
            self.target_n -= 1;
        }
        Some(out)
    }
    /// Empties the region, keeping its room (a session that landed once lands again).
    pub fn clear(&mut self) {
        self.exact.clear();
        self.target.clear();
        self.entries.clear();
        self.target_n = 0;
        self.last_target = None;
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
            .map(RegionEntry::at)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_short_and_long_read_back_as_given() {
        for id in [
            "",
            "prt_0123456789abcdefghijklmnop",
            "prt_0123456789abcdefghijklmnopq",
            "prt_é中",
        ] {
            assert_eq!(Id::new(id).as_str(), id);
        }
        assert!(matches!(
            Id::new("prt_0123456789abcdefghijklmnop"),
            Id::Inline { len: 30, .. }
        ));
        assert!(matches!(
            Id::new("prt_0123456789abcdefghijklmnopq"),
            Id::Heap(_)
        ));
    }

    #[test]
    fn room_grows_by_half() {
        let mut v: Vec<u8> = Vec::new();
        let mut caps = Vec::new();
        for i in 0..10 {
            room(&mut v);
            v.push(i);
            caps.push(v.capacity());
        }
        assert_eq!(caps, [1, 2, 3, 4, 6, 6, 9, 9, 9, 13]);
    }
}
