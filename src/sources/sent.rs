//! What `oc-calls --export PATH` was given, told apart: a transcript Claude Code or Codex wrote,
//! by its first record, handed to that agent's wing ([`super::claude_code`], [`super::codex`]);
//! anything else is left to the caller (an opencode export, read by [`super::opencode::export`]).

use super::transcript::Read;
use crate::record::Program;
use serde_json::Value;
use std::path::Path;

/// Which agent wrote the transcript whose first line is `first` (`None`: neither Claude Code
/// nor Codex; an opencode export, or something else).
pub fn sniff(first: &str) -> Option<Program> {
    let v: Value = serde_json::from_str(first.trim()).ok()?;
    let ty = v.get("type")?.as_str()?;
    if ty == "session_meta" && v.get("payload").is_some_and(Value::is_object) {
        return Some(Program::Codex);
    }
    // every Claude Code record carries its session id (queue operations, prompts, replies) but
    // the summaries a resumed session's transcript may open with, which name the record they
    // summarise
    let claude = v.get("sessionId").is_some_and(Value::is_string)
        || (ty == "summary" && v.get("leafUuid").is_some_and(Value::is_string));
    claude.then_some(Program::ClaudeCode)
}

/// The first non-blank line of `text`.
pub fn first_line(text: &str) -> &str {
    text.lines().find(|l| !l.trim().is_empty()).unwrap_or("")
}

/// Reads the transcript at `path` (named `name` in `source` strings) and, for a Claude Code
/// session, its subagents beside it. `Ok(None)`: not a transcript either agent wrote.
pub fn read_file(path: &Path, name: &str) -> Result<Option<Read>, String> {
    use std::io::BufRead;
    let cannot = |e: std::io::Error| format!("{name}: cannot read: {e}");
    // a folder may hold large files neither agent wrote: their first line is enough to skip them
    let f = std::fs::File::open(path).map_err(cannot)?;
    let mut first = String::new();
    for line in std::io::BufReader::new(f).lines() {
        first = line.map_err(cannot)?;
        if !first.trim().is_empty() {
            break;
        }
    }
    match sniff(&first) {
        Some(Program::ClaudeCode) => super::claude_code::read_with_subagents(path, name).map(Some),
        Some(Program::Codex) => super::codex::read_file(path, name).map(Some),
        Some(Program::Opencode) | None => Ok(None),
    }
}

/// Reads a transcript given as text (stdin): the session alone, without files beside it.
pub fn read_text(name: &str, text: &str) -> Option<Read> {
    match sniff(first_line(text))? {
        Program::ClaudeCode => Some(super::claude_code::read(name, text, &[])),
        Program::Codex => Some(super::codex::read(name, text)),
        Program::Opencode => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_record_tells_which_agent_wrote_a_transcript() {
        let claude = r#"{"type":"queue-operation","operation":"enqueue","sessionId":"69dd"}"#;
        let codex = r#"{"timestamp":"2026-12-04T18:26:25.797Z","ordinal":0,"type":"session_meta","payload":{"id":"01a2"}}"#;
        assert_eq!(sniff(claude), Some(Program::ClaudeCode));
        assert_eq!(sniff(codex), Some(Program::Codex));
        let resumed = r#"{"type":"summary","summary":"Fix the tests","leafUuid":"2090220a"}"#;
        assert_eq!(sniff(resumed), Some(Program::ClaudeCode));
        // an opencode export, a fingerprint stream, something else: neither
        assert_eq!(sniff("{"), None);
        assert_eq!(sniff(r#"{"info":{"id":"ses_a"},"messages":[]}"#), None);
        assert_eq!(sniff(r#"{"kind":"call","session":"s"}"#), None);
        assert_eq!(sniff(r#"{"type":"session_meta","payload":"x"}"#), None);
    }
}
