//! The fingerprint stream, contract v1: the JSON Lines records every command reads and writes.
//!
//! Each line is one JSON object with a `kind`. Commands parse the kinds they understand into the
//! typed records below and pass every other line through byte for byte, so unknown kinds and
//! fields survive a whole pipeline. All times are integer milliseconds since the Unix epoch.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// `{"kind":"session", ...}`: one opencode session, as `oc-sessions` lists it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Session {
    pub id: String,
    #[serde(default)]
    pub parent: Option<String>,
    #[serde(default)]
    pub agent: Option<String>,
    #[serde(default)]
    pub title: Option<String>,
    #[serde(default)]
    pub directory: Option<String>,
    #[serde(default)]
    pub created: Option<i64>,
    #[serde(default)]
    pub updated: Option<i64>,
    /// `busy`, `idle`, `retry`, or null when the source cannot tell (the database).
    #[serde(default)]
    pub status: Option<String>,
    /// Where the session was read from: a server URL when a server lists it (its live fields
    /// win and a nudge goes there), else the database path (or `export:FILE`).
    #[serde(default)]
    pub source: Option<String>,
    /// Every source that lists this session (servers first, then the database), when more
    /// than one does.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<String>,
    /// `provider/model`.
    #[serde(default)]
    pub model: Option<String>,
    /// Fixture label: `flag` or `no_flag`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expect: Option<String>,
    /// Fixture label: must not flag before this time, must flag after it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flag_after: Option<i64>,
    /// Liveness evidence and anything else a newer producer adds.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `{"kind":"call", ...}`: one tool call, scrubbed. Never carries message text, tool output or
/// file content.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Call {
    pub session: String,
    /// The tool part id (`prt_...`).
    pub id: String,
    /// Tool start.
    pub t: i64,
    #[serde(default)]
    pub end: Option<i64>,
    pub tool: String,
    #[serde(default)]
    pub args: Map<String, Value>,
    /// `pending`, `running`, `completed` or `error`.
    pub status: String,
    #[serde(default)]
    pub landed: bool,
    #[serde(default)]
    pub exit: Option<i64>,
    /// For reads: the file's total lines.
    #[serde(default)]
    pub file_lines: Option<i64>,
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub cost: Option<f64>,
    /// `sha1:` + 12 hex of the tool's output (or of the error text of a failed call); null while
    /// the call runs or where the source kept no output. Equal outputs hash equal; the content
    /// itself never leaves `oc-calls`.
    #[serde(default)]
    pub out: Option<String>,
}

/// `{"kind":"blind", ...}`: a reader met a shape it cannot interpret. Never read as "no calls".
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Blind {
    pub source: String,
    pub reason: String,
}

impl Blind {
    /// Reads a `blind` line leniently: a missing field reads `?`, because a blind record that is
    /// itself malformed still means the tick could not see.
    pub fn read(line: &str) -> Blind {
        let v: Value = serde_json::from_str(line).unwrap_or_default();
        let field = |k: &str| v[k].as_str().unwrap_or("?").to_string();
        Blind {
            source: field("source"),
            reason: field("reason"),
        }
    }
}

/// `{"kind":"source", ...}`: one opencode source that was read (a database or a server), and
/// how it was found. Lets later stages tell "no opencode" from "opencode with nothing to judge",
/// and an operator see what the watchdog sees.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Source {
    pub source: String,
    /// `database` or `server`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reader: Option<String>,
    /// `argument`, `configured`, `default` (the database at opencode's own path), `discovered`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub found: Vec<String>,
    #[serde(default)]
    pub version: Option<String>,
    /// Sessions listed from this source.
    pub sessions: usize,
    /// The rest: `schema` (a database's newest migration), `pids` and `projects` (a server's).
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// Serialises `value` as one compact JSON object with `kind` first.
pub fn to_line<T: Serialize>(kind: &str, value: &T) -> serde_json::Result<String> {
    let body = serde_json::to_string(value)?;
    let rest = body.strip_prefix('{').unwrap_or(&body);
    if rest == "}" {
        Ok(format!("{{\"kind\":\"{kind}\"}}"))
    } else {
        Ok(format!("{{\"kind\":\"{kind}\",{rest}"))
    }
}

/// Only the `kind` of a line, for routing before a full parse.
#[derive(Deserialize)]
pub struct KindOnly {
    pub kind: Option<String>,
}

/// Reads the `kind` of a line. Errors name the problem, as serde_json reports it.
pub fn kind_of(line: &str) -> Result<Option<String>, serde_json::Error> {
    let k: KindOnly = serde_json::from_str(line)?;
    Ok(k.kind)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn to_line_puts_kind_first() {
        let b = Blind {
            source: "http://x".into(),
            reason: "r".into(),
        };
        assert_eq!(
            to_line("blind", &b).unwrap(),
            r#"{"kind":"blind","source":"http://x","reason":"r"}"#
        );
    }

    #[test]
    fn session_keeps_unknown_fields() {
        let s: Session = serde_json::from_str(r#"{"id":"ses_a","future":{"x":1}}"#).unwrap();
        assert_eq!(s.extra["future"]["x"], 1);
        let back = to_line("session", &s).unwrap();
        assert!(back.contains(r#""future":{"x":1}"#), "{back}");
    }
}
