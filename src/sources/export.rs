//! Reads what `opencode export <id>` writes: `{info: Session, messages: [{info, parts}]}`, the
//! same objects the HTTP API serves. Several documents may follow each other in one input
//! (`cat a.json b.json | oc-calls --export -`); each is parsed as it streams in.

use super::{convert, Entry, Fault, Source, SourceId};
use crate::record::Session;
use serde_json::Value;
use std::io::Read;

/// One exported session: its `Session` object and its messages.
pub struct Export {
    pub info: Value,
    pub messages: Value,
}

/// Every export document in `input`, in order. Errors name the document (1-based) and why.
pub fn read(input: impl Read) -> Result<Vec<Export>, String> {
    let mut out = Vec::new();
    let docs =
        serde_json::Deserializer::from_reader(std::io::BufReader::new(input)).into_iter::<Value>();
    for (i, doc) in docs.enumerate() {
        let n = i + 1;
        let mut doc = doc.map_err(|e| format!("document {n}: not JSON: {e}"))?;
        let o = doc
            .as_object_mut()
            .ok_or_else(|| format!("document {n}: not an object"))?;
        let info = o.remove("info").filter(Value::is_object).ok_or_else(|| {
            format!("document {n}: no \"info\" object (not an `opencode export` document)")
        })?;
        let messages = o
            .remove("messages")
            .filter(Value::is_array)
            .ok_or_else(|| format!("document {n}: no \"messages\" list"))?;
        out.push(Export { info, messages });
    }
    Ok(out)
}

/// The documents of one export file, as a [`Source`].
pub struct ExportFile {
    /// The file as named (`-`: stdin).
    pub file: String,
    pub docs: Vec<Export>,
}

impl ExportFile {
    fn doc(&self, id: &str) -> Option<&Export> {
        self.docs.iter().find(|d| d.info["id"] == id)
    }
}

impl Source for ExportFile {
    fn id(&self) -> SourceId {
        SourceId::Export(self.file.clone())
    }

    fn index(&self) -> Result<Vec<Entry>, Fault> {
        let all: Vec<&str> = self
            .docs
            .iter()
            .filter_map(|d| d.info["id"].as_str())
            .collect();
        Ok(self.sessions(&all)?.iter().map(Entry::of).collect())
    }

    /// The documents' sessions named in `ids`, in file order.
    fn sessions(&self, ids: &[&str]) -> Result<Vec<Session>, Fault> {
        let name = self.id().to_string();
        self.docs
            .iter()
            .filter(|d| ids.iter().any(|id| d.info["id"] == *id))
            .map(|d| convert::session_of(&d.info, None, &name).map_err(Fault::Broken))
            .collect()
    }

    fn session(&self, id: &str) -> Result<Option<Value>, Fault> {
        Ok(self.doc(id).map(|d| d.info.clone()))
    }

    fn messages(&self, id: &str) -> Result<Value, Fault> {
        self.doc(id)
            .map(|d| d.messages.clone())
            .ok_or_else(|| Fault::NotFound(format!("session {id}: not in {}", self.id())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_follow_each_other_and_a_wrong_one_is_named() {
        let two = r#"{"info":{"id":"ses_a"},"messages":[]}
        {"info":{"id":"ses_b"},"messages":[{"info":{},"parts":[]}]}"#;
        let got = read(two.as_bytes()).unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(got[1].info["id"], "ses_b");
        assert_eq!(got[1].messages.as_array().unwrap().len(), 1);
        let e = read(r#"{"info":{"id":"ses_a"},"messages":[]} {"id":"x"}"#.as_bytes())
            .err()
            .unwrap();
        assert_eq!(
            e,
            "document 2: no \"info\" object (not an `opencode export` document)"
        );
    }
}
