//! opencode's sources as sources of the project's own records: a database or a server opened
//! as a [`Source`] and read through [`Records`], its messages converted here ([`calls_and_activity`])
//! so that what reads them sees sessions, calls and activity, never opencode's JSON.
//!
//! In: a [`Source`] ([`super::open`]) and the session ids to read. Out: [`Transcript`]s, and
//! [`Listing`]s picked from the source's index as `oc-sessions` picks ([`super::merge::select`]).

use super::merge::{select, SessionNode};
use super::{convert, Fault, Source};
use crate::record::{Activity, Call, Program};
use crate::sources::transcript::{self, Transcript};
use crate::sources::{Listing, Records, SourceId};
use serde_json::Value;
use std::cell::RefCell;

/// A database or a server read as a source of records. The files' line counts a call's
/// `file_lines` gives are counted once per open ([`convert::LineCache`]).
pub struct Reader {
    source: Box<dyn Source>,
    lines: RefCell<convert::LineCache>,
}

impl Reader {
    pub fn new(source: Box<dyn Source>) -> Reader {
        Reader {
            source,
            lines: RefCell::default(),
        }
    }
}

impl Records for Reader {
    fn id(&self) -> SourceId {
        self.source.id()
    }

    fn program(&self) -> Program {
        Program::Opencode
    }

    fn list(&self, since: i64, also: &[String]) -> Listing {
        let name = self.source.id().to_string();
        let picked = self.source.index().and_then(|index| {
            let nodes: Vec<SessionNode> = index
                .iter()
                .map(|e| SessionNode {
                    id: &e.id,
                    parent: e.parent.as_deref(),
                    updated: e.updated,
                    active: e.active,
                })
                .collect();
            let keep: Vec<&str> = select(&nodes, since, also).into_iter().collect();
            self.source.sessions(&keep)
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

    /// The session with all its calls: opencode's messages carry no mark to read on from.
    fn read_since(&self, id: &str, _mark: u64) -> Result<Option<Transcript>, String> {
        let msgs = match self.source.messages(id) {
            Ok(m) => m,
            // deleted between listing and reading: nothing to judge, nothing wrong
            Err(Fault::NotFound(_)) => return Ok(None),
            Err(f) => return Err(format!("session {id}: {f}")),
        };
        let session = match self.source.session(id) {
            Ok(Some(v)) => v,
            Ok(None) | Err(Fault::NotFound(_)) => return Ok(None),
            Err(f) => return Err(format!("session {id}: {f}")),
        };
        let name = self.source.id().to_string();
        let session = convert::session_of(&session, self.source.status_alone(), &name)
            .map_err(|why| format!("session {id}: {why}"))?;
        let (calls, activity) = calls_and_activity(id, &msgs, &mut self.lines.borrow_mut())?;
        Ok(Some(Transcript {
            session,
            calls,
            activity,
            mark: 0,
        }))
    }

    fn refresh(&mut self) {}
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
