//! Landings: which calls land a change, net of edits that undo each other. An edit that reverts
//! an earlier landed edit cancels it (neither is progress), and redoing an undone edit lands
//! nothing. A landing identical to an earlier one (the same tool and arguments: an `edit` re-sent
//! that appends its block once more, a `sed -i` run again) changes nothing new: no progress
//! either. An agent that undoes its last edit, round after round (delete a line, re-insert the
//! same block elsewhere), is churning: from the [`CHURN`]th undo in a row, its edits are no
//! progress until one outlasts the next edit. A descendant session's landing counts for its
//! ancestors.

use super::region::{room, room_ring, Id};
use crate::record::CallRef;
use std::collections::VecDeque;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EditSig {
    pub file: u32,
    pub old: u32,
    pub new: u32,
}

impl EditSig {
    fn inverse(self) -> EditSig {
        EditSig {
            file: self.file,
            old: self.new,
            new: self.old,
        }
    }
}

/// Landed edits remembered for finding an undo, and undone edits for finding a redo.
const EDITS: usize = 16;
const UNDONE: usize = 64;
const LANDINGS: usize = 16;
/// Undos in a row from which edits are churn.
pub const CHURN: u32 = 2;

#[derive(Clone)]
struct Landing {
    index: u64,
    t: i64,
    id: Id,
    /// The session's cost total at that point.
    cost: f64,
}

#[derive(Default, Clone)]
pub struct Landings {
    /// Effective landings, latest last (bounded). Rings: dropping the oldest of a full vector
    /// moved the other fifteen, 14 cache lines on every landing (cachegrind).
    landings: VecDeque<Landing>,
    /// Effective landed edits: (signature, call index).
    edits: VecDeque<(EditSig, u64)>,
    undone: Vec<EditSig>,
    /// The identities (`exact` keys) of the latest effective landings.
    exacts: VecDeque<u64>,
    /// Undos with no lasting edit between, and whether the latest edit event was one.
    undos: u32,
    after_undo: bool,
    /// The latest landed edit replaced the text the landed edit before it wrote (the same spot
    /// reworked, not new ground).
    pub rewriting: bool,
    /// A descendant's latest landing: (its time, this session's call count then).
    pub descendant: Option<(i64, u64)>,
}

impl Landings {
    /// Whether a call that says it landed really is progress; records it if so. `exact` is the
    /// call's identity, `at` its (index, time, id); `cost` the session's cost total with it.
    pub fn land(
        &mut self,
        exact: u64,
        edit: Option<EditSig>,
        at: (u64, i64, &str),
        cost: f64,
    ) -> bool {
        let (index, t, id) = at;
        if self.exacts.contains(&exact) {
            return false;
        }
        if let Some(sig) = edit {
            if self.undone.contains(&sig) {
                return false;
            }
            if let Some(i) = self.edits.iter().rposition(|(e, _)| *e == sig.inverse()) {
                let Some((_, index)) = self.edits.remove(i) else {
                    return false;
                };
                self.landings.retain(|l| l.index != index);
                if self.undone.len() + 2 > UNDONE {
                    self.undone.clear();
                }
                room(&mut self.undone);
                self.undone.extend([sig, sig.inverse()]);
                self.undos += 1;
                self.after_undo = true;
                return false;
            }
            // the edit before this one was not undone: it lasted
            if !self.after_undo {
                self.undos = 0;
            }
            self.after_undo = false;
            self.rewriting = self
                .edits
                .back()
                .is_some_and(|(e, _)| e.file == sig.file && e.new == sig.old);
            if self.edits.len() == EDITS {
                self.edits.pop_front();
            }
            room_ring(&mut self.edits);
            self.edits.push_back((sig, index));
            if self.undos >= CHURN {
                return false;
            }
        }
        if self.exacts.len() == LANDINGS {
            self.exacts.pop_front();
        }
        room_ring(&mut self.exacts);
        self.exacts.push_back(exact);
        if self.landings.len() == LANDINGS {
            self.landings.pop_front();
        }
        room_ring(&mut self.landings);
        self.landings.push_back(Landing {
            index,
            t,
            id: Id::new(id),
            cost,
        });
        true
    }

    /// Whether a change with this identity (`exact`) is among the latest effective landings.
    pub fn landed_before(&self, exact: u64) -> bool {
        self.exacts.contains(&exact)
    }

    /// The last effective landing of the session itself.
    pub fn last(&self) -> Option<CallRef> {
        self.landings.back().map(|l| CallRef {
            index: l.index,
            t: l.t,
            id: l.id.as_str().to_string(),
        })
    }

    /// (call index, cost total) at the last effective landing.
    pub fn last_at(&self) -> Option<(u64, f64)> {
        self.landings.back().map(|l| (l.index, l.cost))
    }
}
