//! Where sessions come from: the contract every agent's wing meets, and the one list of the
//! kinds of source. A kind of source is named by a [`SourceId`], whose wire form is the
//! `source` string of the records; each kind is one type implementing [`SourceKind`], listed
//! once in [`registry!`] below.
//!
//! Each agent is a wing of its own, which alone knows its shapes. opencode's ([`opencode`]):
//! its database, its servers and their discovery, its event stream, its export files, each an
//! [`opencode::Source`] handing opencode's JSON to its converter, opened by the wing
//! ([`opencode::open`], with its `[opencode]` limits); a database or a server is also read as a
//! source of [`Records`] ([`opencode::records`]), as oc-calls reads every listed session. Claude Code's
//! ([`claude_code`]) and Codex's ([`codex`]): their transcripts, read straight into the
//! project's records, live from their directories on this machine (each a kind of source
//! yielding [`Records`]: sessions with their status, each session's calls and activity) or as
//! files sent for a backtest (`oc-calls --export`), with the helpers of [`transcript`];
//! [`sent`] tells which agent wrote a file. [`agents_to_read`] says which agents' directories
//! are read with no configuration: each that is there, unless `[agents]` turns it off. The
//! tool and argument vocabulary every converter speaks is [`vocab`].
//!
//! Adding a kind of source: a type implementing [`SourceKind`] (how its `source` string reads,
//! what a message calls it, how it is opened as a source of [`Records`]) and [`Records`] (the
//! project's records), in its agent's wing, and its line in `registry!`, which makes its
//! [`SourceId`] variant. The contract names no agent: opencode's kinds are opened by their wing
//! (they need its limits), which also reads them as [`opencode::Source`]s for oc-sessions'
//! merge.

pub mod claude_code;
pub mod codex;
pub mod opencode;
pub mod sent;
pub mod transcript;

use crate::record::{Program, Session};
use opencode::Limits;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;
use std::path::PathBuf;

pub use crate::paths::Found;

/// A kind of source: how a `source` string names one, what a message calls it, how it is
/// opened. One implementation per kind, beside its [`Records`] (or opencode's
/// [`opencode::Source`]), listed once in [`registry!`].
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
    /// Opens it as a source of the project's own records (`None`: a kind its wing opens,
    /// as opencode's are by [`opencode::records`] with its limits).
    fn records(name: &Self::Name) -> Option<Box<dyn Records>> {
        let _ = name;
        None
    }
}

/// A source that yields the project's own records: an agent's sessions, read by its wing
/// straight into [`Session`]s and [`transcript::Transcript`]s, with no agent's shape between.
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

    /// Follow mode no longer follows `session`: what was kept to read it from a mark may go
    /// (read from 0 if it comes back).
    fn forget(&mut self, session: &str) {
        let _ = session;
    }
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

/// The kinds of source, each `Variant(Name) = wing::module::Type`: the variant of [`SourceId`]
/// parses, prints, says its phrase and opens through the type's [`SourceKind`].
macro_rules! registry {
    ($($var:ident($name:ty) = $ty:ty),* $(,)?) => {
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
                $(if let Some(name) = <$ty as SourceKind>::claim(wire) {
                    return SourceId::$var(name);
                })*
                unreachable!("the last kind of source takes every string")
            }

            /// How a message says where a session was read (`a database`, `a server`, ...).
            pub fn kind_phrase(&self) -> &'static str {
                match self {
                    $(SourceId::$var(_) => <$ty as SourceKind>::PHRASE,)*
                }
            }

            /// What its `source` record calls its reader (`database`, `server`, ...).
            pub fn reader(&self) -> &'static str {
                match self {
                    $(SourceId::$var(_) => <$ty as SourceKind>::READER,)*
                }
            }

            /// Opens it as a source of the project's own records (`None`: its wing opens it;
            /// opencode's, by [`opencode::records`]).
            pub fn records(&self) -> Option<Box<dyn Records>> {
                match self {
                    $(SourceId::$var(name) => <$ty as SourceKind>::records(name),)*
                }
            }
        }

        impl std::fmt::Display for SourceId {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                match self {
                    $(SourceId::$var(name) => <$ty as SourceKind>::write(name, f),)*
                }
            }
        }
    };
}

registry! {
    Server(String) = opencode::server::Server,
    Export(String) = opencode::export::ExportFile,
    ClaudeCode(PathBuf) = claude_code::home::ClaudeHome,
    Codex(PathBuf) = codex::home::CodexHome,
    // last: what is neither a URL nor an export is a database path
    Database(PathBuf) = opencode::db::Db,
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
            SourceId::ClaudeCode(dir) => claude_code::home::newest_change(dir),
            SourceId::Codex(dir) => codex::home::newest_change(dir),
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
/// Sends a nudge to the session read from `source` (a `source` string): an opencode server's
/// `prompt_async` ([`opencode::Source::nudge`]); any other kind is refused, saying which.
pub fn nudge(source: Option<&str>, session: &str, text: &str) -> Result<String, String> {
    match source.map(SourceId::parse) {
        Some(id @ SourceId::Server(_)) => match opencode::open(&id, Limits::default()) {
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
