//! opencode's wing: everything that knows opencode 1.18's shapes on the reading side. Its
//! SQLite database ([`db`]); its servers ([`server`], over the HTTP client of [`http`]) and
//! their discovery among the machine's processes ([`discover`]); a server's event stream
//! ([`events`]); the files `opencode export` writes ([`export`]); the conversion of what these
//! hold (opencode's API objects: sessions, and messages with their parts) to the project's
//! records ([`convert`]); and the merge of what several of them say about one session
//! ([`merge`]). The database, a server and an export are each a kind of source of
//! [`crate::sources`] and a [`Source`], which hands opencode's JSON to [`convert`]; opened by
//! [`open`] (they need the `[opencode]` limits). A database or a server is also read as a source
//! of the project's records ([`records`]: its sessions, calls and activity, converted here);
//! oc-calls reads every listed session so, in follow mode from a mark (the messages changed
//! since). oc-sessions still lists them through [`Source`] (merging what several say of one
//! session).
//!
//! opencode's other parts live beside the neutral parts they serve: the ways a run is stopped
//! (its server's abort, the companion plugin's request files) in [`crate::stop::opencode`], and
//! the model block (its config's `blacklist`, read with its JSONC grammar) in [`crate::block`].
//! Where its database lies is [`crate::paths::opencode_db`]; its knobs are `[opencode]` in the
//! config.

pub mod convert;
pub mod db;
pub mod discover;
pub mod events;
pub mod export;
pub mod http;
pub mod merge;
pub mod records;
pub mod server;

use super::SourceId;
use crate::paths::Found;
use crate::record::Session;
use serde_json::Value;

pub use http::{Client, Fault, Limits};
pub use records::Reader;
pub use server::{discovered, plan_servers, probe, Live, Planned};

/// Where "what changed" left off for one open source. Only meaningful to the source (and the
/// open connection) that gave it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cursor {
    /// The database's `PRAGMA data_version` when the cursor was taken: unchanged means no other
    /// connection committed since, so nothing changed and nothing need be read.
    pub data_version: i64,
    /// The newest event of opencode's event log (`event.id`, ascending with opencode's clock)
    /// seen.
    pub event: Option<String>,
    /// The last row of the event log seen (`rowid`, ascending as rows are written).
    pub event_row: Option<i64>,
    /// The newest `session.time_updated` seen (databases without an event log).
    pub updated: i64,
}

/// What changed since a cursor: the sessions to read again, and where to continue.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Changes {
    /// Session ids, sorted.
    pub sessions: Vec<String>,
    /// Those of them whose latest change is a tool call that may wait for a person: a `question`
    /// call, or a `bash` call not started yet (its permission may be asked; [`crate::record::Ask`]).
    pub asking: Vec<String>,
    pub cursor: Cursor,
}

/// One row of a source's session index: what picks the sessions to list without reading them.
#[derive(Debug, Clone, PartialEq)]
pub struct IndexEntry {
    pub id: String,
    pub parent: Option<String>,
    pub updated: Option<i64>,
    /// A server says it is busy or retrying.
    pub active: bool,
}

impl IndexEntry {
    pub fn of(s: &Session) -> IndexEntry {
        IndexEntry {
            id: s.id.clone(),
            parent: s.parent.clone(),
            updated: s.updated,
            active: s.status.as_deref().is_some_and(|st| st != "idle"),
        }
    }
}

/// One place sessions can be read from. Messages and sessions come in opencode's API shapes
/// (the database rebuilds them from its rows), so one converter ([`convert`]) serves every source.
pub trait Source {
    /// What the records read from here name as their `source`.
    fn id(&self) -> SourceId;

    /// The cheap index of every session: id, parent, last update, whether active.
    fn index(&self) -> Result<Vec<IndexEntry>, Fault>;

    /// These sessions (picked from the index, see [`select`]) as records, newest update first.
    fn sessions(&self, ids: &[&str]) -> Result<Vec<Session>, Fault>;

    /// The status a session read alone has here (`None`: this source cannot tell).
    fn status_alone(&self) -> Option<&'static str> {
        None
    }

    /// One session as opencode's `Session` object, if this source holds it.
    fn session(&self, id: &str) -> Result<Option<Value>, Fault>;

    /// A session's messages with their parts, `[{info, parts}]`, in order: its calls and its
    /// activity ([`convert::calls_of`], [`convert::activity_of`]). `NotFound`: gone since listed.
    fn messages(&self, id: &str) -> Result<Value, Fault>;

    /// The messages of a session changed at or after `since` (ms, opencode's `time_updated`),
    /// each whole with all its parts, in order, and the newest update among them (`None`: no
    /// change, or a source that cannot tell). The calls of one message depend on that message
    /// alone, so these give every call that may have changed. By default, every message.
    fn messages_since(&self, id: &str, since: i64) -> Result<(Value, Option<i64>), Fault> {
        let _ = since;
        Ok((self.messages(id)?, None))
    }

    /// Whether what was opened is still what the source's name names (`false`: a database
    /// deleted or replaced at its path since; open it again).
    fn is_current(&self) -> bool {
        true
    }

    /// The sessions that changed since `since` (everything, with no cursor), cheaply enough to
    /// ask every second. `Ok(None)`: this source cannot tell; read it whole.
    fn changes(&self, since: Option<&Cursor>) -> Result<Option<Changes>, Fault> {
        let _ = since;
        Ok(None)
    }

    /// Sends `text` into a session as the user's message; says what the source answered.
    /// Refused where the source cannot reach a running agent.
    fn nudge(&self, session: &str, text: &str) -> Result<String, String> {
        let _ = (session, text);
        Err(super::refusal(&self.id()))
    }
}

/// The servers to read, built from the config: those `given` (`--server`, and servers among
/// `--source`), those configured (`[opencode] servers`, and servers among `[opencode]
/// sources`), and, as `discover` says, those opencode processes listen on (with the processes,
/// which tell who writes the database at `db`). The database itself is
/// [`crate::paths::opencode_db`]; every other source, [`others_to_read`].
pub fn servers_to_read(
    given: &[String],
    cfg: &crate::config::Config,
    discover: crate::config::Discover,
    db: &std::path::Path,
) -> (Vec<discover::Process>, Vec<Planned>) {
    let procs = discovered(discover, db, &cfg.opencode.discover_uids);
    let found = discover::listeners(&procs);
    let servers_in = |wires: &[String]| -> Vec<String> {
        wires
            .iter()
            .filter(|w| matches!(SourceId::parse(w), SourceId::Server(_)))
            .cloned()
            .collect()
    };
    let configured = [
        cfg.opencode.servers.clone(),
        servers_in(&cfg.opencode.sources),
    ]
    .concat();
    let plan = plan_servers(given, &configured, &found);
    (procs, plan)
}

/// The sources to read besides opencode's database and its servers, by their `source`
/// strings: those `given` (`--source`), then those configured (`[opencode] sources`), each
/// once, with how it was found. Servers among them are read as servers ([`servers_to_read`]);
/// the database at `db`, read anyway, is not read twice. Each is listed through its
/// [`Source`] alone: the index picks what to list, as for the database
/// ([`merge::Seen::merge_source`]).
pub fn others_to_read(
    given: &[String],
    cfg: &crate::config::Config,
    db: &std::path::Path,
) -> Vec<(SourceId, Found)> {
    let mut out: Vec<(SourceId, Found)> = Vec::new();
    let wires = given
        .iter()
        .map(|w| (w, Found::Argument))
        .chain(cfg.opencode.sources.iter().map(|w| (w, Found::Configured)));
    for (wire, found) in wires {
        let id = SourceId::parse(wire);
        let ours = matches!(&id, SourceId::Database(p) if p == db);
        if !matches!(id, SourceId::Server(_)) && !ours && !out.iter().any(|(o, _)| *o == id) {
            out.push((id, found));
        }
    }
    out
}
/// Opens the source a `source` string names, for reading one session after another: a
/// database, a server (with these limits). An export is not opened again (`None`): its sessions
/// and calls are in the stream that named it. Another agent's kind is not opencode's to open.
pub fn open(id: &SourceId, limits: Limits) -> Result<Option<Box<dyn Source>>, String> {
    match id {
        SourceId::Server(url) => Ok(Some(Box::new(server::Server {
            client: Client::with_limits(url, limits),
        }))),
        SourceId::Database(path) => Ok(Some(Box::new(
            db::Db::open(path).map_err(|e| format!("{e:#}"))?,
        ))),
        SourceId::Export(_) => Ok(None),
        other => Err(format!(
            "{other}: {} are read as records, not as opencode's",
            other.kind_phrase()
        )),
    }
}

/// Opens the source a `source` string names as a source of the project's records
/// ([`Reader`]), as [`open`] opens it.
pub fn records(id: &SourceId, limits: Limits) -> Result<Option<Box<dyn super::Records>>, String> {
    Ok(open(id, limits)?
        .map(|s| Box::new(Reader::new(id.clone(), limits, s)) as Box<dyn super::Records>))
}
