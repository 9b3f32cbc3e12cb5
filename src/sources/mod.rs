//! Where sessions come from. A source is one [`Source`]: opencode's SQLite database
//! ([`db`]), a live opencode server ([`server`], over [`http`], found by [`discover`]), or a file
//! `opencode export` wrote ([`export`]). Each is named by a [`SourceId`], whose wire form is the
//! `source` string of the records, and opened by [`open`], the one place that tells the kinds
//! apart. What a source holds (opencode's API objects) becomes records in [`convert`], along the
//! tool and argument vocabulary of [`crate::vocab`].
//!
//! Other agents' transcripts, sent for a backtest (`oc-calls --export`), are read by their own
//! wings, straight into records: Claude Code's by [`claude_code`], Codex's by [`codex`], with
//! the helpers of [`transcript`]; [`sent`] tells which wrote a file.
//!
//! Other agents' sessions on this machine are read the same way, live: Claude Code's directory
//! ([`claude_home`]) and Codex's ([`codex_home`]) are kinds of source too, but they yield the
//! project's own records through [`Records`] (sessions with their status, each session's calls
//! and activity), not opencode's JSON. [`agents_to_read`] says which are read with no
//! configuration: each whose directory is there, unless `[agents]` turns it off.
//!
//! Adding a kind of source: a file with its type implementing [`SourceKind`] (how its `source`
//! string reads, what a message calls it, how it is opened) and either [`Source`] (opencode's
//! shapes) or [`Records`] (the project's records), and its line in [`registry!`] below, which
//! makes its [`SourceId`] variant.

pub mod claude_code;
pub mod codex;
pub mod convert;
pub mod discover;
pub mod events;
pub mod http;
pub mod merge;
pub mod sent;
pub mod transcript;

use crate::record::{Program, Session};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;
use std::path::PathBuf;

pub use crate::paths::Found;
pub use http::{Client, Fault, Limits};
pub use server::{discovered, plan_servers, probe, Live, Planned};

/// A kind of source: how a `source` string names one, what a message calls it, how it is
/// opened. One implementation per kind, beside its [`Source`], listed once in [`registry!`].
pub trait SourceKind {
    /// What names one source of this kind: a path, a URL, a file as it was named.
    type Name;
    /// How a message says where a session was read (`a database`, `a server`, `an export`).
    const PHRASE: &'static str;
    /// What its `source` record calls its reader (`database`, `server`, `export`).
    const READER: &'static str;
    /// The name in `wire` if it is a `source` string of this kind. Kinds are asked in the
    /// registry's order, and the last one takes every string.
    fn claim(wire: &str) -> Option<Self::Name>;
    /// The `source` string naming it (what [`SourceKind::claim`] reads back).
    fn write(name: &Self::Name, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result;
    /// Opens it for reading one session after another (`None`: nothing to open again, as an
    /// export whose sessions and calls are in the stream that named it).
    fn open(name: &Self::Name, limits: Limits) -> Result<Option<Box<dyn Source>>, String>;
    /// Opens it as a source of the project's own records (`None`: a kind that speaks
    /// opencode's shapes, opened by [`SourceKind::open`]).
    fn records(name: &Self::Name) -> Option<Box<dyn Records>> {
        let _ = name;
        None
    }
}

/// A source that yields the project's own records: another agent's sessions, read by its wing
/// straight into [`Session`]s and [`transcript::Transcript`]s, with no opencode shape between.
pub trait Records {
    /// What the records read from here name as their `source`.
    fn id(&self) -> SourceId;

    /// The agent program whose sessions these are.
    fn program(&self) -> Program;

    /// The sessions updated at or after `since` (ms), those named in `also`, and every running
    /// one, each with its status (`busy` while its process runs, else `idle`), newest first; and
    /// what could not be read, each a `blind` reason naming its file.
    fn list(&self, since: i64, also: &[String]) -> Listing;

    /// One session's calls and activity, as the running process (or its absence) says (`None`:
    /// not here, or gone since listed).
    fn read(&self, id: &str) -> Result<Option<transcript::Transcript>, String> {
        self.read_since(id, 0)
    }

    /// The same with only the calls that changed after `mark`, the [`transcript::Transcript::mark`]
    /// an earlier read from this source gave (0: all of them): what follow mode writes again.
    fn read_since(&self, id: &str, mark: u64) -> Result<Option<transcript::Transcript>, String>;

    /// Looks again at what the source says beside its files (which processes run, which files
    /// there are), for the next listing and reads; what was read of the files is kept, so
    /// those reads parse only what was appended since. Follow mode keeps a source open and
    /// refreshes it at each batch.
    fn refresh(&mut self);
}

/// What a [`Records`] source lists.
#[derive(Debug, Default)]
pub struct Listing {
    pub sessions: Vec<Session>,
    /// Each a `blind` reason.
    pub problems: Vec<String>,
    /// What its `source` record says besides the count: the files it found, the running
    /// processes.
    pub facts: serde_json::Map<String, Value>,
}

/// The kinds of source, each `Variant(Name) = module::Type`: the module is declared, and the
/// variant of [`SourceId`] parses, prints, says its phrase and opens through the type's
/// [`SourceKind`].
macro_rules! registry {
    ($($var:ident($name:ty) = $module:ident :: $ty:ident),* $(,)?) => {
        $(pub mod $module;)*

        /// What a source is, by the string `source` fields carry: one variant per kind of
        /// source, in the registry's order.
        #[derive(Debug, Clone, PartialEq, Eq, Hash)]
        pub enum SourceId {
            $($var($name),)*
        }

        impl SourceId {
            /// Reads a `source` string. Every string names some source: the kinds are asked in
            /// order, and the last (a database path) takes what no other kind claims.
            pub fn parse(wire: &str) -> SourceId {
                $(if let Some(name) = <$module::$ty as SourceKind>::claim(wire) {
                    return SourceId::$var(name);
                })*
                unreachable!("the last kind of source takes every string")
            }

            /// How a message says where a session was read (`a database`, `a server`, ...).
            pub fn kind_phrase(&self) -> &'static str {
                match self {
                    $(SourceId::$var(_) => <$module::$ty as SourceKind>::PHRASE,)*
                }
            }

            /// What its `source` record calls its reader (`database`, `server`, ...).
            pub fn reader(&self) -> &'static str {
                match self {
                    $(SourceId::$var(_) => <$module::$ty as SourceKind>::READER,)*
                }
            }

            /// Opens it as a source of the project's own records (`None`: it speaks opencode's
            /// shapes; see [`SourceId::open`]).
            pub fn records(&self) -> Option<Box<dyn Records>> {
                match self {
                    $(SourceId::$var(name) => <$module::$ty as SourceKind>::records(name),)*
                }
            }

            /// Opens the source it names, for reading one session after another (`None`:
            /// nothing to open again).
            fn open(&self, limits: Limits) -> Result<Option<Box<dyn Source>>, String> {
                match self {
                    $(SourceId::$var(name) => <$module::$ty as SourceKind>::open(name, limits),)*
                }
            }
        }

        impl std::fmt::Display for SourceId {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                match self {
                    $(SourceId::$var(name) => <$module::$ty as SourceKind>::write(name, f),)*
                }
            }
        }
    };
}

registry! {
    Server(String) = server::Server,
    Export(String) = export::ExportFile,
    ClaudeCode(PathBuf) = claude_home::ClaudeHome,
    Codex(PathBuf) = codex_home::CodexHome,
    // last: what is neither a URL nor an export is a database path
    Database(PathBuf) = db::Db,
}

impl SourceId {
    /// A local file that can be read again at will (a database), as opposed to a server
    /// that may be gone or an export whose calls are already in the stream.
    pub fn is_database(&self) -> bool {
        matches!(self, SourceId::Database(_))
    }
}

impl Serialize for SourceId {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        ser.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for SourceId {
    fn deserialize<D: Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        Ok(SourceId::parse(&String::deserialize(de)?))
    }
}

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
        Err(refusal(&self.id()))
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

/// The other agents to read with no configuration: Claude Code's directory and Codex's, each
/// when it is there and `[agents]` does not turn it off. An agent that is not installed costs
/// one `stat` and is not named.
pub fn agents_to_read(cfg: &crate::config::Config) -> Vec<SourceId> {
    let mut out = Vec::new();
    let claude = crate::paths::claude_code_dir();
    if cfg.agents.claude_code && claude.is_dir() {
        out.push(SourceId::ClaudeCode(claude));
    }
    let codex = crate::paths::codex_dir();
    if cfg.agents.codex && codex.is_dir() {
        out.push(SourceId::Codex(codex));
    }
    out
}

impl SourceId {
    /// For another agent's directory: the newest modification among its session files, a
    /// `stat` a file, nothing read (`None`: no files, or not such a source).
    pub fn newest_change(&self) -> Option<i64> {
        match self {
            SourceId::ClaudeCode(dir) => claude_home::newest_change(dir),
            SourceId::Codex(dir) => codex_home::newest_change(dir),
            _ => None,
        }
    }
}

/// Why a session read from `id` cannot be nudged (no running agent to send to).
pub fn refusal(id: &SourceId) -> String {
    format!(
        "the session was read from {}: no server to send to",
        id.kind_phrase()
    )
}

/// Opens the source a `source` string names, for reading one session after another, as its
/// kind opens it ([`SourceKind::open`]). An export is not opened again: its sessions and calls
/// are in the stream that named it.
pub fn open(id: &SourceId, limits: Limits) -> Result<Option<Box<dyn Source>>, String> {
    id.open(limits)
}

/// Sends a nudge to the session read from `source` (a `source` string): a server's
/// `prompt_async`; a database or an export is refused, saying which.
pub fn nudge(source: Option<&str>, session: &str, text: &str) -> Result<String, String> {
    match source.map(SourceId::parse) {
        Some(id @ SourceId::Server(_)) => match open(&id, Limits::default()) {
            Ok(Some(s)) => s.nudge(session, text),
            Ok(None) => Err(refusal(&id)),
            Err(e) => Err(e),
        },
        Some(id) => Err(refusal(&id)),
        None => Err("the session names no source: no server to send to".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_string_is_a_server_an_export_or_a_database_and_reads_back_the_same() {
        let cases = [
            (
                "http://127.0.0.1:4096",
                SourceId::Server("http://127.0.0.1:4096".into()),
            ),
            ("https://h/x", SourceId::Server("https://h/x".into())),
            ("export:-", SourceId::Export("-".into())),
            ("export:a b.json", SourceId::Export("a b.json".into())),
            (
                "/home/u/.local/share/opencode/opencode.db",
                SourceId::Database("/home/u/.local/share/opencode/opencode.db".into()),
            ),
            // a relative path, and a string that only looks like a scheme, are paths
            ("httpx.db", SourceId::Database("httpx.db".into())),
        ];
        for (wire, id) in cases {
            assert_eq!(SourceId::parse(wire), id);
            assert_eq!(id.to_string(), wire);
            assert_eq!(serde_json::to_value(&id).unwrap(), wire);
            assert_eq!(serde_json::from_value::<SourceId>(wire.into()).unwrap(), id);
        }
    }

    #[test]
    fn a_nudge_says_which_kind_of_source_cannot_take_it() {
        assert_eq!(
            nudge(Some("/o.db"), "ses_a", "x").unwrap_err(),
            "the session was read from a database: no server to send to"
        );
        assert_eq!(
            nudge(Some("export:s.json"), "ses_a", "x").unwrap_err(),
            "the session was read from an export: no server to send to"
        );
    }
}
